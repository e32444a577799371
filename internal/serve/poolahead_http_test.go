package serve_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/internal/mcptest"
	"github.com/pdmcp/pdmcp/internal/testutil"
)

// TestHTTPJunkDoesNotChurnSessions is issue 31's scenario 4: with the pool
// full (maxCallers 1, alice's session), carol's junk requests (answered
// 400 with a JSON-RPC error) and requests without a valid token prepare
// nothing ahead of need: no token exchange for carol, no revoke, and
// alice's session serves her next read, so she minted once. Before, each
// accepted request evicted the least recent idle user at once, and alice
// minted again after each of carol's requests. Carol's well-formed
// connect then does exchange her token ahead, and still ends no one who
// called within the pool's MinIdle.
func TestHTTPJunkDoesNotChurnSessions(t *testing.T) {
	hs := newHTTPStack(t, 1)
	gw := hs.env.Gateway
	aliceTok, carolTok := hs.token(t, "alice", "pw-a"), hs.token(t, "carol", "pw-c")
	alice := hs.connect(t, aliceTok)
	read := func() {
		t.Helper()
		if m, isErr := mcptest.Call(t, alice, "read_protected_document", map[string]any{"documentId": "proposal-aurora"}); isErr {
			t.Fatalf("alice's read: %v", m)
		}
	}
	mints := gw.Count(api.RouteScoped) // the stack's seeding minted too
	read()
	if n := gw.Count(api.RouteScoped) - mints; n != 1 {
		t.Fatalf("%d mints for alice's first read, want 1", n)
	}
	exchanges, revokes := hs.exchanges.Load(), gw.Count(api.RouteRevoke)

	for _, tc := range []struct {
		name, token, body string
		status            int
		code              string // the JSON-RPC error code in the answer, if any
	}{
		{"not JSON", carolTok, "this is not json", http.StatusBadRequest, "-32700"},
		{"not JSON again", carolTok, "this is not json", http.StatusBadRequest, "-32700"},
		{"not JSON a third time", carolTok, "this is not json", http.StatusBadRequest, "-32700"},
		{"a batch", carolTok, `[` + initBody + `]`, http.StatusBadRequest, "-32600"},
		{"no method, result or error", carolTok, `{"jsonrpc":"2.0","id":1}`, http.StatusBadRequest, "-32600"},
		{"no token", "", initBody, http.StatusUnauthorized, ""},
		{"a token that is not one", "not-a-token", initBody, http.StatusUnauthorized, ""},
	} {
		resp, body := hs.post(t, tc.token, "", "2025-11-25", tc.body)
		if resp.StatusCode != tc.status || !strings.Contains(body, tc.code) {
			t.Fatalf("%s: %d %s; want %d with %s", tc.name, resp.StatusCode, body, tc.status, tc.code)
		}
		read() // alice goes on working between carol's requests
	}
	if n := hs.exchanges.Load() - exchanges; n != 0 {
		t.Errorf("carol's junk exchanged her token %d times ahead of need", n)
	}
	if n := gw.Count(api.RouteRevoke) - revokes; n != 0 {
		t.Errorf("carol's junk revoked %d sessions", n)
	}
	if n := gw.Count(api.RouteScoped) - mints; n != 1 {
		t.Fatalf("alice minted %d sessions, want 1: her session did not survive carol's junk", n)
	}

	// A real connect (initialize) is prepared for: carol's token is
	// exchanged ahead, but alice, who just read, keeps her place.
	hs.connect(t, carolTok)
	testutil.WaitFor(t, "carol's token exchanged ahead of need", func() bool { return hs.exchanges.Load() > exchanges })
	read()
	if gw.Count(api.RouteScoped)-mints != 1 || gw.Count(api.RouteRevoke) != revokes {
		t.Fatalf("after carol's connect: %d mints, %d revokes; alice's session must survive", gw.Count(api.RouteScoped)-mints,
			gw.Count(api.RouteRevoke)-revokes)
	}
}

// TestHTTPWorkAheadStartsOnlyBeforeACall: on protocol 2026-07-28 too, a
// served server/discover or tools/list of a caller with no session starts
// their token's exchange ahead of need, and a well-formed request of
// another method, or one the server refuses, starts nothing. Each request
// carries a token of its own, since an exchange is made once per token.
func TestHTTPWorkAheadStartsOnlyBeforeACall(t *testing.T) {
	hs := newHTTPStack(t, 8)
	post := func(method, name, params string) map[string]any {
		h := map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": method}
		if name != "" {
			h["Mcp-Name"] = name
		}
		_, m := rawMCP(t, hs, false, hs.token(t, "bob", "pw-b"),
			`{"jsonrpc":"2.0","id":9,"method":"`+method+`","params":{`+params+newMeta+`}}`, h)
		return m
	}
	before := hs.exchanges.Load()
	// Refused by the tool gate: a method this server does not declare,
	// and a tool outside the grant.
	if m := post("resources/list", "", ""); m["error"] == nil {
		t.Fatalf("resources/list: %v, want an error", m)
	}
	if m := post("tools/call", "no_such_tool", `"name":"no_such_tool","arguments":{},`); m["result"] == nil {
		t.Fatalf("an unknown tool: %v, want a refusal result", m)
	}
	for i, method := range []string{"tools/list", "server/discover"} {
		if m := post(method, "", ""); m["result"] == nil {
			t.Fatalf("%s: %v, want a result", method, m)
		}
		testutil.WaitFor(t, method+"'s exchange ahead of need", func() bool { return hs.exchanges.Load() >= before+int64(i)+1 })
	}
	// An exchange started for the refused requests would have been sent
	// before their answers, ahead of these two.
	if n := hs.exchanges.Load() - before; n != 2 {
		t.Fatalf("%d exchanges ahead of need, want 2 (tools/list and server/discover only)", n)
	}
}
