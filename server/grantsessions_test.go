package server_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/reference"
	"github.com/pdmcp/pdmcp/gateway/reference/reftest"
	"github.com/pdmcp/pdmcp/internal/testutil"
	"github.com/pdmcp/pdmcp/server"
	"github.com/pdmcp/pdmcp/server/refusal"
)

// agentClient is a reference Gateway with one service and its agent
// principal: the service's client and the agent's name.
func agentClient(t *testing.T) (*reftest.Env, *gateway.Client, string) {
	t.Helper()
	env := reftest.Start(t, reference.Config{})
	svc := env.Service(t, "svc", true)
	c := env.ServiceClient(t, svc)
	return env, c, reftest.Principal(t, c, svc.Prefix+"agent").Name
}

func TestGrantSessionsRenewBeforeFiveMinutes(t *testing.T) {
	ctx := context.Background()
	env, c, agent := agentClient(t)
	clk := testutil.NewClock(time.Now())
	gs := server.NewGrantSessions(c, agent, []string{"tag-a"}, clk.Now().Add(time.Hour), clk.Now, nil)

	s1, err := acquire(ctx, gs)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := acquire(ctx, gs)
	if again.JKT() != s1.JKT() {
		t.Fatal("a live session was replaced")
	}
	if d := time.Until(s1.(*gateway.Session).ExpiresAt()); d > api.MaxScopedTTL+time.Second {
		t.Fatalf("session lives %s, more than five minutes", d)
	}
	clk.Advance(api.MaxScopedTTL - 20*time.Second)
	revokes := env.Gateway.Count(api.RouteRevoke)
	s2, err := acquire(ctx, gs)
	if err != nil {
		t.Fatal(err)
	}
	if s2.JKT() == s1.JKT() {
		t.Fatal("no fresh session near the end of the old one")
	}
	if env.Gateway.Count(api.RouteRevoke) != revokes+1 {
		t.Error("the old session was not revoked")
	}
	// The old session was revoked by this process: a call on it is refused
	// before anything is sent.
	decrypts := env.Gateway.Count(api.RouteDecrypt)
	_, err = s1.(*gateway.Session).Decrypt(ctx, "tag-a", make([]byte, 16), make([]byte, 32))
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Layer != api.LayerAdapter || ae.Code != api.CodeSessionRevoked ||
		!errors.Is(err, gateway.ErrSessionEnded) {
		t.Fatalf("old session still usable: %v", err)
	}
	if env.Gateway.Count(api.RouteDecrypt) != decrypts {
		t.Fatal("a call on the revoked old session reached the Gateway")
	}
	gs.EndAll(ctx)
	if env.Gateway.Count(api.RouteRevoke) != revokes+2 {
		t.Error("EndAll did not revoke")
	}
}

func TestGrantSessionsNeverOutliveTheGrant(t *testing.T) {
	ctx := context.Background()
	env, c, agent := agentClient(t)
	notAfter := time.Now().Add(40 * time.Second)
	clk := testutil.NewClock(time.Now())
	gs := server.NewGrantSessions(c, agent, []string{"tag-a"}, notAfter, clk.Now, nil)
	s, err := acquire(ctx, gs)
	if err != nil {
		t.Fatal(err)
	}
	if exp := s.(*gateway.Session).ExpiresAt(); exp.After(notAfter.Add(2 * time.Second)) {
		t.Errorf("session ends %s, after the grant's %s", exp, notAfter)
	}
	clk.Advance(41 * time.Second)
	mints := env.Gateway.Count(api.RouteScoped)
	_, err = acquire(ctx, gs)
	var r *refusal.Refusal
	if !errors.As(err, &r) || r.Code != refusal.GrantExpired {
		t.Fatalf("after the grant: %v", err)
	}
	if env.Gateway.Count(api.RouteScoped) != mints {
		t.Error("a session was minted after the grant ended")
	}
}

// AcquireWidened revokes the task's session before minting the wider one (the task
// holds one), keeps the key for renewals, and refuses past 64 keys with the
// count and without minting.
func TestGrantSessionsWiden(t *testing.T) {
	ctx := context.Background()
	env, c, agent := agentClient(t)
	objects := make([]string, api.MaxObjects-1)
	for i := range objects {
		objects[i] = fmt.Sprintf("tag-%02d", i)
	}
	gs := server.NewGrantSessions(c, agent, objects, time.Now().Add(time.Hour), nil, nil)
	t.Cleanup(func() { gs.EndAll(ctx) })
	first, err := acquire(ctx, gs)
	if err != nil {
		t.Fatal(err)
	}
	// A key already covered: the same session.
	same, err := acquireWidened(ctx, gs, "tag-00")
	if err != nil || same != first {
		t.Fatalf("Widen to a covered key: %v, same session %v", err, same == first)
	}
	wider, err := acquireWidened(ctx, gs, "minted-here")
	if err != nil {
		t.Fatal(err)
	}
	if wider == first || first.(*gateway.Session).Live() {
		t.Fatal("the previous session was not replaced and revoked")
	}
	if !slices.Contains(wider.(*gateway.Session).Objects(), "minted-here") {
		t.Fatalf("the wider session covers %v", wider.(*gateway.Session).Objects())
	}
	mints := env.Gateway.Count(api.RouteScoped)
	_, err = acquireWidened(ctx, gs, "one-too-many")
	var r *server.Refusal
	if !errors.As(err, &r) || r.Code != "GRANT_TOO_WIDE" || !strings.Contains(r.Detail, "65") {
		t.Fatalf("Widen past 64 keys: %v", err)
	}
	if n := env.Gateway.Count(api.RouteScoped) - mints; n != 0 {
		t.Fatalf("a refused widen minted %d sessions", n)
	}
	if cur, err := acquire(ctx, gs); err != nil || cur != wider {
		t.Fatalf("after the refused widen the task's session changed: %v", err)
	}
}

// acquire is the task's session, as a tool call gets it (over stdio there
// is nothing to release).
func acquire(ctx context.Context, gs *server.GrantSessions) (server.GatewaySession, error) {
	s, release, err := gs.Acquire(ctx, server.Caller{})
	if err != nil {
		return nil, err
	}
	release()
	return s, nil
}

// acquireWidened is the task's session covering ttag too.
func acquireWidened(ctx context.Context, gs *server.GrantSessions, ttag string) (server.GatewaySession, error) {
	s, release, err := gs.AcquireWidened(ctx, server.Caller{}, ttag)
	if err != nil {
		return nil, err
	}
	release()
	return s, nil
}
