package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
)

// TestPoolMaxCallersIsAHardCap: eleven users call at once, each several
// times, through a pool of three places. The reference Gateway counts the
// scoped sessions live at every mint: never more than three. A session
// handed to a call in flight is never ended under it (each held session
// still reaches the key server), and every call is served. So too when
// every user is expected before each call and any idle time lets a user
// be ended ahead of need: places freed and reserved in the background
// mix with places taken at need.
func TestPoolMaxCallersIsAHardCap(t *testing.T) {
	t.Run("at need", func(t *testing.T) { testPoolHardCap(t, gateway.PoolConfig{}, false) })
	t.Run("ahead of need", func(t *testing.T) {
		testPoolHardCap(t, gateway.PoolConfig{MinIdle: time.Nanosecond, SpareIdle: time.Nanosecond}, true)
	})
}

func testPoolHardCap(t *testing.T, cfg gateway.PoolConfig, expect bool) {
	w := newPoolWorld(t)
	const maxCallers, rounds = 3, 3
	names := []string{"alice", "bob", "carol"}
	for i := 1; i <= 8; i++ {
		names = append(names, fmt.Sprintf("user%d", i))
	}
	for _, n := range names[2:] {
		w.mapUser(t, n)
	}
	users := make([]*poolUser, len(names))
	for i, n := range names {
		users[i] = w.user(t, n)
	}
	// A generous wait: this test is about the cap, not about giving up.
	cfg.MaxCallers, cfg.MaxPlaceWait = maxCallers, time.Minute
	p := w.pool(t, cfg)
	w.env.Gateway.ResetCounts()

	var wg sync.WaitGroup
	errs := make(chan error, len(users)*rounds)
	for _, u := range users {
		wg.Go(func() {
			for range rounds {
				if expect {
					p.Expect(u.caller.ID())
				}
				s, release, err := p.Acquire(context.Background(), u.caller.ID(), w.source(u, nil))
				if err != nil {
					errs <- fmt.Errorf("%s: %w", u.name, err)
					return
				}
				if n := p.Places(); n > maxCallers {
					errs <- fmt.Errorf("%d places held, over %d", n, maxCallers)
				}
				if s.ActingAs() != u.principal {
					errs <- fmt.Errorf("%s got a session acting as %s", u.name, s.ActingAs())
				}
				// The session is busy: it must still be live at the Gateway.
				_, err = s.Decrypt(context.Background(), w.ttag, w.iv, w.ct)
				if u.name == "alice" && err != nil {
					errs <- fmt.Errorf("alice's decrypt on her held session: %w", err)
				}
				if u.name != "alice" {
					var ae *api.Error
					if !errors.As(err, &ae) || ae.Layer != api.LayerKeyServer {
						errs <- fmt.Errorf("%s's held session did not reach the key server: %v", u.name, err)
					}
				}
				release()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	live, peak := w.env.Gateway.LiveScopedSessions()
	if peak > maxCallers || live > maxCallers {
		t.Fatalf("the Gateway saw %d scoped sessions live at once (%d now); maxCallers is %d", peak, live, maxCallers)
	}
	if peak != maxCallers {
		t.Errorf("peak %d: eleven users never filled %d places", peak, maxCallers)
	}
	if mints := w.count(api.RouteScoped); mints < len(users) {
		t.Fatalf("%d mints for %d users", mints, len(users))
	}
	if p.Len() > maxCallers || p.Places() > maxCallers {
		t.Fatalf("after the calls: Len %d, places %d", p.Len(), p.Places())
	}
}

// TestPoolAllBusyIsRetryable: with every place held by a call in flight, a
// newcomer waits the bounded time and is refused SESSIONS_BUSY, retryable,
// with nothing sent to the Gateway's mint; once the call ends, the
// newcomer takes that place (the idle user's session revoked first).
func TestPoolAllBusyIsRetryable(t *testing.T) {
	w := newPoolWorld(t)
	p := w.pool(t, gateway.PoolConfig{MaxCallers: 1, MaxPlaceWait: 50 * time.Millisecond})
	alice, bob := w.user(t, "alice"), w.user(t, "bob")
	ctx := context.Background()
	as, release, err := p.Acquire(ctx, alice.caller.ID(), w.source(alice, nil))
	if err != nil {
		t.Fatal(err)
	}
	mints, revokes := w.count(api.RouteScoped), w.count(api.RouteRevoke)

	_, err = p.Session(ctx, bob.caller.ID(), w.source(bob, nil))
	ae := wantRefusalCode(t, err, api.LayerAdapter, api.CodeSessionsBusy)
	if ae.Status != 503 || ae.RetryAfter < time.Second {
		t.Fatalf("status %d, retryAfter %s; want 503 and at least a second", ae.Status, ae.RetryAfter)
	}
	if w.count(api.RouteScoped) != mints || w.count(api.RouteRevoke) != revokes {
		t.Fatal("a busy refusal sent a mint or a revoke")
	}
	if pt, err := as.Decrypt(ctx, w.ttag, w.iv, w.ct); err != nil || string(pt) != string(w.plaintext) {
		t.Fatalf("alice's busy session after bob's refusal: %v", err)
	}

	release()
	bs := w.session(t, p, bob)
	if bs.ActingAs() != bob.principal {
		t.Fatalf("bob acts as %s", bs.ActingAs())
	}
	w.wantEnded(t, as)
	if w.count(api.RouteRevoke) != revokes+1 {
		t.Fatal("alice's idle session was not revoked for bob")
	}
	if live, peak := w.env.Gateway.LiveScopedSessions(); live != 1 || peak > 1 {
		t.Fatalf("live %d, peak %d; want 1 and at most 1", live, peak)
	}
}

// TestPoolSessionsEndByNotAfter: a pooled session never outlives the
// grant's notAfter, and none is minted past it.
func TestPoolSessionsEndByNotAfter(t *testing.T) {
	w := newPoolWorld(t)
	clock := &fakeClock{}
	notAfter := time.Now().Add(90 * time.Second)
	p := w.pool(t, gateway.PoolConfig{NotAfter: notAfter, Now: clock.Now})
	alice := w.user(t, "alice")
	s := w.session(t, p, alice)
	if end := s.ExpiresAt(); end.After(notAfter.Add(2 * time.Second)) {
		t.Fatalf("session ends %s, after notAfter %s", end, notAfter)
	}
	clock.Set(91 * time.Second)
	mints := w.count(api.RouteScoped)
	_, err := p.Session(context.Background(), alice.caller.ID(), w.source(alice, nil))
	if !errors.Is(err, gateway.ErrPastNotAfter) {
		t.Fatalf("past notAfter: %v", err)
	}
	if w.count(api.RouteScoped) != mints {
		t.Fatal("a session was minted past notAfter")
	}
}
