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
//	go test ./server -run TestGatewayFaults
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
		gw.SetFaults(reference.Faults{Delay: time.Hour, DelayActingAs: hs.svc.Prefix + "t.alice"})
		done := make(chan struct{})
		var m map[string]any
		var isErr bool
		go func() {
			defer close(done)
			m, isErr = read(alice, "proposal-aurora")
		}()
		// Served while alice's call hangs.
		bobServed("alice's call began to hang")
		<-done
		gw.SetFaults(reference.Faults{})
		wantRefusal("a timeout", m, isErr, "gateway", api.CodeUnreachable)
		if m, isErr := read(alice, "proposal-aurora"); isErr {
			t.Fatalf("alice after the timeout: %v", m)
		}
	})

	t.Run("dropped connection", func(t *testing.T) {
		decrypts := gw.Count(api.RouteDecrypt)
		gw.SetFaults(reference.Faults{Delay: time.Hour, DelayActingAs: hs.svc.Prefix + "t.alice"})
		done := make(chan struct{})
		var m map[string]any
		var isErr bool
		go func() {
			defer close(done)
			m, isErr = read(alice, "proposal-aurora")
		}()
		// Cut the connection once alice's decrypt has reached the Gateway.
		for gw.Count(api.RouteDecrypt) == decrypts {
			time.Sleep(time.Millisecond)
		}
		proxy.cut()
		<-done
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
