package server_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/reference"
	"github.com/pdmcp/pdmcp/gateway/reference/reftest"
	"github.com/pdmcp/pdmcp/server"
)

// clock is a test clock that only moves when told.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func TestGrantSessionsRenewBeforeFiveMinutes(t *testing.T) {
	ctx := context.Background()
	env := reftest.Start(t, reference.Config{})
	svc := env.Service(t, "svc", true)
	c := env.ServiceClient(t, svc)
	agent := reftest.Principal(t, c, svc.Prefix+"agent")
	clk := &clock{now: time.Now()}
	gs := server.NewGrantSessions(c, agent.Name, []string{"tag-a"}, clk.Now().Add(time.Hour), clk.Now, nil)

	s1, err := gs.Session(ctx, server.Caller{})
	if err != nil {
		t.Fatal(err)
	}
	again, _ := gs.Session(ctx, server.Caller{})
	if again.JKT() != s1.JKT() {
		t.Fatal("a live session was replaced")
	}
	if d := time.Until(s1.(*gateway.Session).ExpiresAt()); d > api.MaxScopedTTL+time.Second {
		t.Fatalf("session lives %s, more than five minutes", d)
	}
	clk.Add(api.MaxScopedTTL - 20*time.Second)
	revokes := env.Gateway.Count(api.RouteRevoke)
	s2, err := gs.Session(ctx, server.Caller{})
	if err != nil {
		t.Fatal(err)
	}
	if s2.JKT() == s1.JKT() {
		t.Fatal("no fresh session near the end of the old one")
	}
	if env.Gateway.Count(api.RouteRevoke) != revokes+1 {
		t.Error("the old session was not revoked")
	}
	_, err = s1.(*gateway.Session).Decrypt(ctx, "tag-a", make([]byte, 16), make([]byte, 32))
	var ae *api.Error
	if !errors.As(err, &ae) {
		t.Fatalf("old session still usable: %v", err)
	}
	gs.EndAll(ctx)
	if env.Gateway.Count(api.RouteRevoke) != revokes+2 {
		t.Error("EndAll did not revoke")
	}
}

func TestGrantSessionsNeverOutliveTheGrant(t *testing.T) {
	ctx := context.Background()
	env := reftest.Start(t, reference.Config{})
	svc := env.Service(t, "svc", true)
	c := env.ServiceClient(t, svc)
	agent := reftest.Principal(t, c, svc.Prefix+"agent")
	notAfter := time.Now().Add(40 * time.Second)
	clk := &clock{now: time.Now()}
	gs := server.NewGrantSessions(c, agent.Name, []string{"tag-a"}, notAfter, clk.Now, nil)
	s, err := gs.Session(ctx, server.Caller{})
	if err != nil {
		t.Fatal(err)
	}
	if exp := s.(*gateway.Session).ExpiresAt(); exp.After(notAfter.Add(2 * time.Second)) {
		t.Errorf("session ends %s, after the grant's %s", exp, notAfter)
	}
	clk.Add(41 * time.Second)
	mints := env.Gateway.Count(api.RouteScoped)
	_, err = gs.Session(ctx, server.Caller{})
	var r *server.Refusal
	if !errors.As(err, &r) || r.Code != server.CodeGrantExpired {
		t.Fatalf("after the grant: %v", err)
	}
	if env.Gateway.Count(api.RouteScoped) != mints {
		t.Error("a session was minted after the grant ended")
	}
}
