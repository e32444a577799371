package serve_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/internal/mcptest"
)

// TestHTTPHostAndOriginNameThisServer: a Host or Origin that names this
// server (its port under 127.0.0.1, localhost or [::1]; an Origin of either
// scheme) is served; any other is refused 403 before the token is looked
// at, whether the request carries a valid token or none.
func TestHTTPHostAndOriginNameThisServer(t *testing.T) {
	hs := newHTTPStack(t, 8)
	tok := hs.token(t, "alice", "pw-a")
	u, err := url.Parse(hs.url)
	if err != nil {
		t.Fatal(err)
	}
	port := u.Port()
	other := "1"
	if port == other {
		other = "2"
	}
	// What the conformance suite's dns-rebinding scenario sends: an
	// initialize with Host and Origin set.
	do := func(path, token, host, origin string) int {
		var req *http.Request
		if path == "/mcp" {
			req, _ = http.NewRequest("POST", "https://127.0.0.1:"+port+path, strings.NewReader(
				`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`))
		} else {
			req, _ = http.NewRequest("GET", "https://127.0.0.1:"+port+path, nil)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if host != "" {
			req.Host = host
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := hs.hc.Do(req)
		if err != nil {
			t.Error(err)
			return 0
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	tests := []struct {
		name, path, token, host, origin string
		want                            int
	}{
		{"own host, http origin", "/mcp", tok, "127.0.0.1:" + port, "http://127.0.0.1:" + port, 200},
		{"own host, https origin", "/mcp", tok, "127.0.0.1:" + port, "https://127.0.0.1:" + port, 200},
		{"localhost", "/mcp", tok, "localhost:" + port, "http://localhost:" + port, 200},
		{"[::1]", "/mcp", tok, "[::1]:" + port, "http://[::1]:" + port, 200},
		{"no origin", "/mcp", tok, "", "", 200},
		{"good origin, no token: the token check answers", "/mcp", "", "", "http://localhost:" + port, 401},
		{"foreign origin with token", "/mcp", tok, "", "http://evil.example.com", 403},
		{"foreign origin without token", "/mcp", "", "", "http://evil.example.com", 403},
		{"own name, other port", "/mcp", tok, "", "http://127.0.0.1:" + other, 403},
		{"origin without port", "/mcp", tok, "", "https://127.0.0.1", 403},
		{"null origin", "/mcp", tok, "", "null", 403},
		{"rebinding: foreign host and origin, with token", "/mcp", tok, "evil.example.com", "http://evil.example.com", 403},
		{"rebinding: foreign host and origin, no token", "/mcp", "", "evil.example.com", "http://evil.example.com", 403},
		{"foreign host, own origin", "/mcp", tok, "evil.example.com:" + port, "http://127.0.0.1:" + port, 403},
		{"own host name, other port", "/mcp", tok, "localhost:" + other, "", 403},
		{"metadata, own host", "/.well-known/oauth-protected-resource/mcp", "", "localhost:" + port, "", 200},
		{"metadata, foreign host", "/.well-known/oauth-protected-resource/mcp", "", "evil.example.com", "", 403},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := do(tc.path, tc.token, tc.host, tc.origin); got != tc.want {
				t.Errorf("%s Host %q Origin %q: %d, want %d", tc.path, tc.host, tc.origin, got, tc.want)
			}
		})
	}

	// https://localhost:<port>/mcp works end to end: the certificate names
	// localhost, and the server takes the Host.
	hc := hs.as(tok, nil)
	c := mcp.NewClient(&mcp.Implementation{Name: "localhost-test", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{
		Endpoint: "https://localhost:" + port + "/mcp", HTTPClient: hc}, nil)
	if err != nil {
		t.Fatalf("connect to https://localhost:%s/mcp: %v", port, err)
	}
	defer cs.Close()
	if m, isErr := mcptest.Call(t, cs, "list_approved_documents", map[string]any{}); isErr || len(m["documents"].([]any)) == 0 {
		t.Fatalf("list over localhost: %v", m)
	}
}
