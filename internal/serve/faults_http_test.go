package serve_test

import (
	"context"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/reference"
	"github.com/pdmcp/pdmcp/gateway/reference/reftest"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/mcptest"
)

// TestGatewayFaults is the Gateway-faults suite, on one HTTP stack with
// alice as the user the fault hits and bob as another user who must be
// served throughout: 5xx, a timeout (bob served while alice's call hangs),
// a connection dropped under a decrypt, an encrypt whose answer is lost
// (the connection dropped after the key was made: never resent; the
// same idempotency key then finishes the save under the destination's
// existing key), clock skew of +50 s and -50 s, a provider key rotation, a
// dropped service session and a restarted Gateway. Each ends as
// docs/operating.md and docs/gateway-contract.md say. Run alone:
//
//	go test ./internal/serve -run TestGatewayFaults
func TestGatewayFaults(t *testing.T) {
	const timeout = 2 * time.Second
	var proxy *cuttingProxy
	hs := newHTTPStack(t, 8, func(t *testing.T, h *httpStack, _ string, _ *grant.LaunchOptions) {
		h.gatewayTimeout = timeout
		// pdmcp reaches the Gateway through a proxy that can cut every
		// connection it carries: a dropped connection.
		proxy = newCuttingProxy(t, strings.TrimPrefix(h.env.URL, "https://"))
		svc := *h.svc
		svc.GatewayURL = "https://" + proxy.addr
		h.svc = &svc
	})
	gw := hs.env.Gateway
	outer := t // sessions that outlive a subtest are the outer test's
	t.Cleanup(func() { gw.SetFaults(reference.Faults{}) })
	alice := hs.connect(t, hs.token(t, "alice", "pw-a"))
	bob := hs.connect(t, hs.token(t, "bob", "pw-b"))
	read := func(cs *mcp.ClientSession, doc string) (map[string]any, bool) {
		return mcptest.Call(t, cs, "read_protected_document", map[string]any{"documentId": doc})
	}
	bobServed := func(after string) {
		t.Helper()
		if m, isErr := read(bob, "evaluation-criteria"); isErr {
			t.Fatalf("after %s, bob was not served: %v", after, m)
		}
	}
	wantRefusal := func(what string, m map[string]any, isErr bool, layer, code string) {
		t.Helper()
		if !isErr || m["refused"] != true || m["layer"] != layer || m["code"] != code {
			t.Fatalf("%s: %v, want %s/%s", what, m, layer, code)
		}
	}
	// heldRead starts a read of alice's that the Gateway holds; the
	// function it returns waits for that read to end and answers it.
	heldRead := func() func() (map[string]any, bool) {
		gw.SetFaults(reference.Faults{Delay: time.Hour, DelayActingAs: hs.svc.Prefix + "t.alice"})
		done := make(chan struct{})
		var m map[string]any
		var isErr bool
		go func() {
			defer close(done)
			m, isErr = read(alice, "proposal-aurora")
		}()
		return func() (map[string]any, bool) {
			<-done
			return m, isErr
		}
	}
	if m, isErr := read(alice, "proposal-aurora"); isErr {
		t.Fatal(m)
	}
	bobServed("the start")

	t.Run("5xx", func(t *testing.T) {
		decrypts := gw.Count(api.RouteDecrypt)
		gw.SetFaults(reference.Faults{FailNext: map[string]int{api.RouteDecrypt: 1}, Status: 502})
		m, isErr := read(alice, "proposal-aurora")
		wantRefusal("a 502", m, isErr, "gateway", api.CodeInjectedFault)
		if m["status"] != float64(502) {
			t.Errorf("status %v, want 502", m["status"])
		}
		if n := gw.Count(api.RouteDecrypt) - decrypts; n != 1 {
			t.Errorf("%d decrypts for one call, want 1 (a 5xx is not resent)", n)
		}
		if m, isErr := read(alice, "proposal-aurora"); isErr {
			t.Fatalf("alice after the 5xx: %v", m)
		}
		bobServed("a 5xx")
	})

	t.Run("timeout", func(t *testing.T) {
		wait := heldRead()
		// Served while alice's call hangs.
		bobServed("alice's call began to hang")
		m, isErr := wait()
		gw.SetFaults(reference.Faults{})
		wantRefusal("a timeout", m, isErr, "gateway", api.CodeUnreachable)
		if m, isErr := read(alice, "proposal-aurora"); isErr {
			t.Fatalf("alice after the timeout: %v", m)
		}
	})

	t.Run("dropped connection", func(t *testing.T) {
		decrypts := gw.Count(api.RouteDecrypt)
		wait := heldRead()
		// Cut the connection once alice's decrypt has reached the Gateway.
		for gw.Count(api.RouteDecrypt) == decrypts {
			time.Sleep(time.Millisecond)
		}
		proxy.cut()
		m, isErr := wait()
		gw.SetFaults(reference.Faults{})
		wantRefusal("a dropped connection", m, isErr, "gateway", api.CodeUnreachable)
		if m, isErr := read(alice, "proposal-aurora"); isErr {
			t.Fatalf("alice after the dropped connection: %v", m)
		}
		bobServed("a dropped connection")
	})

	t.Run("lost encrypt answer", func(t *testing.T) {
		args := map[string]any{"destinationId": "evaluation-summary", "text": "lost once", "idempotencyKey": "fault-lost-1"}
		encrypts := gw.Count(api.RouteEncrypt)
		gw.SetFaults(reference.Faults{LoseEncryptAnswer: 1})
		m, isErr := mcptest.Call(t, alice, "save_protected_result", args)
		wantRefusal("a lost answer", m, isErr, "gateway", api.CodeUnreachable)
		if n := gw.Count(api.RouteEncrypt) - encrypts; n != 1 {
			t.Fatalf("%d encrypts for a lost answer, want exactly 1 (never resent)", n)
		}
		bobServed("a lost answer")
		first, isErr := mcptest.Call(t, alice, "save_protected_result", args)
		if isErr || first["version"] != float64(1) {
			t.Fatalf("the same idempotencyKey after the lost answer: %v", first)
		}
		again, isErr := mcptest.Call(t, alice, "save_protected_result", args)
		if isErr || again["replayed"] != true || again["savedAt"] != first["savedAt"] {
			t.Fatalf("the replay %v, first %v", again, first)
		}
		if n := gw.Count(api.RouteEncrypt) - encrypts; n != 2 {
			t.Errorf("%d encrypts in all, want 2 (the lost one and the finishing one)", n)
		}
	})

	for _, skew := range []time.Duration{50 * time.Second, -50 * time.Second} {
		t.Run("clock skew "+skew.String(), func(t *testing.T) {
			gw.SetFaults(reference.Faults{ClockSkew: skew})
			defer gw.SetFaults(reference.Faults{})
			for range 2 {
				if m, isErr := read(alice, "proposal-aurora"); isErr {
					t.Fatalf("alice with the Gateway's clock %s off: %v", skew, m)
				}
			}
			// A user new to the pool mints under the skew too.
			carol := hs.connect(t, hs.token(t, "carol", "pw-c"))
			m, isErr := read(carol, "proposal-aurora")
			wantRefusal("carol, who holds no entry", m, isErr, "keyserver", api.CodeACLDenied)
			bobServed("clock skew")
		})
	}

	t.Run("provider key rotation", func(t *testing.T) {
		if _, err := hs.idp.RotateKey(false); err != nil {
			t.Fatal(err)
		}
		// Wait out the verifier's one-second refetch bound.
		time.Sleep(1100 * time.Millisecond)
		// A token under the new key is accepted (the verifier fetches the
		// key set again) and its exchanged token at the Gateway.
		alice2 := hs.connect(outer, hs.token(t, "alice", "pw-a"))
		if m, isErr := read(alice2, "proposal-borealis"); isErr {
			t.Fatalf("alice under the rotated key: %v", m)
		}
		// A token under the dropped key is refused at the door (401),
		// not served from the verified-token cache.
		_, err := bob.CallTool(context.Background(), &mcp.CallToolParams{Name: "read_protected_document",
			Arguments: map[string]any{"documentId": "evaluation-criteria"}})
		if err == nil || !strings.Contains(err.Error(), "Unauthorized") {
			t.Fatalf("a token under the dropped key: %v, want a 401", err)
		}
		bob = hs.connect(outer, hs.token(t, "bob", "pw-b"))
		bobServed("a key rotation")
		alice = alice2
	})

	t.Run("dropped service session", func(t *testing.T) {
		gw.DropServiceSessions()
		// dave is not mapped: his mint needs the service session, so the
		// server signs in again, and the Gateway then refuses the mapping.
		dave := hs.connect(t, hs.token(t, "dave", "pw-d"))
		m, isErr := read(dave, "proposal-aurora")
		wantRefusal("an unmapped user", m, isErr, "gateway", api.CodeIdentityNotMapped)
		b, _ := os.ReadFile(hs.audit)
		if !strings.Contains(string(b), `"serviceRelogin":true`) {
			t.Error("no audit line says serviceRelogin: true")
		}
		if m, isErr := read(alice, "proposal-aurora"); isErr {
			t.Fatalf("alice after the service session was dropped: %v", m)
		}
		bobServed("a dropped service session")
	})

	t.Run("restarted Gateway", func(t *testing.T) {
		hs.env.RestartSamePort(t)
		gw = hs.env.Gateway
		if m, isErr := read(alice, "proposal-aurora"); isErr {
			t.Fatalf("alice after the restart: %v", m)
		}
		bobServed("a restart")
		b, _ := os.ReadFile(hs.audit)
		if !strings.Contains(string(b), `"sessionReplaced":true`) {
			t.Error("no audit line says sessionReplaced: true")
		}
	})
}

// cuttingProxy forwards TCP to a target and can cut every connection it
// carries at once.
type cuttingProxy struct {
	addr string
	mu   sync.Mutex
	conn []net.Conn
}

func newCuttingProxy(t *testing.T, target string) *cuttingProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cuttingProxy{addr: ln.Addr().String()}
	t.Cleanup(func() { ln.Close(); p.cut() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conn = append(p.conn, c, u)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(u, c); u.Close() }()
			go func() { _, _ = io.Copy(c, u); c.Close() }()
		}
	}()
	return p
}

func (p *cuttingProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conn {
		c.Close()
	}
	p.conn = nil
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
