package server_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/internal/testutil"
	"github.com/pdmcp/pdmcp/server"
)

// A stdio task's sessions follow a changed grant: new keys end the live
// session (revoked) and the next is minted over exactly the new keys; a
// later end keeps the live session; an earlier end than the live session's
// ends it; and a renewal after the old end serves again.
func TestGrantSessionsRegrant(t *testing.T) {
	ctx := context.Background()
	env, c, agent := agentClient(t)
	clk := testutil.NewClock(time.Now())
	gs := server.NewGrantSessions(c, agent, []string{"tag-a", "tag-b"}, clk.Now().Add(time.Hour), clk.Now, nil)
	s1, err := acquire(ctx, gs)
	if err != nil {
		t.Fatal(err)
	}

	// Only a later end: the live session stays.
	if err := gs.Regrant(ctx, []string{"tag-b", "tag-a"}, clk.Now().Add(30*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if again, _ := acquire(ctx, gs); again.JKT() != s1.JKT() {
		t.Fatal("a renewal with the same keys replaced the live session")
	}

	// Narrowed keys: the wide session is revoked, the next covers tag-a only.
	revokes := env.Gateway.Count(api.RouteRevoke)
	if err := gs.Regrant(ctx, []string{"tag-a"}, clk.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if env.Gateway.Count(api.RouteRevoke) != revokes+1 {
		t.Fatal("the session over the dropped key was not revoked")
	}
	s2, err := acquire(ctx, gs)
	if err != nil {
		t.Fatal(err)
	}
	if got := s2.(*gateway.Session).Objects(); !slices.Equal(got, []string{"tag-a"}) {
		t.Fatalf("the session after narrowing covers %v, want [tag-a]", got)
	}

	// An end before the live session's: it is ended.
	if err := gs.Regrant(ctx, []string{"tag-a"}, clk.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if gs.Len() != 0 {
		t.Fatal("a session outliving the shortened grant was kept")
	}

	// Past the end: refused; renewed: served again.
	clk.Advance(2 * time.Minute)
	if _, err := acquire(ctx, gs); err == nil {
		t.Fatal("a session was minted past the grant's end")
	}
	if err := gs.Regrant(ctx, []string{"tag-a"}, clk.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := acquire(ctx, gs); err != nil {
		t.Fatalf("after the renewal: %v", err)
	}
}
