package serve_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/pdmcp/pdmcp/auth/devidp"
	"github.com/pdmcp/pdmcp/internal/mcptest"
)

// TestHTTPAllowedClients: with allowedClients naming another host, a valid
// token of the development host client is refused 401 with the class
// client-not-allowed and nothing reaches the Gateway; naming that client
// lets the same user in.
func TestHTTPAllowedClients(t *testing.T) {
	t.Run("not named", func(t *testing.T) {
		hs := newHTTPStack(t, 8, withHTTPConfig(`,"allowedClients":["some-other-host"]`))
		tok := hs.token(t, "alice", "pw-a")
		before := hs.env.Gateway.Counts()
		resp := hs.rpc(t, tok, "", initBody)
		challenge := resp.Header.Get("WWW-Authenticate")
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(challenge, "client-not-allowed") {
			t.Fatalf("token of an unnamed client: %d %q, want 401 naming client-not-allowed", resp.StatusCode, challenge)
		}
		if after := hs.env.Gateway.Counts(); len(after) != len(before) {
			t.Errorf("a refused request reached the Gateway: %v -> %v", before, after)
		}
		if n := hs.metric(t, `pdmcp_http_refusals_total{class="client-not-allowed",status="401"}`); n != 1 {
			t.Errorf("refusals counted: %v, want 1", n)
		}
		hs.stop()
		lines := hs.auditLines(t)
		found := false
		for _, m := range lines {
			if m["event"] == "auth-refused" && m["class"] == "client-not-allowed" && m["reason"] == "CLIENT_NOT_ALLOWED" &&
				m["status"] == float64(401) {
				found = true
			}
		}
		if !found {
			t.Fatalf("no client-not-allowed line:\n%v", lines)
		}
	})
	t.Run("named", func(t *testing.T) {
		hs := newHTTPStack(t, 8, withHTTPConfig(`,"allowedClients":["some-other-host",`+jsonString(devidp.DefaultHostClientID)+`]`))
		alice := hs.connect(t, hs.token(t, "alice", "pw-a"))
		if m, isErr := mcptest.Call(t, alice, "list_approved_documents", map[string]any{}); isErr {
			t.Fatalf("a named client's token: %v", m)
		}
	})
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
