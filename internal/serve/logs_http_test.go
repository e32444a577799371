package serve_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/pdmcp/pdmcp/audit"
)

// TestHTTPClientAndAuthRefusedLinesNameCallersByDigest: the client line
// (one per initialize, and per server/discover on 2026-07-28) and the
// session-mismatch auth-refused line name the user as the 12-hex digest of
// their id, as the server's log does, never as issuer|subject; and the
// standard error of the run has no user id either.
func TestHTTPClientAndAuthRefusedLinesNameCallersByDigest(t *testing.T) {
	hs := newHTTPStack(t, 8)
	alice, bob := hs.token(t, "alice", "pw-a"), hs.token(t, "bob", "pw-b")
	aliceID, bobID := hs.issuer+"|alice", hs.issuer+"|bob"

	resp := hs.rpc(t, alice, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}`)
	sid := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != 200 || sid == "" {
		t.Fatalf("initialize: %d, session %q", resp.StatusCode, sid)
	}
	if resp := hs.rpc(t, bob, sid, `{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}`); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("bob on alice's session: %d, want 403", resp.StatusCode)
	}
	// And a 2026-07-28 host introducing itself with server/discover.
	_ = resultOf(t, hs, bob, "server/discover", "", "")

	f, err := os.Open(hs.audit)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := map[string][]string{} // event -> callers seen
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		ev, _ := m["event"].(string)
		if ev != audit.EventClient && ev != audit.EventAuthRefused {
			continue
		}
		if strings.Contains(sc.Text(), "|alice") || strings.Contains(sc.Text(), "|bob") {
			t.Errorf("a %s line names a user in clear: %s", ev, sc.Text())
		}
		if c, ok := m["caller"].(string); ok {
			want[ev] = append(want[ev], c)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	a, b := audit.Digest12(aliceID), audit.Digest12(bobID)
	if got := want[audit.EventClient]; len(got) != 2 || got[0] != a || got[1] != b {
		t.Errorf("client lines' callers %v, want [%s %s] (alice's initialize, bob's discover)", got, a, b)
	}
	if got := want[audit.EventAuthRefused]; len(got) != 1 || got[0] != b {
		t.Errorf("auth-refused lines' callers %v, want [%s] (bob on alice's session)", got, b)
	}
	if s := hs.stderr.String(); strings.Contains(s, aliceID) || strings.Contains(s, bobID) {
		t.Errorf("standard error names a user id:\n%s", s)
	}
}
