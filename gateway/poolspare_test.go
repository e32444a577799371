package gateway_test

import (
	"cmp"
	"context"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/reference"
	"github.com/pdmcp/pdmcp/internal/testutil"
)

// sparePlaces is the places of newSparePool's pool.
const sparePlaces = 2

// newSparePool is a pool of sparePlaces places as cfg sets it (waiting a
// minute for a place unless cfg says otherwise), and three users for it:
// alice and bob to fill it, carol the newcomer. The Gateway's counts start
// from here.
func newSparePool(t *testing.T, cfg gateway.PoolConfig) (w *poolWorld, p *gateway.Pool, alice, bob, carol *poolUser) {
	t.Helper()
	w = newPoolWorld(t)
	w.mapUser(t, "carol")
	cfg.MaxCallers, cfg.MaxPlaceWait = sparePlaces, cmp.Or(cfg.MaxPlaceWait, time.Minute)
	p = w.pool(t, cfg)
	alice, bob, carol = w.user(t, "alice"), w.user(t, "bob"), w.user(t, "carol")
	w.env.Gateway.ResetCounts()
	return w, p, alice, bob, carol
}

// TestPoolKeepsAPlaceFreeAhead: once the pool is full, the least recent
// idle user is ended in the background, so a newcomer mints at once: with
// every revoke held at the Gateway (a barrier), carol is served, and the
// only revoke since she arrived is bob's, ended ahead of the next
// newcomer and still held. The Gateway never sees more than maxCallers
// live.
func TestPoolKeepsAPlaceFreeAhead(t *testing.T) {
	// Any idle time qualifies: the test is about the order, not the age.
	w, p, alice, bob, carol := newSparePool(t, gateway.PoolConfig{MinIdle: time.Nanosecond, SpareIdle: time.Nanosecond})

	aliceSess := w.session(t, p, alice)
	w.session(t, p, bob)
	// Bob's mint filled the pool: alice, idle, is ended in the background.
	testutil.WaitFor(t, "a place freed ahead of need", func() bool { return p.Places() == sparePlaces-1 })
	w.wantEnded(t, aliceSess)
	if n := w.count(api.RouteRevoke); n != 1 {
		t.Fatalf("%d revokes, want alice's only", n)
	}

	w.env.Gateway.SetFaults(reference.Faults{HoldRoute: api.RouteRevoke})
	revokes := w.count(api.RouteRevoke)
	done := make(chan error, 1)
	go func() {
		_, err := p.Session(context.Background(), carol.caller.ID(), w.source(carol, nil))
		done <- err
	}()
	// Carol must be served while every revoke is held.
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("carol: %v", err)
		}
	case <-time.After(20 * time.Second):
		w.env.Gateway.SetFaults(reference.Faults{})
		t.Fatal("carol was not served while revokes were held: her mint waited on a revoke")
	}
	// Her mint filled the pool again: bob's revoke is on its way, held.
	testutil.WaitFor(t, "bob's revoke sent ahead of need", func() bool { return w.count(api.RouteRevoke) == revokes+1 })
	if live, peak := w.env.Gateway.LiveScopedSessions(); live > sparePlaces || peak > sparePlaces {
		t.Fatalf("live %d, peak %d with a revoke held; maxCallers is %d", live, peak, sparePlaces)
	}
	if n := p.Places(); n != sparePlaces {
		t.Fatalf("%d places held while bob's revoke is in flight, want %d (his place is freed only once revoked)", n, sparePlaces)
	}
	w.env.Gateway.SetFaults(reference.Faults{})
	testutil.WaitFor(t, "bob's place freed once his revoke is answered", func() bool { return p.Places() == sparePlaces-1 })
	if live, peak := w.env.Gateway.LiveScopedSessions(); live != 1 || peak > sparePlaces {
		t.Fatalf("live %d, peak %d; want carol's alone, never over %d", live, peak, sparePlaces)
	}
	if p.Current(carol.caller.ID()) == nil || p.Current(bob.caller.ID()) != nil {
		t.Fatal("carol should hold a session and bob none")
	}
}

// TestPoolNewcomerArrivalFreesAPlace: with no user idle long enough to be
// ended as a spare, a newcomer's arrival starts the eviction of the least
// recent user idle for MinIdle at once, before the newcomer's subject token
// is fetched: the revoke has reached the Gateway while carol's token source
// runs. Bob, who called more recently, keeps his session; never more than
// maxCallers live.
func TestPoolNewcomerArrivalFreesAPlace(t *testing.T) {
	clock := &fakeClock{}
	w, p, alice, bob, carol := newSparePool(t, gateway.PoolConfig{MinIdle: time.Minute, SpareIdle: time.Hour, Now: clock.Now})
	aliceSess := w.session(t, p, alice)
	bobSess := w.session(t, p, bob)
	if n := w.count(api.RouteRevoke); n != 0 || p.Places() != sparePlaces {
		t.Fatalf("%d revokes, %d places before carol: nobody is idle an hour", n, p.Places())
	}
	clock.Advance(time.Minute + time.Second) // both idle past MinIdle

	w.env.Gateway.SetFaults(reference.Faults{HoldRoute: api.RouteRevoke})
	sawRevoke := false
	exchange := w.source(carol, nil)
	source := func(ctx context.Context) (gateway.SubjectToken, error) {
		deadline := time.Now().Add(20 * time.Second)
		for !sawRevoke && time.Now().Before(deadline) {
			sawRevoke = w.count(api.RouteRevoke) == 1
			time.Sleep(time.Millisecond)
		}
		w.env.Gateway.SetFaults(reference.Faults{})
		return exchange(ctx)
	}
	if _, err := p.Session(context.Background(), carol.caller.ID(), source); err != nil {
		t.Fatalf("carol: %v", err)
	}
	if !sawRevoke {
		t.Fatal("no revoke reached the Gateway while carol's token was fetched: the place was freed only after")
	}
	w.wantEnded(t, aliceSess)
	wantOnlyAliceEnded(t, w, p, bob, bobSess)
}

// TestPoolExpectFreesAPlace: a caller expected before their first call
// (Expect) has the least recent user idle for MinIdle ended in the
// background at once, and the place passes to them; a caller with an
// entry, or one expected when no place can be freed for them (the others
// called within MinIdle, or hold the place reserved), ends nobody; the
// newcomer then mints without another revoke.
//
// Changed by issue 31: the place freed is reserved for carol, so it never
// counts as free, and only a user idle for MinIdle is ended ahead.
func TestPoolExpectFreesAPlace(t *testing.T) {
	clock := &fakeClock{}
	w, p, alice, bob, carol := newSparePool(t, gateway.PoolConfig{MinIdle: time.Minute, SpareIdle: time.Hour, Now: clock.Now})
	aliceSess := w.session(t, p, alice)
	bobSess := w.session(t, p, bob)
	clock.Advance(time.Minute + time.Second)
	if s := w.session(t, p, bob); s != bobSess { // bob is back within MinIdle; alice is not
		t.Fatal("bob lost his session")
	}
	p.Expect(bob.caller.ID())
	if n := w.count(api.RouteRevoke); n != 0 || p.Current(alice.caller.ID()) == nil {
		t.Fatalf("%d revokes, alice's session gone after expecting bob, who holds a session", n)
	}
	p.Expect(carol.caller.ID())
	testutil.WaitFor(t, "alice's revoke, for carol", func() bool { return w.count(api.RouteRevoke) == 1 })
	w.wantEnded(t, aliceSess)
	testutil.WaitFor(t, "the place passed to carol", func() bool { return p.Places() == sparePlaces })
	p.Expect("dave") // bob called within MinIdle, carol's place is hers: nobody else is ended
	w.session(t, p, carol)
	wantOnlyAliceEnded(t, w, p, bob, bobSess)
}

// wantOnlyAliceEnded is how a newcomer test of newSparePool ends: bob keeps
// his session, alice's was the only revoke, and the Gateway never saw more
// than sparePlaces live.
func wantOnlyAliceEnded(t *testing.T, w *poolWorld, p *gateway.Pool, bob *poolUser, bobSess *gateway.Session) {
	t.Helper()
	if s := w.session(t, p, bob); s != bobSess {
		t.Fatal("bob lost his session")
	}
	if n := w.count(api.RouteRevoke); n != 1 {
		t.Fatalf("%d revokes, want alice's only", n)
	}
	if _, peak := w.env.Gateway.LiveScopedSessions(); peak > sparePlaces {
		t.Fatalf("peak %d live; maxCallers is %d", peak, sparePlaces)
	}
}
