package serve_test

import (
	"strings"
	"testing"
)

// TestHTTPClientMistakesAreNotServerErrors: requests a client sends before
// initialize (or a second initialize) are answered with a JSON-RPC error and
// logged at WARN with the method, never at ERROR and never with the
// request's arguments.
func TestHTTPClientMistakesAreNotServerErrors(t *testing.T) {
	hs := newHTTPStack(t, 8)
	tok := hs.token(t, "alice", "pw-a")
	post := func(body, session string) (int, string, string) {
		resp, b := hs.post(t, tok, session, "2025-11-25", body)
		return resp.StatusCode, b, resp.Header.Get("Mcp-Session-Id")
	}
	const marker = "MARKER-d41d8cd98f"
	before := len(hs.stderr.String())
	for _, body := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"read_protected_document","arguments":{"documentId":"` + marker + `"}}}`,
	} {
		if status, b, _ := post(body, ""); status != 200 || !strings.Contains(b, "invalid during session initialization") {
			t.Errorf("%s before initialize: %d %s, want a JSON-RPC error", body, status, b)
		}
	}
	initialize := `{"jsonrpc":"2.0","id":3,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"` + marker + `","version":"1"}}}`
	_, _, sid := post(initialize, "")
	if sid == "" {
		t.Fatal("initialize opened no session")
	}
	post(strings.Replace(initialize, `"id":3`, `"id":4`, 1), sid)

	logged := hs.stderr.String()[before:]
	if strings.Contains(logged, "level=ERROR") {
		t.Errorf("a client's protocol mistake was logged at ERROR:\n%s", logged)
	}
	for _, want := range []string{"method=tools/list", "method=tools/call", "method=initialize"} {
		if !strings.Contains(logged, "level=WARN msg=\"client protocol mistake") || !strings.Contains(logged, want) {
			t.Errorf("no WARN line with %s:\n%s", want, logged)
		}
	}
	if strings.Contains(logged, marker) {
		t.Errorf("a request's payload reached the log:\n%s", logged)
	}
}
