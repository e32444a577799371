package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/grant"
)

// BenchmarkStatelessCallSchemas: one tools/call without MCP sessions
// (2026-07-28) through the go-sdk's stateless handler, to a tool whose
// schemas (read_protected_document's) are given as *jsonschema.Schema
// ("walked") or as their JSON marshalled once ("marshalled-once", as
// newTool gives them), answered as one JSON body or, "-sse", as an SSE
// stream. allocs/op and B/op are the figures that do not depend on the
// machine's load. Run:
//
//	go test -run X -bench StatelessCallSchemas -benchmem ./server/
func BenchmarkStatelessCallSchemas(b *testing.B) {
	in, err := inputSchema[readInput]()
	if err != nil {
		b.Fatal(err)
	}
	out, err := jsonschema.For[readOutput](&jsonschema.ForOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		in, out any
		sse     bool
	}{{"walked", in, out, false}, {"marshalled-once", schemaJSON(in), schemaJSON(out), false},
		{"marshalled-once-sse", schemaJSON(in), schemaJSON(out), true}} {
		b.Run(tc.name, func(b *testing.B) {
			srv := mcp.NewServer(&mcp.Implementation{Name: Name, Version: "bench"}, nil)
			srv.AddTool(&mcp.Tool{Name: grant.ToolReadProtectedDocument, InputSchema: tc.in, OutputSchema: tc.out},
				func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
					return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil
				})
			h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
				&mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: !tc.sse})
			ts := httptest.NewServer(h)
			defer ts.Close()
			body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read_protected_document",` +
				`"arguments":{"documentId":"d"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",` +
				`"io.modelcontextprotocol/clientInfo":{"name":"bench","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}}}`
			call := func() {
				req, _ := http.NewRequest("POST", ts.URL, strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json, text/event-stream")
				req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
				req.Header.Set("Mcp-Method", "tools/call")
				req.Header.Set("Mcp-Name", grant.ToolReadProtectedDocument)
				resp, err := ts.Client().Do(req)
				if err != nil {
					b.Fatal(err)
				}
				data, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if tc.sse {
					// One event: its data line is the message.
					_, after, _ := strings.Cut(string(data), "data: ")
					data = []byte(strings.TrimSpace(after))
				}
				var msg struct {
					Result json.RawMessage `json:"result"`
				}
				if resp.StatusCode != http.StatusOK || json.Unmarshal(data, &msg) != nil || msg.Result == nil {
					b.Fatalf("tools/call: %d %s", resp.StatusCode, data)
				}
			}
			call()
			b.ResetTimer()
			for range b.N {
				call()
			}
		})
	}
}
