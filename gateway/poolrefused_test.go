package gateway_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
)

// refusedMinIdle is the MinIdle, and so the RefusedFor, of the pools here.
const refusedMinIdle = time.Minute

// newRefusedPool is a pool of two places on a hand-moved clock, holding
// alice's and bob's sessions, a place waited for at most 50 ms; carol is
// signed in but not mapped.
func newRefusedPool(t *testing.T, cfg gateway.PoolConfig) (w *poolWorld, p *gateway.Pool, clock *fakeClock, alice, bob, carol *poolUser) {
	t.Helper()
	w = newPoolWorld(t)
	clock = &fakeClock{}
	cfg.MaxCallers, cfg.MinIdle, cfg.Now, cfg.MaxPlaceWait = 2, refusedMinIdle, clock.Now, 50*time.Millisecond
	p = w.pool(t, cfg)
	alice, bob, carol = w.user(t, "alice"), w.user(t, "bob"), w.user(t, "carol")
	return w, p, clock, alice, bob, carol
}

// TestPoolRefusedCallerDoesNotChurn: carol, whom the Gateway will never
// serve, calls 50 times into a full pool of recent users. Her first call
// ends the least recent of them (a newcomer with a token in hand ends a
// user at need: TestPoolEvictsLeastRecentCaller) and is refused; the 49
// after it, within RefusedFor, get the same refusal with nothing sent to
// the Gateway and no one ended. Past RefusedFor she is tried again, but
// ends only a user idle past MinIdle; and once an operator maps her, her
// next try mints.
func TestPoolRefusedCallerDoesNotChurn(t *testing.T) {
	w, p, clock, alice, bob, carol := newRefusedPool(t, gateway.PoolConfig{})
	ctx := context.Background()
	call := func() error {
		_, err := p.Session(ctx, carol.caller.ID(), w.source(carol, nil))
		return err
	}
	w.session(t, p, alice)
	w.session(t, p, bob)
	mints, revokes := w.count(api.RouteScoped), w.count(api.RouteRevoke)

	first := wantRefusalCode(t, call(), api.LayerGateway, api.CodeIdentityNotMapped)
	if n := w.count(api.RouteRevoke) - revokes; n != 1 {
		t.Fatalf("carol's first call: %d revokes, want alice's", n)
	}
	if n := w.count(api.RouteScoped) - mints; n != 1 {
		t.Fatalf("carol's first call: %d mints, want 1", n)
	}
	aliceSess := w.session(t, p, alice) // alice is back: the pool is full again
	bobSess := w.session(t, p, bob)
	mints, revokes = w.count(api.RouteScoped), w.count(api.RouteRevoke)

	for i := range 49 {
		ae := wantRefusalCode(t, call(), api.LayerGateway, api.CodeIdentityNotMapped)
		if ae.Status != first.Status || ae.Detail != first.Detail {
			t.Fatalf("call %d: refused %d %q, want %d %q", i+2, ae.Status, ae.Detail, first.Status, first.Detail)
		}
	}
	if n := w.count(api.RouteScoped) - mints; n != 0 {
		t.Fatalf("49 calls within RefusedFor sent %d mints", n)
	}
	if n := w.count(api.RouteRevoke) - revokes; n != 0 {
		t.Fatalf("49 calls within RefusedFor ended %d sessions", n)
	}
	if w.session(t, p, alice) != aliceSess || w.session(t, p, bob) != bobSess {
		t.Fatal("a user lost their session to carol's refused calls")
	}
	if p.Places() != 2 {
		t.Fatalf("%d places held, want alice's and bob's", p.Places())
	}

	// Past RefusedFor, with alice and bob still at work: carol is tried
	// again but ends neither; she waits for a place and is refused busy.
	clock.Advance(refusedMinIdle + time.Second)
	w.session(t, p, alice)
	w.session(t, p, bob)
	wantRefusalCode(t, call(), api.LayerAdapter, api.CodeSessionsBusy)
	if n := w.count(api.RouteScoped) - mints; n != 0 {
		t.Fatalf("a busy pool: %d mints", n)
	}
	if n := w.count(api.RouteRevoke) - revokes; n != 0 {
		t.Fatalf("carol, refused before, ended %d recent users", n)
	}

	// Bob is idle past MinIdle now: carol's next call ends him and asks
	// the Gateway once; refused again, she is remembered again.
	clock.Advance(refusedMinIdle + time.Second)
	w.session(t, p, alice)
	wantRefusalCode(t, call(), api.LayerGateway, api.CodeIdentityNotMapped)
	wantRefusalCode(t, call(), api.LayerGateway, api.CodeIdentityNotMapped)
	if n := w.count(api.RouteScoped) - mints; n != 1 {
		t.Fatalf("past RefusedFor: %d mints, want one new attempt", n)
	}
	if holds(p, bob) || !holds(p, alice) {
		t.Fatal("carol's try did not end bob, idle past MinIdle, alone")
	}

	// An operator maps carol: within RefusedFor she still gets the
	// refusal; past it, her call mints.
	w.mapUser(t, "carol")
	wantRefusalCode(t, call(), api.LayerGateway, api.CodeIdentityNotMapped)
	clock.Advance(refusedMinIdle + time.Second)
	w.session(t, p, alice)
	if s := w.session(t, p, carol); s.ActingAs() != carol.principal {
		t.Fatalf("carol's session acts as %q", s.ActingAs())
	}
	if n := w.count(api.RouteScoped) - mints; n != 2 {
		t.Fatalf("%d mints, want carol's two tries past RefusedFor", n)
	}
	if n := gateway.RefusedCallers(p); n != 0 {
		t.Fatalf("%d callers remembered after carol's mint, want 0", n)
	}
}

// TestPoolRefusedCallerConcurrentCallsMintOnce: twenty calls of an
// unmapped user at once send one mint between them.
func TestPoolRefusedCallerConcurrentCallsMintOnce(t *testing.T) {
	w, p, _, _, _, carol := newRefusedPool(t, gateway.PoolConfig{})
	mints := w.count(api.RouteScoped)
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 {
		wg.Go(func() {
			_, err := p.Session(context.Background(), carol.caller.ID(), w.source(carol, nil))
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		wantRefusalCode(t, err, api.LayerGateway, api.CodeIdentityNotMapped)
	}
	if n := w.count(api.RouteScoped) - mints; n != 1 {
		t.Fatalf("%d mints for twenty concurrent calls, want 1", n)
	}
}

// TestPoolRefusedCallersAreBounded: a flood of distinct refused callers
// (each a caller id with carol's unmapped identity) is remembered up to
// MaxRefusedCallers, the least recently refused dropped: the dropped one
// is asked about again, the remembered ones are not.
func TestPoolRefusedCallersAreBounded(t *testing.T) {
	const bound, flood = 4, 10
	w, p, _, alice, _, carol := newRefusedPool(t, gateway.PoolConfig{MaxRefusedCallers: bound})
	as := w.session(t, p, alice)
	id := func(i int) string { return fmt.Sprintf("flood-%d", i) }
	call := func(i int) {
		t.Helper()
		_, err := p.Session(context.Background(), id(i), w.source(carol, nil))
		wantRefusalCode(t, err, api.LayerGateway, api.CodeIdentityNotMapped)
	}
	mints := w.count(api.RouteScoped)
	for i := range flood {
		call(i)
		if n := gateway.RefusedCallers(p); n > bound {
			t.Fatalf("after %d refused callers, %d remembered, over %d", i+1, n, bound)
		}
	}
	if n := gateway.RefusedCallers(p); n != bound {
		t.Fatalf("%d remembered, want %d", n, bound)
	}
	if n := w.count(api.RouteScoped) - mints; n != flood {
		t.Fatalf("%d mints for %d distinct callers", n, flood)
	}
	call(flood - 1) // remembered
	if n := w.count(api.RouteScoped) - mints; n != flood {
		t.Fatal("a remembered caller was asked about again")
	}
	call(0) // dropped: asked about again
	if n := w.count(api.RouteScoped) - mints; n != flood+1 {
		t.Fatalf("the dropped caller: %d mints, want %d", n, flood+1)
	}
	if s := w.session(t, p, alice); s != as {
		t.Fatal("alice lost her session to the flood")
	}
}

// TestPoolRefusedCallerFreesNothingAhead: within RefusedFor (here longer
// than MinIdle), a refused caller expected or arriving frees no place
// ahead of need, though alice and bob are idle past MinIdle.
func TestPoolRefusedCallerFreesNothingAhead(t *testing.T) {
	w, p, clock, alice, bob, carol := newRefusedPool(t, gateway.PoolConfig{RefusedFor: 5 * refusedMinIdle})
	w.session(t, p, alice)
	_, err := p.Session(context.Background(), carol.caller.ID(), w.source(carol, nil))
	wantRefusalCode(t, err, api.LayerGateway, api.CodeIdentityNotMapped)
	w.session(t, p, bob) // the pool is full
	mints, revokes := w.count(api.RouteScoped), w.count(api.RouteRevoke)

	clock.Advance(2 * refusedMinIdle)
	p.Expect(carol.caller.ID())
	_, err = p.Session(context.Background(), carol.caller.ID(), w.source(carol, nil))
	wantRefusalCode(t, err, api.LayerGateway, api.CodeIdentityNotMapped)
	if !holds(p, alice) || !holds(p, bob) {
		t.Fatal("a refused caller's expected or refused call ended a user ahead of need")
	}
	if n := w.count(api.RouteRevoke) - revokes; n != 0 {
		t.Fatalf("%d revokes", n)
	}
	if n := w.count(api.RouteScoped) - mints; n != 0 {
		t.Fatalf("%d mints", n)
	}

	// The same Expect for a newcomer never refused ends alice, idle past
	// MinIdle: what the refused caller was kept from.
	p.Expect("dave")
	if holds(p, alice) {
		t.Fatal("alice, idle past MinIdle, was not ended for an expected newcomer")
	}
}
