package gateway_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/gateway"
)

// The pool follows a changed grant: a later end keeps every session; new
// keys end them all (and the next covers the new keys); an end before a
// session's ends it; EndSessions ends every session and leaves the pool
// serving; a regrant it cannot follow is refused.
func TestPoolRegrant(t *testing.T) {
	ctx := context.Background()
	w := newPoolWorld(t)
	p := w.pool(t, gateway.PoolConfig{NotAfter: time.Now().Add(time.Hour)})
	alice, bob := w.user(t, "alice"), w.user(t, "bob")
	a1, b1 := w.session(t, p, alice), w.session(t, p, bob)

	if err := p.Regrant(ctx, []string{w.ttag}, time.Now().Add(30*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if a := w.session(t, p, alice); a != a1 {
		t.Fatal("a later end replaced a session")
	}

	wider := []string{w.ttag, "tag-other"}
	if err := p.Regrant(ctx, wider, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	w.wantEnded(t, a1)
	w.wantEnded(t, b1)
	a2 := w.session(t, p, alice)
	if got := a2.Objects(); !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(wider))) {
		t.Fatalf("the session after the regrant covers %v, want %v", got, wider)
	}

	if err := p.Regrant(ctx, wider, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	w.wantEnded(t, a2)
	a3 := w.session(t, p, alice)

	p.EndSessions(ctx)
	w.wantEnded(t, a3)
	if p.Len() != 0 {
		t.Fatalf("%d sessions after EndSessions", p.Len())
	}
	w.session(t, p, alice) // the pool still serves

	if err := p.Regrant(ctx, nil, time.Now().Add(time.Hour)); err == nil {
		t.Fatal("a regrant with no keys was accepted")
	}
	p.EndAll(ctx)
	if err := p.Regrant(ctx, wider, time.Now().Add(time.Hour)); !errors.Is(err, gateway.ErrPoolClosed) {
		t.Fatalf("regrant of a closed pool: %v", err)
	}
}
