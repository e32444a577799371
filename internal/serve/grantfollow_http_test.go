package serve_test

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/mcptest"
	"github.com/pdmcp/pdmcp/internal/testutil"
	"github.com/pdmcp/pdmcp/server/refusal"
)

// healthz is /healthz's status code and body.
func (hs *httpStack) healthz(t *testing.T) (int, map[string]any) {
	t.Helper()
	resp, err := http.Get(hs.opsURL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("/healthz: %v: %s", err, b)
	}
	return resp.StatusCode, m
}

// regrant writes a new caller-identity grant over the served one, as
// `pdmcp grant ... --out grant.json` does (atomically).
func (hs *httpStack) regrant(t *testing.T, ttl time.Duration, docs ...string) *grant.Grant {
	t.Helper()
	lo := grant.LaunchOptions{ManifestPath: hs.manifst, CallerIdentity: true, TTL: ttl, Out: hs.st.GrantPath}
	if len(docs) == 0 {
		lo.AllApproved = true
	} else {
		lo.Documents = docs
	}
	g, err := grant.Launch(lo)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// Why 1: the HTTP service follows grant.json. A grant ending soon is in
// force at the next call and warned of; once it ended, calls are refused
// GRANT_EXPIRED, /healthz answers 503 and the metric reads 0; a renewed
// grant written over it is served at the next call with no restart, and
// /healthz is 200 again.
func TestHTTPGrantRenewedWithoutRestart(t *testing.T) {
	hs := newHTTPStack(t, 8, func(_ *testing.T, hs *httpStack, _ string, _ *grant.LaunchOptions) {
		hs.grantCheck = 50 * time.Millisecond
	})
	alice := hs.connect(t, hs.token(t, "alice", "pw-a"))
	read := func() (map[string]any, bool) {
		return mcptest.Call(t, alice, "read_protected_document", map[string]any{"documentId": "proposal-aurora"})
	}
	if m, isErr := read(); isErr {
		t.Fatal(m)
	}
	if code, h := hs.healthz(t); code != 200 || h["status"] != "ok" {
		t.Fatalf("healthz with a valid grant: %d %v", code, h)
	}
	if left := hs.metric(t, "pdmcp_grant_seconds_remaining"); left < 3000 {
		t.Fatalf("pdmcp_grant_seconds_remaining %v, want about 3600", left)
	}

	short := hs.regrant(t, 8*time.Second)
	if m, isErr := read(); isErr {
		t.Fatalf("a call under the shortened grant: %v", m)
	}
	testutil.WaitFor(t, "the WARN of the grant's coming end", func() bool {
		return strings.Contains(hs.stderr.String(), "the grant ends soon") && strings.Contains(hs.stderr.String(), short.ID)
	})
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(short.NotAfter.Add(time.Second)) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	m, isErr := read()
	if !isErr || m["code"] != string(refusal.GrantExpired) {
		t.Fatalf("a call after the grant ended: %v", m)
	}
	testutil.WaitFor(t, "/healthz 503 for the ended grant", func() bool {
		code, h := hs.healthz(t)
		return code == http.StatusServiceUnavailable && h["status"] == "unavailable"
	})
	if left := hs.metric(t, "pdmcp_grant_seconds_remaining"); left != 0 {
		t.Fatalf("pdmcp_grant_seconds_remaining %v after the end, want 0", left)
	}
	if !strings.Contains(hs.stderr.String(), "the grant has ended") {
		t.Fatal("no WARN at the grant's end")
	}

	renewed := hs.regrant(t, time.Hour)
	if m, isErr := read(); isErr {
		t.Fatalf("a call after the renewal: %v", m)
	}
	code, h := hs.healthz(t)
	g, _ := h["grant"].(map[string]any)
	if code != 200 || g["id"] != renewed.ID {
		t.Fatalf("healthz after the renewal: %d %v", code, h)
	}
}

// A narrowed grant is in force at the next call, and its calls are not
// served by the session minted over the wider grant's keys; an invalid
// grant written over it is logged and the last valid one kept.
func TestHTTPGrantNarrowedAndInvalid(t *testing.T) {
	hs := newHTTPStack(t, 8)
	alice := hs.connect(t, hs.token(t, "alice", "pw-a"))
	if m, isErr := mcptest.Call(t, alice, "read_protected_document", map[string]any{"documentId": "evaluation-criteria"}); isErr {
		t.Fatal(m)
	}
	before := hs.handleDigests(t)
	hs.regrant(t, time.Hour, "proposal-aurora")
	m, isErr := mcptest.Call(t, alice, "read_protected_document", map[string]any{"documentId": "evaluation-criteria"})
	if !isErr || m["code"] != string(refusal.DocumentNotInGrant) {
		t.Fatalf("a document the narrowed grant dropped: %v", m)
	}
	if m, isErr := mcptest.Call(t, alice, "read_protected_document", map[string]any{"documentId": "proposal-aurora"}); isErr {
		t.Fatalf("a document the narrowed grant keeps: %v", m)
	}
	after := hs.handleDigests(t)
	if last := after[len(after)-1]; last == "" || last == before[len(before)-1] {
		t.Fatalf("the narrowed grant's call was served by the wider session %q", last)
	}

	if err := grant.WriteFileAtomic(hs.st.GrantPath, []byte("{not a grant")); err != nil {
		t.Fatal(err)
	}
	if m, isErr := mcptest.Call(t, alice, "read_protected_document", map[string]any{"documentId": "proposal-aurora"}); isErr {
		t.Fatalf("after an invalid grant was written: %v", m)
	}
	if !strings.Contains(hs.stderr.String(), "the changed grant is not valid; serving the last valid one") {
		t.Fatalf("no WARN for the invalid grant:\n%s", hs.stderr.String())
	}
	if _, err := os.Stat(hs.st.GrantPath); err != nil {
		t.Fatal(err)
	}
}

// handleDigests are the tool lines' session digests, in order.
func (hs *httpStack) handleDigests(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, l := range hs.auditLines(t) {
		if l["event"] == "tool" {
			d, _ := l["handleDigest"].(string)
			out = append(out, d)
		}
	}
	return out
}

// /healthz answers 503 while the Gateway does not answer (the check is the
// watch's, cached: a health request sends nothing), and 200 once it is
// back.
func TestHTTPHealthGatewayUnreachable(t *testing.T) {
	hs := newHTTPStack(t, 8, func(_ *testing.T, hs *httpStack, _ string, _ *grant.LaunchOptions) {
		hs.grantCheck = 50 * time.Millisecond
	})
	testutil.WaitFor(t, "a reachable Gateway in /healthz", func() bool {
		code, h := hs.healthz(t)
		gw, _ := h["gateway"].(map[string]any)
		return code == 200 && gw["reachable"] == true
	})
	addr := hs.env.Server.Listener.Addr().String()
	hs.env.Server.CloseClientConnections()
	hs.env.Server.Listener.Close()
	testutil.WaitFor(t, "/healthz 503 with the Gateway down", func() bool {
		code, h := hs.healthz(t)
		gw, _ := h["gateway"].(map[string]any)
		return code == http.StatusServiceUnavailable && gw["reachable"] == false && h["status"] == "unavailable"
	})
	hs.env.RestartSamePort(t)
	if got := hs.env.Server.Listener.Addr().String(); got != addr {
		t.Fatalf("the Gateway came back on %s, not %s", got, addr)
	}
	testutil.WaitFor(t, "/healthz 200 with the Gateway back", func() bool {
		code, _ := hs.healthz(t)
		return code == 200
	})
}

// Why 6: a provider that cannot be reached at start is logged at WARN
// with the reason and the server serves anyway; a request whose token
// cannot be checked because the provider is down is answered 503 with
// Retry-After, not 401 invalid_token (which would send the user to sign in
// again for an outage), and is audited; /healthz names the provider as
// unreachable.
func TestHTTPProviderUnreachable(t *testing.T) {
	hs := newHTTPStack(t, 8, func(_ *testing.T, hs *httpStack, _ string, _ *grant.LaunchOptions) {
		hs.grantCheck = 50 * time.Millisecond
		hs.idpDown.Store(true)
	})
	if !strings.Contains(hs.stderr.String(), "the OpenID provider cannot be reached at start; serving anyway") {
		t.Fatalf("no WARN for the provider at start:\n%s", hs.stderr.String())
	}
	testutil.WaitFor(t, "/healthz naming the provider unreachable", func() bool {
		code, h := hs.healthz(t)
		p, _ := h["provider"].(map[string]any)
		return code == 200 && p["reachable"] == false
	})
	hs.idpDown.Store(false)
	token := hs.token(t, "alice", "pw-a")
	hs.idpDown.Store(true)
	resp := hs.rpc(t, token, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
		strings.Contains(resp.Header.Get("WWW-Authenticate"), "invalid_token") {
		t.Fatalf("a request while the provider is down: %d, Retry-After %q, WWW-Authenticate %q",
			resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("WWW-Authenticate"))
	}
	found := false
	for _, l := range hs.auditLines(t) {
		if l["event"] == "auth-refused" && l["class"] == "provider-unavailable" && l["status"] == float64(503) {
			found = true
		}
	}
	if !found {
		t.Fatal("the 503 refusal was not audited")
	}
	hs.idpDown.Store(false)
	testutil.WaitFor(t, "the provider back in /healthz", func() bool {
		_, h := hs.healthz(t)
		p, _ := h["provider"].(map[string]any)
		return p["reachable"] == true
	})
}
