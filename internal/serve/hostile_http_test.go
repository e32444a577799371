package serve_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/handofftest"
	"github.com/pdmcp/pdmcp/internal/mcptest"
	"github.com/pdmcp/pdmcp/internal/serve"
)

// The hostile-input suite: malformed JSON-RPC, oversized bodies, oversized
// text arguments, undeclared arguments, wrong types and unknown tools, on
// every tool the server offers (the document and file tools on one stack,
// the section and hand-off tools on another). Each gets a clear error, the
// Gateway's crypto and access-list routes see nothing, and another user
// is served throughout. Run alone:
//
//	go test ./internal/serve -run TestHostileInput

// gatewayWork are the routes a hostile call must never reach.
var gatewayWork = []string{api.RouteEncrypt, api.RouteDecrypt, api.RouteACLGrant, api.RouteACLGet, api.RouteACLRevoke,
	api.RouteACLUpdate, api.RouteKeyExpire, api.RouteKeyRemove}

func TestHostileInputDocumentAndFileTools(t *testing.T) {
	root := t.TempDir()
	hs := newHTTPStack(t, 8, func(_ *testing.T, _ *httpStack, _ string, lo *grant.LaunchOptions) {
		lo.FileRoot = root
		lo.Tools = append(grant.DocumentTools(), grant.FileTools()...)
	})
	hostileSuite(t, hs, "bob", "pw-b", "read_protected_document", map[string]any{"documentId": "proposal-aurora"})
}

func TestHostileInputSectionAndHandOffTools(t *testing.T) {
	var w *handofftest.World
	hs := newHTTPStack(t, 8, withSteps(&w, handofftest.Options{}))
	hostileSuite(t, hs, "bob", "pw-b", "list_approved_documents", map[string]any{})
}

// hostileSuite sends every kind of hostile input as alice, checking each
// answer, then checks that the other user's good call is served and that
// nothing reached the Gateway's work routes.
func hostileSuite(t *testing.T, hs *httpStack, other, otherPW, goodTool string, goodArgs map[string]any) {
	ctx := context.Background()
	tok := hs.token(t, "alice", "pw-a")
	alice := hs.connect(t, tok)
	bob := hs.connect(t, hs.token(t, other, otherPW))
	stillServed := func(after string) {
		t.Helper()
		if m, isErr := mcptest.Call(t, bob, goodTool, goodArgs); isErr {
			t.Fatalf("after %s, %s was not served: %v", after, other, m)
		}
	}
	stillServed("nothing")
	tools, err := alice.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	before := map[string]int{}
	for _, r := range gatewayWork {
		before[r] = hs.env.Gateway.Count(r)
	}
	// A refusal naming want (an argument) with one of the codes.
	refused := func(what string, res *mcp.CallToolResult, err error, want string, codes ...string) {
		t.Helper()
		if err != nil {
			// A protocol error is a clear error too, when it says what.
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: protocol error %q does not name %q", what, err, want)
			}
			return
		}
		if !res.IsError {
			t.Errorf("%s: answered as a success", what)
			return
		}
		m := mcptest.Result(t, res)
		code, _ := m["code"].(string)
		detail, _ := m["detail"].(string)
		if m["refused"] != true || (len(codes) > 0 && !contains(codes, code)) || !strings.Contains(detail, want) {
			t.Errorf("%s: refusal %v, want one of %v naming %q", what, m, codes, want)
		}
	}
	for _, tool := range tools.Tools {
		schema, _ := json.Marshal(tool.InputSchema)
		var s struct {
			Properties map[string]struct {
				Type string `json:"type"`
			} `json:"properties"`
		}
		if err := json.Unmarshal(schema, &s); err != nil {
			t.Fatal(err)
		}
		t.Run(tool.Name, func(t *testing.T) {
			call := func(args map[string]any) (*mcp.CallToolResult, error) {
				return alice.CallTool(ctx, &mcp.CallToolParams{Name: tool.Name, Arguments: args})
			}
			res, err := call(map[string]any{"zzUndeclared": "x"})
			refused("undeclared argument", res, err, "zzUndeclared", "UNEXPECTED_ARGUMENT")
			for name, p := range s.Properties {
				var wrong any = 12345
				if p.Type != "string" {
					wrong = "a string"
				}
				// Every other argument present and well typed, so the
				// wrong type is what is refused.
				args := map[string]any{}
				for other, op := range s.Properties {
					if op.Type == "string" {
						args[other] = "x"
					}
				}
				args[name] = wrong
				res, err = call(args)
				refused("wrong type of "+name, res, err, name, "INVALID_ARGUMENT")
				if p.Type == "string" {
					// Just under the request bound: the tool, not the
					// transport, must refuse it.
					res, err = call(map[string]any{name: strings.Repeat("A", serve.MaxRequestBytes-4096)})
					if err == nil && !res.IsError {
						t.Errorf("an oversized %s was served", name)
					} else if err == nil {
						if m := mcptest.Result(t, res); m["refused"] != true || m["detail"] == "" {
							t.Errorf("oversized %s: %v", name, m)
						}
					}
				}
			}
			res, err = call(map[string]any{"zzUndeclared": map[string]any{"nested": []any{1, 2, 3}}})
			refused("undeclared object", res, err, "zzUndeclared", "UNEXPECTED_ARGUMENT")
		})
		stillServed("hostile calls of " + tool.Name)
	}

	// An unknown tool.
	res, err := alice.CallTool(ctx, &mcp.CallToolParams{Name: "no_such_tool", Arguments: map[string]any{}})
	if err == nil && (res == nil || !res.IsError) {
		t.Error("an unknown tool was served")
	}
	if err != nil && !strings.Contains(err.Error(), "no_such_tool") {
		t.Errorf("unknown tool: %v does not name it", err)
	}
	stillServed("an unknown tool")

	// Malformed JSON-RPC and oversized bodies, raw.
	post := func(body string) (int, string) {
		resp, b := hs.post(t, tok, "", "2026-07-28", body)
		return resp.StatusCode, b
	}
	call := func(params string) string {
		return `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":` + params + `}`
	}
	for _, tc := range []struct{ name, body string }{
		{"truncated", `{"jsonrpc":"2.0","id":1,"method":`},
		{"not JSON", `hello`},
		{"empty", ``},
		{"a string", `"tools/list"`},
		{"batch", `[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]`},
		{"wrong version", `{"jsonrpc":"1.0","id":1,"method":"tools/list"}`},
		{"no method", `{"jsonrpc":"2.0","id":1}`},
		{"numeric method", `{"jsonrpc":"2.0","id":1,"method":7}`},
		{"object id", `{"jsonrpc":"2.0","id":{"a":1},"method":"tools/list"}`},
		{"params an array", call(`[1,2]`)},
		{"no tool name", call(`{"arguments":{}}`)},
		{"arguments an array", call(`{"name":"list_approved_documents","arguments":[1]}`)},
		{"arguments a string", call(`{"name":"list_approved_documents","arguments":"x"}`)},
		{"deep nesting", call(`{"name":"list_approved_documents","arguments":{"category":` +
			strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + `}}`)},
		{"over the body bound", call(`{"name":"list_approved_documents","arguments":{"category":"` +
			strings.Repeat("B", serve.MaxRequestBytes) + `"}}`)},
	} {
		status, b := post(tc.body)
		// A clear error: an HTTP error status, or a JSON-RPC error, or a
		// refused tool result; never a success, never a crash.
		clear := status >= 400 || strings.Contains(b, `"error"`) || strings.Contains(b, `"isError":true`)
		if !clear {
			t.Errorf("%s: %d %.300s, want an error", tc.name, status, b)
		}
		if status >= 500 {
			t.Errorf("%s: server error %d %.300s", tc.name, status, b)
		}
		stillServed(tc.name)
	}
	for _, r := range gatewayWork {
		if n := hs.env.Gateway.Count(r) - before[r]; n > 0 && r != api.RouteDecrypt {
			t.Errorf("hostile input reached %s %d times", r, n)
		}
	}
	// The good calls were decrypts of the other user; alice made none.
	if goodTool != "read_protected_document" {
		if n := hs.env.Gateway.Count(api.RouteDecrypt) - before[api.RouteDecrypt]; n > 0 {
			t.Errorf("hostile input reached %s %d times", api.RouteDecrypt, n)
		}
	}
	if m, isErr := mcptest.Call(t, alice, "list_approved_documents", map[string]any{}); isErr {
		t.Fatalf("alice is no longer served after her hostile calls: %v", m)
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
