package server_test

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/reference"
	"github.com/pdmcp/pdmcp/gateway/reference/reftest"
)

// toolLine is what these tests read of an audit tool line.
type toolLine struct {
	Event           string `json:"event"`
	Tool            string `json:"tool"`
	Outcome         string `json:"outcome"`
	Code            string `json:"code"`
	HandleDigest    string `json:"handleDigest"`
	JKT             string `json:"jkt"`
	SessionReplaced bool   `json:"sessionReplaced"`
	GatewayRequests []struct {
		Route  string `json:"route"`
		Status int    `json:"status"`
		Code   string `json:"code"`
	} `json:"gatewayRequests"`
}

func toolLines(t *testing.T, path string) []toolLine {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []toolLine
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var tl toolLine
		if err := json.Unmarshal([]byte(l), &tl); err != nil {
			t.Fatalf("audit line %q: %v", l, err)
		}
		if tl.Event == "tool" {
			out = append(out, tl)
		}
	}
	return out
}

// routes lists a line's Gateway requests as "route status code".
func (l toolLine) routes() []string {
	var out []string
	for _, r := range l.GatewayRequests {
		out = append(out, strings.TrimSpace(r.Route+" "+itoa(r.Status)+" "+r.Code))
	}
	return out
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// TestSessionReplacedAfterAdminRevoke: an operator revokes the task's
// session at the Gateway. The next read and the next save are each refused
// SESSION_REVOKED once, the server mints a new session and sends the call
// again, and the model sees only the result; the audit line says so.
func TestSessionReplacedAfterAdminRevoke(t *testing.T) {
	f := newFixture(t, basicDocs, nil)
	ctx := context.Background()
	admin := f.env.Client(t).Admin(reftest.AdminUser, reftest.AdminPassword)

	if m, isErr := f.call(t, "read_protected_document", map[string]any{"documentId": "notes"}); isErr {
		t.Fatalf("first read: %v", m)
	}
	first := toolLines(t, f.auditLog)
	before := first[len(first)-1]

	for i, tc := range []struct {
		tool  string
		args  map[string]any
		route string
	}{
		{"read_protected_document", map[string]any{"documentId": "notes"}, api.RouteDecrypt},
		{"save_protected_result", map[string]any{"destinationId": "summary", "text": "a result", "idempotencyKey": "k1"}, api.RouteEncrypt},
	} {
		if n, err := admin.RevokeSessions(ctx, ""); err != nil || n == 0 {
			t.Fatalf("admin revoke: %d, %v", n, err)
		}
		f.env.Gateway.ResetCounts()
		m, isErr := f.call(t, tc.tool, tc.args)
		if isErr {
			t.Fatalf("%s after the admin revoke: %v", tc.tool, m)
		}
		if tc.tool == "read_protected_document" && m["text"] != string(f.texts["notes"]) {
			t.Fatalf("read returned %v", m["text"])
		}
		counts := f.env.Gateway.Counts()
		if counts[tc.route] != 2 || counts[api.RouteScoped] != 1 || counts[api.RouteRevoke] != 0 {
			t.Fatalf("%s: Gateway counts %v; want the call twice around one mint, and no revoke of a dead session", tc.tool, counts)
		}
		lines := toolLines(t, f.auditLog)
		got := lines[len(lines)-1]
		want := []string{tc.route + " 401 SESSION_REVOKED", api.RouteScoped + " 200", tc.route + " 200"}
		if !got.SessionReplaced || got.Outcome != "ok" || strings.Join(got.routes(), "|") != strings.Join(want, "|") {
			t.Fatalf("%s audit line %+v; want sessionReplaced, ok, requests %v", tc.tool, got, want)
		}
		if got.HandleDigest == "" || got.HandleDigest == before.HandleDigest || got.JKT == before.JKT {
			t.Fatalf("call %d: audit names session %s (jkt %s), the revoked one was %s (%s)", i, got.HandleDigest, got.JKT,
				before.HandleDigest, before.JKT)
		}
		before = got
	}

	// A call on a live session is not marked.
	f.env.Gateway.ResetCounts()
	if m, isErr := f.call(t, "read_protected_document", map[string]any{"documentId": "notes"}); isErr {
		t.Fatalf("read: %v", m)
	}
	lines := toolLines(t, f.auditLog)
	if last := lines[len(lines)-1]; last.SessionReplaced || f.env.Gateway.Count(api.RouteScoped) != 0 {
		t.Fatalf("a call on a live session was marked replaced or minted: %+v", last)
	}
}

// TestHTTPSessionsReplacedAfterGatewayRestart: the Gateway restarts on the
// same state and port under a running HTTP server and forgets every
// session, the service's included. Each user's next call is refused
// SESSION_MISSING once; the pool drops that user's session, the service
// signs in again, a new session is minted and the call goes through.
func TestHTTPSessionsReplacedAfterGatewayRestart(t *testing.T) {
	hs := newHTTPStack(t, 4)
	alice := hs.connect(t, hs.token(t, "alice", "pw-a"))
	bob := hs.connect(t, hs.token(t, "bob", "pw-b"))
	for who, c := range map[string]*mcp.ClientSession{"alice": alice, "bob": bob} {
		if m, e := callOn(t, c, "read_protected_document", map[string]any{"documentId": "proposal-aurora"}); e {
			t.Fatalf("%s before the restart: %v", who, m)
		}
	}
	url := hs.env.URL
	hs.env.RestartSamePort(t)
	if hs.env.URL != url {
		t.Fatalf("the Gateway came back at %s, not %s", hs.env.URL, url)
	}
	for _, who := range []string{"alice", "bob"} {
		c := map[string]*mcp.ClientSession{"alice": alice, "bob": bob}[who]
		hs.env.Gateway.ResetCounts()
		m, e := callOn(t, c, "read_protected_document", map[string]any{"documentId": "proposal-aurora"})
		if e {
			t.Fatalf("%s after the restart: %v", who, m)
		}
		// The first call after the restart also finds the service's own
		// session forgotten: its mint is refused once, the service signs
		// in again, and the mint is sent again.
		wantLogins, wantMints := 0, 1
		if who == "alice" {
			wantLogins, wantMints = 1, 2
		}
		counts := hs.env.Gateway.Counts()
		if counts[api.RouteDecrypt] != 2 || counts[api.RouteScoped] != wantMints || counts[api.RouteServiceLogin] != wantLogins {
			t.Fatalf("%s: Gateway counts %v; want the decrypt twice around %d mint(s) and %d sign-in(s)", who, counts,
				wantMints, wantLogins)
		}
		lines := toolLines(t, hs.audit)
		got := lines[len(lines)-1]
		if !got.SessionReplaced || got.routes()[0] != api.RouteDecrypt+" 401 SESSION_MISSING" {
			t.Fatalf("%s audit line %+v: want sessionReplaced after SESSION_MISSING", who, got)
		}
	}
	b, _ := os.ReadFile(hs.audit)
	if !strings.Contains(string(b), `"serviceRelogin":true`) {
		t.Error("no audit line says the service signed in again")
	}
}

// TestHTTPMintAnsweringAnotherPrincipalIsRefused: over HTTP the Gateway
// maps the user; a session it answers acting outside the service's prefix
// is revoked at once and the call refused SESSION_IDENTITY_MISMATCH, with
// nothing decrypted and an error on the server's log.
func TestHTTPMintAnsweringAnotherPrincipalIsRefused(t *testing.T) {
	hs := newHTTPStack(t, 4)
	other := hs.env.Service(t, "other", true)
	stranger := reftest.Principal(t, hs.env.ServiceClient(t, other), other.Prefix+"stranger")
	alice := hs.connect(t, hs.token(t, "alice", "pw-a"))
	hs.env.Gateway.SetFaults(reference.Faults{MintAsPrincipal: stranger.Name})
	hs.env.Gateway.ResetCounts()
	m, isErr := callOn(t, alice, "read_protected_document", map[string]any{"documentId": "proposal-aurora"})
	if !isErr || m["layer"] != "adapter" || m["code"] != api.CodeSessionIdentityMismatch {
		t.Fatalf("read with a Gateway answering another principal: %v", m)
	}
	counts := hs.env.Gateway.Counts()
	if counts[api.RouteScoped] != 1 || counts[api.RouteRevoke] != 1 || counts[api.RouteDecrypt] != 0 {
		t.Fatalf("Gateway counts %v: want one mint and its revoke, no decrypt", counts)
	}
	if live, _ := hs.env.Gateway.LiveScopedSessions(); live != 0 {
		t.Fatalf("%d scoped sessions live, want 0", live)
	}
	if l := hs.stderr.String(); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, api.CodeSessionIdentityMismatch) {
		t.Fatalf("no error log of the mismatch:\n%s", l)
	}
	hs.env.Gateway.SetFaults(reference.Faults{})
	if m, isErr := callOn(t, alice, "read_protected_document", map[string]any{"documentId": "proposal-aurora"}); isErr {
		t.Fatalf("read once the Gateway answers rightly: %v", m)
	}
}

// TestSessionReplacedOnlyOnce: a request refused SESSION_MISSING is sent
// once more on a new session; when that is refused the same way, the
// refusal stands (no third request, no second mint) and reaches the model.
func TestSessionReplacedOnlyOnce(t *testing.T) {
	f := newFixture(t, basicDocs, nil)
	if m, isErr := f.call(t, "read_protected_document", map[string]any{"documentId": "notes"}); isErr {
		t.Fatalf("first read: %v", m)
	}
	for _, tc := range []struct {
		gone    int
		refused bool
	}{{1, false}, {2, true}} {
		f.env.Gateway.SetFaults(reference.Faults{SessionGoneNext: map[string]int{api.RouteDecrypt: tc.gone}})
		f.env.Gateway.ResetCounts()
		m, isErr := f.call(t, "read_protected_document", map[string]any{"documentId": "notes"})
		if tc.refused {
			if !isErr || m["layer"] != "gateway" || m["code"] != api.CodeSessionMissing {
				t.Fatalf("read with the session gone twice: %v", m)
			}
		} else if isErr {
			t.Fatalf("read with the session gone once: %v", m)
		}
		counts := f.env.Gateway.Counts()
		if counts[api.RouteDecrypt] != 2 || counts[api.RouteScoped] != 1 {
			t.Fatalf("gone %d times: Gateway counts %v; want two decrypts and one mint", tc.gone, counts)
		}
		lines := toolLines(t, f.auditLog)
		if last := lines[len(lines)-1]; !last.SessionReplaced {
			t.Fatalf("audit line %+v does not say sessionReplaced", last)
		}
	}
	f.env.Gateway.SetFaults(reference.Faults{})
}

// TestHTTPAllSessionsBusyIsRetryable: with maxCallers 1 and alice's read
// held at the Gateway, bob's read finds the one session busy, waits the
// bounded time and is refused SESSIONS_BUSY with retryAfter, with no mint
// sent for him; once alice's call ends, bob's next read takes the place.
func TestHTTPAllSessionsBusyIsRetryable(t *testing.T) {
	hs := newHTTPStack(t, 1)
	alice := hs.connect(t, hs.token(t, "alice", "pw-a"))
	bob := hs.connect(t, hs.token(t, "bob", "pw-b"))
	gw := hs.env.Gateway
	gw.SetFaults(reference.Faults{Delay: time.Hour, DelayActingAs: hs.svc.Prefix + "t.alice"})
	t.Cleanup(func() { gw.SetFaults(reference.Faults{}) })

	decrypts := gw.Count(api.RouteDecrypt)
	aliceDone := make(chan bool, 1)
	go func() {
		res, err := alice.CallTool(context.Background(), &mcp.CallToolParams{Name: "read_protected_document",
			Arguments: map[string]any{"documentId": "proposal-aurora"}})
		aliceDone <- err == nil && !res.IsError
	}()
	for gw.Count(api.RouteDecrypt) == decrypts {
		time.Sleep(time.Millisecond)
	}

	mints := gw.Count(api.RouteScoped)
	m, isErr := callOn(t, bob, "read_protected_document", map[string]any{"documentId": "proposal-aurora"})
	if !isErr || m["layer"] != "adapter" || m["code"] != api.CodeSessionsBusy || m["status"] != float64(503) {
		t.Fatalf("bob's read with the one session busy: %v", m)
	}
	if ra, _ := m["retryAfter"].(float64); ra < 1 {
		t.Fatalf("no retryAfter in %v", m)
	}
	if gw.Count(api.RouteScoped) != mints {
		t.Fatal("a mint was sent for bob while every place was busy")
	}
	if live, _ := gw.LiveScopedSessions(); live != 1 {
		t.Fatalf("%d scoped sessions live, want alice's alone", live)
	}

	gw.SetFaults(reference.Faults{})
	if ok := <-aliceDone; !ok {
		t.Fatal("alice's held read failed")
	}
	if m, isErr := callOn(t, bob, "read_protected_document", map[string]any{"documentId": "proposal-aurora"}); isErr {
		t.Fatalf("bob's retry: %v", m)
	}
	if live, peak := gw.LiveScopedSessions(); live != 1 || peak > 1 {
		t.Fatalf("live %d, peak %d with maxCallers 1", live, peak)
	}
}

// TestStdioMintAnsweringAnotherPrincipalIsRefused: over stdio the grant
// names the user; a session acting as anyone else is revoked at once and
// the read refused SESSION_IDENTITY_MISMATCH, nothing decrypted.
func TestStdioMintAnsweringAnotherPrincipalIsRefused(t *testing.T) {
	f := newFixture(t, basicDocs, nil)
	other := f.env.Service(t, "other", true)
	stranger := reftest.Principal(t, f.env.ServiceClient(t, other), other.Prefix+"stranger")
	f.env.Gateway.SetFaults(reference.Faults{MintAsPrincipal: stranger.Name})
	f.env.Gateway.ResetCounts()
	m, isErr := f.call(t, "read_protected_document", map[string]any{"documentId": "notes"})
	if !isErr || m["layer"] != "adapter" || m["code"] != api.CodeSessionIdentityMismatch {
		t.Fatalf("read with a Gateway answering another principal: %v", m)
	}
	counts := f.env.Gateway.Counts()
	if counts[api.RouteScoped] != 1 || counts[api.RouteRevoke] != 1 || counts[api.RouteDecrypt] != 0 {
		t.Fatalf("Gateway counts %v: want one mint and its revoke, no decrypt", counts)
	}
	f.env.Gateway.SetFaults(reference.Faults{})
	if m, isErr := f.call(t, "read_protected_document", map[string]any{"documentId": "notes"}); isErr {
		t.Fatalf("read once the Gateway answers rightly: %v", m)
	}
}
