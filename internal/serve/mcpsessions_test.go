package serve_test

import (
	"net/http"
	"testing"

	"github.com/pdmcp/pdmcp/audit"
)

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
	lines := hs.auditLines(t)
	found := false
	for _, m := range lines {
		if m["event"] == "auth-refused" && m["class"] == "session-user-mismatch" {
			found = true
			if m["status"] != float64(403) || m["reason"] != "SESSION_USER_MISMATCH" || m["caller"] != audit.Digest12(hs.issuer+"|bob") {
				t.Errorf("mismatch line: %v", m)
			}
		}
	}
	if !found {
		t.Fatalf("no session-user-mismatch line:\n%v", lines)
	}
}
