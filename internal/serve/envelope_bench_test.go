package serve

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/auth"
)

// BenchmarkStatelessPOSTChecks: what internal/serve does to one 2026-07-28
// tools/call POST before the go-sdk sees it, the user limiter and the
// JSON-RPC shape, header and version checks (UserLimiter.Wrap around
// jsonRPCShape), with tracing's request-id note ("noted") and without.
// The handler inside only reads the body, as the SDK would; "fixture" is
// that handler alone, the benchmark's own cost, to subtract. Run:
//
//	go test -run X -bench StatelessPOSTChecks -benchmem ./internal/serve/
func BenchmarkStatelessPOSTChecks(b *testing.B) {
	body := `{"jsonrpc":"2.0","id":17,"method":"tools/call","params":{"name":"read_protected_document",` +
		`"arguments":{"documentId":"doc-0001"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",` +
		`"io.modelcontextprotocol/clientInfo":{"name":"bench","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}}}`
	for _, name := range []string{"fixture", "plain", "noted"} {
		b.Run(name, func(b *testing.B) {
			l := NewUserLimiter(UserLimits{}, nil, nil, nil)
			sink := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if _, err := io.Copy(io.Discard, r.Body); err != nil {
					b.Fatal(err)
				}
				w.WriteHeader(http.StatusOK)
			})
			var h http.Handler = sink
			if name != "fixture" {
				h = l.Wrap(jsonRPCShape(mcp.SupportedProtocolVersions(), name == "noted", sink))
			}
			ctx := auth.ContextWithCaller(b.Context(), &auth.Caller{Issuer: "https://idp.test", Subject: "alice"}, "tok")
			b.ReportAllocs()
			for b.Loop() {
				r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/mcp", strings.NewReader(body))
				r.Header.Set("Content-Type", "application/json")
				r.Header.Set("Mcp-Protocol-Version", "2026-07-28")
				r.Header.Set("Mcp-Method", "tools/call")
				r.Header.Set("Mcp-Name", "read_protected_document")
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code != http.StatusOK {
					b.Fatalf("status %d: %s", w.Code, w.Body)
				}
			}
		})
	}
}

// BenchmarkParseEnvelope: a 2026-07-28 tools/call body's envelope by the
// one-pass scan (parseEnvelope) against the general path it falls back on
// (json.Valid, then the walk), in the same run. Run:
//
//	go test -run X -bench ParseEnvelope -benchmem ./internal/serve/
func BenchmarkParseEnvelope(b *testing.B) {
	body := []byte(`{"jsonrpc":"2.0","id":17,"method":"tools/call","params":{"name":"read_protected_document",` +
		`"arguments":{"documentId":"doc-0001"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",` +
		`"io.modelcontextprotocol/clientInfo":{"name":"bench","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}}}`)
	for _, tc := range []struct {
		name  string
		parse func([]byte) (*envelope, bool)
	}{
		{"scan", parseEnvelope},
		{"general", parseEnvelopeGeneral},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := tc.parse(body); !ok {
					b.Fatal("not parsed")
				}
			}
		})
	}
}
