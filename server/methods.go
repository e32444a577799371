package server

import (
	"encoding/json"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// NewestProtocol is the first protocol revision without MCP sessions: the
// serving edge answers requests that speak it statelessly, and every result
// on it carries resultType (completeOn).
const NewestProtocol = "2026-07-28"

// undeclared reports whether method belongs to a capability pdmcp does not
// declare at initialize or server/discover: it offers tools only, so
// prompts, resources (and their templates and subscriptions) and
// completion are answered -32601 (method not found), as the protocol asks
// of a method whose capability the server did not declare. The SDK would
// otherwise answer prompts/list and resources/list with empty lists, which
// contradicts the declaration.
func undeclared(method string) bool {
	return strings.HasPrefix(method, "prompts/") || strings.HasPrefix(method, "resources/") ||
		strings.HasPrefix(method, "completion/")
}

func methodNotFound(method string) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound,
		Message: "method not found: " + method + " (" + Name + " offers tools only; it declares no prompts, resources or completions)"}
}

// completeOn marks res, a result the tool gate makes itself, as complete
// when the caller speaks 2026-07-28 or later, where every result carries
// resultType. The SDK marks the results of registered tools so (its setter
// is unexported), but not a result a middleware returns; CallToolResult
// reads resultType from JSON, so a JSON round trip sets it. An earlier
// revision has no resultType, and gets none, as from the SDK.
func completeOn(req mcp.Request, res *mcp.CallToolResult) *mcp.CallToolResult {
	if ss, ok := req.GetSession().(*mcp.ServerSession); ok {
		if p := ss.InitializeParams(); p != nil && p.ProtocolVersion < NewestProtocol {
			return res
		}
	}
	b, err := json.Marshal(res)
	if err != nil {
		return res
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return res
	}
	fields["resultType"] = json.RawMessage(`"complete"`)
	if b, err = json.Marshal(fields); err != nil {
		return res
	}
	var out mcp.CallToolResult
	if err := json.Unmarshal(b, &out); err != nil {
		return res
	}
	return &out
}
