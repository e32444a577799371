package gateway_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/reference"
	"github.com/pdmcp/pdmcp/internal/testutil"
)

// aheadMinIdle is the MinIdle of the pools here.
const aheadMinIdle = time.Minute

// newAheadPool is newSparePool with MinIdle aheadMinIdle on a hand-moved
// clock, a place waited for at most 50 ms, and a log the test can read.
func newAheadPool(t *testing.T) (w *poolWorld, p *gateway.Pool, clock *fakeClock, logs *testutil.LogBuffer, alice, bob, carol *poolUser) {
	t.Helper()
	clock, logs = &fakeClock{}, &testutil.LogBuffer{}
	w, p, alice, bob, carol = newSparePool(t, gateway.PoolConfig{MinIdle: aheadMinIdle, Now: clock.Now,
		MaxPlaceWait: 50 * time.Millisecond, Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	return w, p, clock, logs, alice, bob, carol
}

// holds reports whether u holds a session: an eviction ahead of need takes
// the user out of the pool at once, before their revoke is sent.
func holds(p *gateway.Pool, u *poolUser) bool { return p.Current(u.caller.ID()) != nil }

// TestPoolAheadNeverEndsARecentUser: with the pool full of users who called
// within MinIdle, nothing ahead of need ends one of them: not a newcomer
// expected (Expect), not a newcomer's arrival before their subject token is
// fetched, and not the spare kept once the pool fills (the old 5 s spare
// would end alice here, idle 30 s). Once they have been idle for MinIdle,
// the same newcomer does end the least recent of them.
func TestPoolAheadNeverEndsARecentUser(t *testing.T) {
	for _, tc := range []struct {
		name string
		// try is the trigger, with alice and bob in the pool; it reports
		// whether alice still held her session once it had acted.
		try func(t *testing.T, w *poolWorld, p *gateway.Pool, alice, carol *poolUser) bool
	}{
		{"a newcomer expected", func(_ *testing.T, _ *poolWorld, p *gateway.Pool, alice, carol *poolUser) bool {
			p.Expect(carol.caller.ID())
			return holds(p, alice)
		}},
		{"a newcomer's arrival, while their token is fetched", func(t *testing.T, w *poolWorld, p *gateway.Pool, alice, carol *poolUser) bool {
			var kept bool
			exchange := w.source(carol, nil)
			src := func(ctx context.Context) (gateway.SubjectToken, error) {
				kept = holds(p, alice)
				return exchange(ctx)
			}
			// Her call then needs a place: it ends alice, the least
			// recent, once its token is in hand. That is need, not ahead.
			if _, err := p.Session(context.Background(), carol.caller.ID(), src); err != nil {
				t.Fatalf("carol: %v", err)
			}
			return kept
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, p, clock, _, alice, bob, carol := newAheadPool(t)
			aliceSess := w.session(t, p, alice)
			clock.Advance(aheadMinIdle / 2)
			bobSess := w.session(t, p, bob) // fills the pool: no spare is freed either
			if !holds(p, alice) {
				t.Fatal("bob's mint filled the pool and ended alice, idle for half of MinIdle")
			}
			if !tc.try(t, w, p, alice, carol) {
				t.Fatalf("alice, idle for half of MinIdle, was ended ahead of need")
			}
			if n := w.count(api.RouteRevoke); n > 1 {
				t.Fatalf("%d revokes", n)
			}
			if s := w.session(t, p, bob); s != bobSess {
				t.Fatal("bob lost his session")
			}

			// Past MinIdle, the same trigger (for dave, a newcomer too) ends
			// alice when she is still there.
			if !holds(p, alice) {
				return // the arriving newcomer's call ended her at need
			}
			clock.Advance(aheadMinIdle)
			p.Expect("dave")
			if holds(p, alice) {
				t.Fatal("alice, idle past MinIdle, was not ended for an expected newcomer")
			}
			testutil.WaitFor(t, "alice's revoke", func() bool { return w.count(api.RouteRevoke) == 1 })
			w.wantEnded(t, aliceSess)
		})
	}
}

// TestPoolExpectEndsNobodyItCannotServe: Expect ends nobody when the caller
// expected would not get the place freed: they hold a session or a place
// already, a place is free for them anyway, another place is being freed,
// or every user called within MinIdle. Bob and alice fill the pool, both
// idle past MinIdle unless the case calls them again.
func TestPoolExpectEndsNobodyItCannotServe(t *testing.T) {
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, w *poolWorld, p *gateway.Pool, clock *fakeClock, logs *testutil.LogBuffer, alice, bob, carol *poolUser)
		expect  func(bob, carol *poolUser) string
		// free is how many places are left unused: the pool never reserves
		// a place no one was ended for.
		free int
	}{
		{name: "the caller holds a session", expect: func(bob, _ *poolUser) string { return bob.caller.ID() }},
		{name: "no caller", expect: func(_, _ *poolUser) string { return "" }},
		{name: "every user called within MinIdle", expect: func(_, carol *poolUser) string { return carol.caller.ID() },
			prepare: func(t *testing.T, w *poolWorld, p *gateway.Pool, clock *fakeClock, _ *testutil.LogBuffer, alice, bob, _ *poolUser) {
				w.session(t, p, bob)
				clock.Advance(aheadMinIdle - time.Second)
				w.session(t, p, alice)
			}},
		{name: "a place is free", expect: func(_, carol *poolUser) string { return carol.caller.ID() }, free: 1,
			prepare: func(t *testing.T, w *poolWorld, p *gateway.Pool, _ *fakeClock, _ *testutil.LogBuffer, _, bob, _ *poolUser) {
				p.End(context.Background(), bob.caller.ID())
			}},
		{name: "the caller holds a place reserved", expect: func(_, carol *poolUser) string { return carol.caller.ID() },
			prepare: func(t *testing.T, w *poolWorld, p *gateway.Pool, clock *fakeClock, logs *testutil.LogBuffer, alice, bob, carol *poolUser) {
				p.Expect(carol.caller.ID()) // ends bob, the least recent
				waitReserved(t, logs, 1)
				clock.Advance(aheadMinIdle + time.Second) // alice idle past MinIdle again
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, p, clock, logs, alice, bob, carol := newAheadPool(t)
			w.session(t, p, bob)
			w.session(t, p, alice)
			clock.Advance(aheadMinIdle + time.Second)
			if tc.prepare != nil {
				tc.prepare(t, w, p, clock, logs, alice, bob, carol)
			}
			revokes := w.count(api.RouteRevoke)
			aliceHeld, bobHeld := holds(p, alice), holds(p, bob)
			p.Expect(tc.expect(bob, carol))
			// An eviction ahead takes its user out of the pool at once.
			if holds(p, alice) != aliceHeld || holds(p, bob) != bobHeld {
				t.Fatal("a user was ended ahead of need for a caller who would not get their place")
			}
			if n := w.count(api.RouteRevoke); n != revokes {
				t.Fatalf("%d revokes sent", n-revokes)
			}
			if got := sparePlaces - p.Places(); got != tc.free {
				t.Fatalf("%d places free, want %d", got, tc.free)
			}
		})
	}

	t.Run("another place is being freed", func(t *testing.T) {
		w, p, clock, logs, alice, bob, carol := newAheadPool(t)
		w.session(t, p, alice)
		w.session(t, p, bob)
		clock.Advance(aheadMinIdle + time.Second)
		// Alice's revoke is held until dave has been expected.
		w.env.Gateway.SetFaults(reference.Faults{HoldRoute: api.RouteRevoke})
		t.Cleanup(func() { w.env.Gateway.SetFaults(reference.Faults{}) })
		p.Expect(carol.caller.ID()) // ends alice; the place is carol's once revoked
		p.Expect("dave")
		if !holds(p, bob) {
			t.Fatal("bob was ended for dave while alice's place was being freed for carol")
		}
		w.env.Gateway.SetFaults(reference.Faults{})
		waitReserved(t, logs, 1)
		if n := w.count(api.RouteRevoke); n != 1 {
			t.Fatalf("%d revokes, want alice's only", n)
		}
	})
}

// TestPoolPlaceFreedAheadGoesToItsCaller: the place freed ahead of need for
// carol is hers: dave, calling in between with every other place busy,
// cannot take it (he is refused SESSIONS_BUSY, nothing minted for him),
// and carol's call then mints in it without ending anyone else. Before,
// the place freed for carol went to whoever called first.
func TestPoolPlaceFreedAheadGoesToItsCaller(t *testing.T) {
	w, p, clock, logs, alice, bob, carol := newAheadPool(t)
	w.mapUser(t, "user1")
	dave := w.user(t, "user1")
	aliceSess := w.session(t, p, alice)
	// Bob's call is in flight throughout: his place is never free.
	_, releaseBob, err := p.Acquire(context.Background(), bob.caller.ID(), w.source(bob, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer releaseBob()
	clock.Advance(aheadMinIdle + time.Second)

	p.Expect(carol.caller.ID())
	testutil.WaitFor(t, "alice's revoke", func() bool { return w.count(api.RouteRevoke) == 1 })
	w.wantEnded(t, aliceSess)
	mints := w.count(api.RouteScoped)
	_, err = p.Session(context.Background(), dave.caller.ID(), w.source(dave, nil))
	wantRefusalCode(t, err, api.LayerAdapter, api.CodeSessionsBusy)
	if w.count(api.RouteScoped) != mints {
		t.Fatal("a session was minted for dave in the place reserved for carol")
	}

	cs := w.session(t, p, carol)
	if cs.ActingAs() != carol.principal || !holds(p, carol) {
		t.Fatalf("carol's session acts as %q", cs.ActingAs())
	}
	if n := w.count(api.RouteRevoke); n != 1 {
		t.Fatalf("%d revokes, want alice's only", n)
	}
	if n := w.count(api.RouteScoped) - mints; n != 1 {
		t.Fatalf("%d mints for carol, want 1", n)
	}
	if live, peak := w.env.Gateway.LiveScopedSessions(); live != sparePlaces || peak > sparePlaces {
		t.Fatalf("live %d, peak %d; maxCallers is %d", live, peak, sparePlaces)
	}
	waitReserved(t, logs, 1)
	if text := logs.String(); strings.Contains(text, carol.caller.ID()) || strings.Contains(text, alice.caller.ID()) {
		t.Fatal("the pool's log names a caller by their id")
	}
}

// TestPoolUnusedReservationLapses: a place reserved for a newcomer who
// never calls is kept for them for MinIdle only; then a caller who needs a
// place takes it, with nothing to revoke, since nothing was minted in it.
func TestPoolUnusedReservationLapses(t *testing.T) {
	w, p, clock, logs, alice, bob, carol := newAheadPool(t)
	w.mapUser(t, "user1")
	dave := w.user(t, "user1")
	w.session(t, p, alice)
	_, releaseBob, err := p.Acquire(context.Background(), bob.caller.ID(), w.source(bob, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer releaseBob()
	clock.Advance(aheadMinIdle + time.Second)
	p.Expect(carol.caller.ID())
	waitReserved(t, logs, 1)
	// Carol never calls.
	clock.Advance(aheadMinIdle + time.Second)
	revokes := w.count(api.RouteRevoke)
	ds := w.session(t, p, dave)
	if ds.ActingAs() != dave.principal {
		t.Fatalf("dave acts as %q", ds.ActingAs())
	}
	if w.count(api.RouteRevoke) != revokes {
		t.Fatal("a revoke was sent for a place no session was minted in")
	}
	if live, peak := w.env.Gateway.LiveScopedSessions(); live != sparePlaces || peak > sparePlaces {
		t.Fatalf("live %d, peak %d; maxCallers is %d", live, peak, sparePlaces)
	}
}

// waitReserved waits until the pool has logged n places reserved for a
// newcomer.
func waitReserved(t *testing.T, logs *testutil.LogBuffer, n int) {
	t.Helper()
	testutil.WaitFor(t, "a place reserved for a newcomer", func() bool {
		return strings.Count(logs.String(), "place reserved for a newcomer") >= n
	})
}

// TestNewPoolRefusesSpareUnderMinIdle: a spare kept sooner than MinIdle
// would end users MinIdle protects; the pool refuses the contradiction.
func TestNewPoolRefusesSpareUnderMinIdle(t *testing.T) {
	var c gateway.Client
	for _, tc := range []struct {
		name string
		cfg  gateway.PoolConfig
		want string // "" for accepted
	}{
		{"spare under the default MinIdle", gateway.PoolConfig{SpareIdle: 5 * time.Second}, "under MinIdle"},
		{"spare under MinIdle", gateway.PoolConfig{MinIdle: time.Hour, SpareIdle: time.Minute}, "under MinIdle"},
		{"negative MinIdle", gateway.PoolConfig{MinIdle: -time.Second}, "MinIdle -1s is negative"},
		{"spare at MinIdle", gateway.PoolConfig{MinIdle: time.Second, SpareIdle: time.Second}, ""},
		{"MinIdle alone", gateway.PoolConfig{MinIdle: time.Hour}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Minter, tc.cfg.Objects = &c, []string{"t"}
			_, err := gateway.NewPool(tc.cfg)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("NewPool = %v; want an error naming %q", err, tc.want)
			}
		})
	}
}
