package serve_test

import (
	"context"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/reference"
	"github.com/pdmcp/pdmcp/internal/mcptest"
)

// TestHTTPSlowSaveDoesNotBlockAnotherUser: while the Gateway holds bob's
// encrypt, alice's save runs to its receipt; bob's save is still waiting
// when alice's returns, and ends once the Gateway lets it go.
func TestHTTPSlowSaveDoesNotBlockAnotherUser(t *testing.T) {
	hs := newHTTPStack(t, 8)
	alice := hs.connect(t, hs.token(t, "alice", "pw-a"))
	bob := hs.connect(t, hs.token(t, "bob", "pw-b"))
	// Held until the faults change: the order below does not depend on
	// how fast the machine is.
	hs.env.Gateway.SetFaults(reference.Faults{Delay: time.Hour, DelayActingAs: hs.svc.Prefix + "t.bob"})
	t.Cleanup(func() { hs.env.Gateway.SetFaults(reference.Faults{}) })

	encrypts := hs.env.Gateway.Count(api.RouteEncrypt)
	bobDone := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, err := bob.CallTool(context.Background(), &mcp.CallToolParams{Name: "save_protected_result",
			Arguments: map[string]any{"destinationId": "evaluation-summary", "text": "bob's summary", "idempotencyKey": "b-1"}})
		if err != nil {
			res = nil
		}
		bobDone <- res
	}()
	for hs.env.Gateway.Count(api.RouteEncrypt) == encrypts {
		time.Sleep(time.Millisecond)
	}

	a, isErr := mcptest.Call(t, alice, "save_protected_result",
		map[string]any{"destinationId": "evaluation-summary", "text": "alice's summary", "idempotencyKey": "a-1"})
	if isErr || a["version"] != float64(1) {
		t.Fatalf("alice's save while bob's encrypt is held: %v", a)
	}
	select {
	case <-bobDone:
		t.Fatal("bob's save ended before alice's, though the Gateway still held his encrypt")
	default:
	}

	hs.env.Gateway.SetFaults(reference.Faults{})
	res := <-bobDone
	if res == nil {
		t.Fatal("bob's save failed at the protocol level")
	}
	m := mcptest.Result(t, res)
	// bob has no entry on the destination's key: the key server says so.
	if !res.IsError || m["layer"] != "keyserver" {
		t.Fatalf("bob's save after the hold: %v", m)
	}
}
