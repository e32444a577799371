package server

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/telemetry"
)

// OperationMetrics, when Config.Metrics has it, is told of each MCP
// request the server handled: the conventions' mcp.server.operation.duration.
type OperationMetrics interface {
	Operation(op Operation)
}

// Operation is one handled MCP request, as the conventions' attributes name
// it. Every field but Duration is one of a bounded set (operationOf), so a
// metric may take them as labels: a method or tool name the build does not
// know, a protocol revision it does not serve or an error code outside
// JSON-RPC's reserved range is telemetry.OtherValue, never the client's
// text.
type Operation struct {
	Method    string // AttrMCPMethod
	Tool      string // the tool's name (AttrToolName), tools/call only
	ErrorType string // AttrErrorType: "" when it succeeded
	Protocol  string // AttrMCPProtocol, "" when not yet negotiated
	Transport string // AttrNetworkTransport: TransportPipe or TransportTCP
	Duration  time.Duration
}

// measureRequests times each MCP request for om. A request the SDK refuses
// before any middleware (an unknown method, a malformed message) is not
// among them: it is answered without being handled.
func (s *Server) measureRequests(om OperationMetrics) mcp.Middleware {
	transport, served := s.transport(), mcp.SupportedProtocolVersions()
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (res mcp.Result, err error) {
			start := time.Now()
			defer func() {
				op := operationOf(method, req, transport, served)
				if v := recover(); v != nil {
					op.ErrorType, op.Duration = "panic", time.Since(start)
					om.Operation(op)
					panic(v)
				}
				op.ErrorType, op.Duration = errorTypeOf(res, err), time.Since(start)
				om.Operation(op)
			}()
			return next(ctx, method, req)
		}
	}
}

// operationOf is the bounded description of a request; served is the
// protocol revisions the SDK serves.
func operationOf(method string, req mcp.Request, transport string, served []string) Operation {
	op := Operation{Method: telemetry.MethodLabel(method), Transport: transport}
	if method == "tools/call" {
		op.Tool = telemetry.OtherValue
		if p, ok := req.GetParams().(*mcp.CallToolParamsRaw); ok && p != nil && grant.KnownTool(p.Name) {
			op.Tool = p.Name
		}
	}
	if v := protocolOf(req); v != "" {
		op.Protocol = telemetry.OtherValue
		if slices.Contains(served, v) {
			op.Protocol = v
		}
	}
	return op
}

// errorTypeOf is error.type of a request's outcome: the JSON-RPC error
// code (one of the reserved range, else OtherValue), ErrorTypeTool for a
// tool result that is an error (a refusal), "" for success.
func errorTypeOf(res mcp.Result, err error) string {
	if err != nil {
		var we *jsonrpc.Error
		if errors.As(err, &we) && we.Code >= -32768 && we.Code <= -32000 {
			return strconv.FormatInt(we.Code, 10)
		}
		return telemetry.OtherValue
	}
	if r, ok := res.(*mcp.CallToolResult); ok && r != nil && r.IsError {
		return ErrorTypeTool
	}
	return ""
}
