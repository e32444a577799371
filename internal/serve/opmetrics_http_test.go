package serve_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/server"
)

// opSeries is the name and labels of one count series of
// mcp_server_operation_duration_seconds, as /metrics prints them.
func opSeries(method, tool, errType, proto string) string {
	return `mcp_server_operation_duration_seconds_count{error_type="` + errType + `",gen_ai_tool_name="` + tool +
		`",mcp_method_name="` + method + `",mcp_protocol_version="` + proto + `",network_transport="tcp"}`
}

// TestHTTPOperationDurationHistogram: each MCP request handled over HTTP
// is counted in mcp_server_operation_duration_seconds under its method,
// its tool (tools/call), its error type and its protocol revision, with or
// without a session and with tracing off; a tool or method name the build
// does not know never becomes a label.
func TestHTTPOperationDurationHistogram(t *testing.T) {
	hs := newHTTPStack(t, 4)
	tok := hs.token(t, "alice", "pw-a")
	const made = "made_up_never_a_label"
	modern := func(method, params string) {
		t.Helper()
		body := `{"jsonrpc":"2.0","id":1,"method":"` + method + `","params":{` + params + newMeta + `}}`
		h := map[string]string{"Mcp-Protocol-Version": server.NewestProtocol, "Mcp-Method": method}
		if status, _ := rawMCP(t, hs, false, tok, body, h); status != 200 && status != 400 && status != 404 {
			t.Fatalf("%s: status %d", method, status)
		}
	}
	call := func(tool, args string) {
		t.Helper()
		body := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"` + tool + `","arguments":` + args + `,` + newMeta + `}}`
		status, msg := rawMCP(t, hs, false, tok, body, map[string]string{"Mcp-Protocol-Version": server.NewestProtocol,
			"Mcp-Method": "tools/call", "Mcp-Name": tool})
		if status != 200 || msg["result"] == nil {
			t.Fatalf("call %s: status %d, %v", tool, status, msg)
		}
	}
	call(grant.ToolReadProtectedDocument, `{"documentId":"proposal-aurora"}`)
	call(grant.ToolReadProtectedDocument, `{"documentId":"proposal-aurora"}`)
	call(made, `{}`)
	modern("tools/list", "")
	modern("prompts/list", "")
	modern(made+"/method", "")

	cs := hs.dial(t, "session-host", hs.as(tok, nil), nil, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if _, err := cs.ListTools(context.Background(), nil); err != nil {
		t.Fatal(err)
	}

	for series, want := range map[string]float64{
		opSeries("tools/call", grant.ToolReadProtectedDocument, "", server.NewestProtocol): 2,
		opSeries("tools/call", "_OTHER", server.ErrorTypeTool, server.NewestProtocol):      1,
		opSeries("tools/list", "", "", server.NewestProtocol):                              1,
		opSeries("prompts/list", "", "-32601", server.NewestProtocol):                      1,
		opSeries("tools/list", "", "", "2025-11-25"):                                       1,
	} {
		if got, ok := hs.scrape(t, series); !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", series, got, ok, want)
		}
	}
	resp, err := http.Get(hs.opsURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	text, _ := io.ReadAll(resp.Body)
	if strings.Contains(string(text), made) {
		t.Errorf("/metrics carries a name the client made up")
	}
}
