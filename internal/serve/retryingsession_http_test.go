package serve_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/reference"
	"github.com/pdmcp/pdmcp/gateway/reference/reftest"
	"github.com/pdmcp/pdmcp/internal/mcptest"
)

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
		if m, e := mcptest.Call(t, c, "read_protected_document", map[string]any{"documentId": "proposal-aurora"}); e {
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
		m, e := mcptest.Call(t, c, "read_protected_document", map[string]any{"documentId": "proposal-aurora"})
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
		lines := mcptest.ToolLines(t, hs.audit)
		got := lines[len(lines)-1]
		if !got.SessionReplaced || got.Routes()[0] != api.RouteDecrypt+" 401 SESSION_MISSING" {
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
	m, isErr := mcptest.Call(t, alice, "read_protected_document", map[string]any{"documentId": "proposal-aurora"})
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
	if m, isErr := mcptest.Call(t, alice, "read_protected_document", map[string]any{"documentId": "proposal-aurora"}); isErr {
		t.Fatalf("read once the Gateway answers rightly: %v", m)
	}
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
	m, isErr := mcptest.Call(t, bob, "read_protected_document", map[string]any{"documentId": "proposal-aurora"})
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
	if m, isErr := mcptest.Call(t, bob, "read_protected_document", map[string]any{"documentId": "proposal-aurora"}); isErr {
		t.Fatalf("bob's retry: %v", m)
	}
	if live, peak := gw.LiveScopedSessions(); live != 1 || peak > 1 {
		t.Fatalf("live %d, peak %d with maxCallers 1", live, peak)
	}
}
