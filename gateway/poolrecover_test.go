package gateway_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/gateway"
)

// panicsOnce is a Minter that panics at its first mint, as a bug in
// minting would.
type panicsOnce struct {
	gateway.Minter
	done atomic.Bool
}

func (m *panicsOnce) Mint(ctx context.Context, r gateway.MintRequest) (*gateway.Session, error) {
	if m.done.CompareAndSwap(false, true) {
		panic("a bug in minting")
	}
	return m.Minter.Mint(ctx, r)
}

// TestPoolPanicInAMintLeavesNoPlaceHeld (issue 31 item 5): a mint that
// panics, recovered by the tool call that asked (which then ends the
// user, as the server does), leaves the user's entry free and their place
// given up: with one place, the next user gets it at once instead of
// SESSIONS_BUSY, and the user who panicked is served again.
func TestPoolPanicInAMintLeavesNoPlaceHeld(t *testing.T) {
	w := newPoolWorld(t)
	p, err := gateway.NewPool(gateway.PoolConfig{Minter: &panicsOnce{Minter: w.c}, Objects: []string{w.ttag},
		MaxCallers: 1, MaxPlaceWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.EndAll(context.Background()) })
	ctx := context.Background()
	alice, bob := w.user(t, "alice"), w.user(t, "bob")
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the mint did not panic")
			}
		}()
		_, _ = p.Session(ctx, alice.caller.ID(), w.source(alice, nil))
	}()
	p.End(ctx, alice.caller.ID())
	if n := p.Places(); n != 0 {
		t.Fatalf("%d places held after the panicking user was ended, want 0", n)
	}
	w.session(t, p, bob)
	p.End(ctx, bob.caller.ID())
	w.session(t, p, alice)
}
