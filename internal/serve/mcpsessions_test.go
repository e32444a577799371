package serve_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/pdmcp/pdmcp/audit"
	"github.com/pdmcp/pdmcp/grant"
)

func withHTTPConfig(members string) stackOption {
	return func(_ *testing.T, hs *httpStack, _ string, _ *grant.LaunchOptions) { hs.httpExtra += members }
}

// rpc posts one JSON-RPC message as a host would, on session sid ("" for
// none), and returns the response.
func (hs *httpStack) rpc(t *testing.T, token, sid, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", hs.url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
	}
	resp, err := hs.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

const initBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"loop","version":"1"}}}`

// initialize opens an MCP session and never ends it, as hosts that send
// no DELETE do.
func (hs *httpStack) initialize(t *testing.T, token string) string {
	t.Helper()
	resp := hs.rpc(t, token, "", initBody)
	sid := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != 200 || sid == "" {
		t.Fatalf("initialize: %d, session %q", resp.StatusCode, sid)
	}
	return sid
}

// metric reads one unlabelled value from /metrics.
func (hs *httpStack) metric(t *testing.T, name string) float64 {
	t.Helper()
	resp, err := http.Get(hs.opsURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("/metrics has no %s", name)
	return 0
}

// TestHTTPSessionsBoundedPerUser: a loop of initializes from one user with
// no DELETE leaves that user at the bound, the oldest of their sessions
// ended first; another user's session is untouched and keeps working.
func TestHTTPSessionsBoundedPerUser(t *testing.T) {
	hs := newHTTPStack(t, 8, withHTTPConfig(`,"maxSessionsPerUser":3,"maxSessions":10`))
	aliceTok, bobTok := hs.token(t, "alice", "pw-a"), hs.token(t, "bob", "pw-b")
	bob := hs.initialize(t, bobTok)
	var alice []string
	for range 25 {
		alice = append(alice, hs.initialize(t, aliceTok))
	}
	if n := hs.metric(t, "pdmcp_mcp_sessions"); n != 4 {
		t.Fatalf("live MCP sessions after 25 initializes: %v, want alice's 3 and bob's 1", n)
	}
	list := `{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}`
	if resp := hs.rpc(t, aliceTok, alice[0], list); resp.StatusCode != http.StatusNotFound {
		t.Errorf("alice's oldest session: %d, want 404 (ended to make room)", resp.StatusCode)
	}
	for _, sid := range alice[len(alice)-3:] {
		if resp := hs.rpc(t, aliceTok, sid, list); resp.StatusCode != http.StatusOK {
			t.Errorf("one of alice's newest sessions: %d, want 200", resp.StatusCode)
		}
	}
	if resp := hs.rpc(t, bobTok, bob, list); resp.StatusCode != http.StatusOK {
		t.Fatalf("bob's session after alice's loop: %d, want 200", resp.StatusCode)
	}
}

// TestHTTPSessionsBoundedInTotal: at the server's bound, a new session
// ends the least recently used idle one, whoever's it is.
func TestHTTPSessionsBoundedInTotal(t *testing.T) {
	hs := newHTTPStack(t, 8, withHTTPConfig(`,"maxSessionsPerUser":2,"maxSessions":3`))
	aliceTok, bobTok, carolTok := hs.token(t, "alice", "pw-a"), hs.token(t, "bob", "pw-b"), hs.token(t, "carol", "pw-c")
	a1 := hs.initialize(t, aliceTok)
	b1 := hs.initialize(t, bobTok)
	a2 := hs.initialize(t, aliceTok)
	list := `{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}`
	hs.rpc(t, aliceTok, a1, list) // a1 is now more recent than b1
	c1 := hs.initialize(t, carolTok)
	if n := hs.metric(t, "pdmcp_mcp_sessions"); n != 3 {
		t.Fatalf("live MCP sessions: %v, want the bound 3", n)
	}
	for sid, want := range map[string]int{a1: 200, a2: 200, c1: 200, b1: 404} {
		tok := map[string]string{a1: aliceTok, a2: aliceTok, b1: bobTok, c1: carolTok}[sid]
		if resp := hs.rpc(t, tok, sid, list); resp.StatusCode != want {
			t.Errorf("session %s: %d, want %d", sid[:6], resp.StatusCode, want)
		}
	}
}

// TestHTTPAnotherUsersSessionAudited: a request naming another user's MCP
// session is refused 403 with an auth-refused line of its own class that
// names the user who tried; the owner's session goes on working.
func TestHTTPAnotherUsersSessionAudited(t *testing.T) {
	hs := newHTTPStack(t, 8)
	aliceTok, bobTok := hs.token(t, "alice", "pw-a"), hs.token(t, "bob", "pw-b")
	sid := hs.initialize(t, aliceTok)
	list := `{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}`
	if resp := hs.rpc(t, bobTok, sid, list); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("bob on alice's session: %d, want 403", resp.StatusCode)
	}
	if resp := hs.rpc(t, aliceTok, sid, list); resp.StatusCode != http.StatusOK {
		t.Fatalf("alice on her own session afterwards: %d", resp.StatusCode)
	}
	hs.stop()
	b, err := os.ReadFile(hs.audit)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m map[string]any
		_ = json.Unmarshal([]byte(l), &m)
		if m["event"] == "auth-refused" && m["class"] == "session-user-mismatch" {
			found = true
			if m["status"] != float64(403) || m["reason"] != "SESSION_USER_MISMATCH" || m["caller"] != audit.Digest12(hs.issuer+"|bob") {
				t.Errorf("mismatch line: %v", m)
			}
		}
	}
	if !found {
		t.Fatalf("no session-user-mismatch line:\n%s", b)
	}
}
