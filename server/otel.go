package server

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/pdmcp/pdmcp/audit"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/telemetry"
)

// Attribute names of the MCP request's span (the OpenTelemetry semantic
// conventions for MCP) and pdmcp's own beside them.
const (
	AttrMCPMethod        = "mcp.method.name"
	AttrMCPSession       = "mcp.session.id"
	AttrMCPProtocol      = "mcp.protocol.version"
	AttrJSONRPCRequestID = "jsonrpc.request.id"
	AttrToolName         = telemetry.AttrToolName
	AttrOperationName    = telemetry.AttrOperationName
	AttrNetworkTransport = "network.transport"
	AttrNetworkProtocol  = "network.protocol.name"
	AttrErrorType        = "error.type"
	AttrRPCStatusCode    = telemetry.AttrRPCStatusCode

	AttrCaller      = "pdmcp.caller"
	AttrOutcome     = "pdmcp.outcome"
	AttrLayer       = "pdmcp.refusal.layer"
	AttrCode        = "pdmcp.refusal.code"
	AttrDocumentID  = "pdmcp.document.id"
	AttrFragmentID  = "pdmcp.fragment.id"
	AttrStepID      = "pdmcp.step.id"
	AttrVersion     = "pdmcp.version"
	AttrReplaced    = "pdmcp.session.replaced"
	AttrGatewayReqs = "pdmcp.gateway.requests"

	// ErrorTypeTool is error.type of a call whose result is an error (a
	// refusal): the request itself succeeded, so the span's status stays
	// unset.
	ErrorTypeTool = telemetry.ErrorTypeTool
	// OperationExecuteTool is the operation name (AttrOperationName) of tools/call.
	OperationExecuteTool = telemetry.OperationExecuteTool
)

// Transports as network.transport names them.
const (
	TransportPipe = "pipe" // stdio
	TransportTCP  = "tcp"  // Streamable HTTP
)

// metaTrace reads W3C trace context from a request's params._meta, where
// the conventions (and, from 2026-07-28, the protocol's reserved unprefixed
// keys) carry traceparent, tracestate and baggage.
type metaTrace map[string]any

func (m metaTrace) Get(key string) string {
	v, _ := m[key].(string)
	return v
}

func (m metaTrace) Set(string, string) {}

func (m metaTrace) Keys() []string { return []string{"traceparent", "tracestate", "baggage"} }

// traceContext reads the W3C trace context, from _meta and from the HTTP
// request's headers. Baggage is not read: no span or line uses it.
var traceContext = propagation.TraceContext{}

// maxDigests bounds digestCache: past it the cache starts again empty.
const maxDigests = 4096

// digestCache keeps audit.Digest12 of the session ids and caller ids a
// server's spans name, so a session's requests hash its id once, not once
// each; bounded by maxDigests.
type digestCache struct {
	mu sync.Mutex
	m  map[string]string
}

// digest is audit.Digest12(s), "" for "".
func (d *digestCache) digest(s string) string {
	if s == "" {
		return ""
	}
	d.mu.Lock()
	v, ok := d.m[s]
	d.mu.Unlock()
	if ok {
		return v
	}
	v = audit.Digest12(s)
	d.mu.Lock()
	if d.m == nil || len(d.m) >= maxDigests {
		d.m = make(map[string]string)
	}
	d.m[s] = v
	d.mu.Unlock()
	return v
}

// traceRequests is the receiving middleware that makes one SERVER span per
// MCP request: named "{method} {tool}" for a tool the build knows (the
// model's text never names a span), parented by the trace context of
// params._meta, linked to the HTTP request's span (its traceparent header,
// which the serving edge sets to its own span), or parented by that when
// _meta carries none. A request that fails is an error span with the
// JSON-RPC code; a tool call whose result is an error (a refusal) carries
// error.type ErrorTypeTool and its layer and code, its status left unset.
// Nothing it records is an argument, a result, a token or a subject.
func (s *Server) traceRequests(next mcp.MethodHandler) mcp.MethodHandler {
	tracer := s.cfg.Tracer
	// The names of tools/call's spans, one per known tool, made once.
	callNames := map[string]string{}
	for _, t := range grant.AllTools() {
		callNames[t] = "tools/call " + t
	}
	serverKind := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}
	transport, isHTTP := s.transport(), s.cfg.Transport == "http"
	digests := &digestCache{}
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		var header telemetry.HeaderCarrier
		if ex := req.GetExtra(); ex != nil && ex.Header != nil {
			header = telemetry.HeaderCarrier(ex.Header)
		}
		parent := ctx
		opts := serverKind
		var metaSpan trace.SpanContext
		if m := metaOf(req.GetParams()); len(m) > 0 {
			metaSpan = trace.SpanContextFromContext(traceContext.Extract(context.Background(), metaTrace(m)))
		}
		switch {
		case metaSpan.IsValid():
			parent = trace.ContextWithRemoteSpanContext(ctx, metaSpan)
			if header != nil {
				if httpSpan := trace.SpanContextFromContext(traceContext.Extract(context.Background(), header)); httpSpan.IsValid() {
					opts = []trace.SpanStartOption{serverKind[0], trace.WithLinks(trace.Link{SpanContext: httpSpan})}
				}
			}
		case header != nil:
			// Under the HTTP request's span, when it sent one.
			parent = traceContext.Extract(ctx, header)
		}
		tool, name := "", method
		if p, ok := req.GetParams().(*mcp.CallToolParamsRaw); ok && p != nil && method == "tools/call" {
			if n, known := callNames[p.Name]; known {
				tool, name = p.Name, n
			}
		}
		ctx, span := tracer.Start(parent, name, opts...)
		defer span.End()
		// A panic below is recovered outside (recoverPanics): the span
		// says so and lets it pass.
		defer func() {
			if v := recover(); v != nil {
				telemetry.Fail(span, "panic")
				panic(v)
			}
		}()
		if span.IsRecording() {
			// One slice of the right size: set at once, it is one copy.
			attrs := make([]attribute.KeyValue, 0, 9)
			attrs = append(attrs, attribute.String(AttrMCPMethod, method), attribute.String(AttrNetworkTransport, transport))
			if isHTTP {
				attrs = append(attrs, attribute.String(AttrNetworkProtocol, "http"))
			}
			if method == "tools/call" {
				attrs = append(attrs, attribute.String(AttrOperationName, OperationExecuteTool))
				if tool != "" {
					attrs = append(attrs, attribute.String(AttrToolName, tool))
				}
			}
			if v := protocolOf(req); v != "" {
				attrs = append(attrs, attribute.String(AttrMCPProtocol, v))
			}
			// A notification has no id, and so no attribute.
			if id := requestIDOf(req); id != "" {
				attrs = append(attrs, attribute.String(AttrJSONRPCRequestID, id))
			}
			// The session id lets its holder go on in the session: the span
			// names it by digest, as the audit names handles.
			if ss, ok := req.GetSession().(*mcp.ServerSession); ok && ss != nil && ss.ID() != "" {
				attrs = append(attrs, attribute.String(AttrMCPSession, digests.digest(ss.ID())))
			}
			if c := digests.digest(callerOf(req).ID); c != "" {
				attrs = append(attrs, attribute.String(AttrCaller, c))
			}
			span.SetAttributes(attrs...)
		}
		res, err := next(ctx, method, req)
		switch {
		case err != nil:
			code := "_OTHER"
			var we *jsonrpc.Error
			if errors.As(err, &we) {
				code = strconv.FormatInt(we.Code, 10)
				span.SetAttributes(attribute.String(AttrRPCStatusCode, code))
			}
			span.SetAttributes(attribute.String(AttrErrorType, code))
			// The error's message may quote the request: not recorded.
			span.SetStatus(codes.Error, "JSON-RPC error "+code)
		default:
			if r, ok := res.(*mcp.CallToolResult); ok && r != nil && r.IsError {
				span.SetAttributes(attribute.String(AttrErrorType, ErrorTypeTool))
			}
		}
		return res, err
	}
}

// Tracer is the server's tracer, nil when it does not trace: the serving
// edge traces its HTTP requests and token checks with it.
func (s *Server) Tracer() trace.Tracer { return s.cfg.Tracer }

// metaOf is a request's params._meta; nil when it has no params at all (a
// notification sent without them arrives as a nil pointer in the
// interface, whose GetMeta would panic).
func metaOf(p mcp.Params) map[string]any {
	if p == nil {
		return nil
	}
	if v := reflect.ValueOf(p); v.Kind() == reflect.Pointer && v.IsNil() {
		return nil
	}
	return p.GetMeta()
}

// transport is network.transport of this server's requests.
func (s *Server) transport() string {
	if s.cfg.Transport == "http" {
		return TransportTCP
	}
	return TransportPipe
}

// protocolOf is the request's protocol revision: its _meta's from
// 2026-07-28 on, else the session's from initialize.
func protocolOf(req mcp.Request) string {
	type versioned interface{ ProtocolVersion() string }
	if v, ok := req.(versioned); ok {
		return v.ProtocolVersion()
	}
	return ""
}

// traceCall records on the call's span what its audit line says of it:
// the outcome, a refusal's layer and code, the ids the line names and how
// many Gateway requests it made. The caller is named by digest.
func traceCall(span trace.Span, line *audit.ToolCall) {
	if !span.IsRecording() {
		return
	}
	// Sized for all of them, so the slice is made once.
	attrs := make([]attribute.KeyValue, 0, 9)
	attrs = append(attrs, attribute.String(AttrOutcome, line.Outcome),
		attribute.Int(AttrGatewayReqs, len(line.GatewayRequests)))
	for _, a := range [...]struct{ k, v string }{{AttrLayer, line.Layer}, {AttrCode, line.Code},
		{AttrDocumentID, line.DocumentID}, {AttrFragmentID, line.FragmentID}, {AttrStepID, line.StepID}} {
		if a.v != "" {
			attrs = append(attrs, attribute.String(a.k, a.v))
		}
	}
	if line.Version != 0 {
		attrs = append(attrs, attribute.Int(AttrVersion, line.Version))
	}
	if line.SessionReplaced {
		attrs = append(attrs, attribute.Bool(AttrReplaced, true))
	}
	span.SetAttributes(attrs...)
}

// SpanTokenExchange names the span of a caller's token exchange (HTTP),
// under the pool's subject-token step.
const SpanTokenExchange = telemetry.SpanTokenExchange

// The file steps of a save, each a span under the call's: the encrypted
// bytes written to a temporary file, linked to the version's name, and
// made durable with the folder. They name no path: the call's span names
// the document.
const (
	SpanFileWrite = "pdmcp.file.write"
	SpanFileLink  = "pdmcp.file.link"
	SpanFileSync  = "pdmcp.file.sync"
)

// fileStep runs fn as the span name under ctx's span (nothing when not
// tracing); a failure is marked by class only (the error may name a path).
func fileStep(ctx context.Context, name string, fn func() error) error {
	_, span := telemetry.Child(ctx, name)
	err := fn()
	if err != nil {
		telemetry.Fail(span, telemetry.ErrorFile)
	}
	span.End()
	return err
}
