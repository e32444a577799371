package server

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/server/refusal"
)

// Minter mints scoped Gateway sessions; *gateway.Client is one.
type Minter interface {
	Mint(ctx context.Context, req gateway.MintRequest) (*gateway.Session, error)
}

// refreshMargin is how long before its end a session is replaced, so a call
// never starts on a session about to lapse.
const refreshMargin = 30 * time.Second

// GrantSessions keeps the one scoped session of a stdio task: acting as the
// grant's user, covering exactly the grant's keys, never past the grant's
// notAfter and never longer than the Gateway's five minutes. A fresh one is
// minted on demand while the grant is valid; the old one is revoked. A
// session the Gateway no longer knows is dropped (Drop) and the next call
// mints anew.
type GrantSessions struct {
	minter   Minter
	actingAs string
	objects  []string
	notAfter time.Time
	now      func() time.Time
	log      *slog.Logger

	mu  sync.Mutex
	cur *gateway.Session
}

// NewGrantSessions is the session source for one stdio grant.
func NewGrantSessions(m Minter, actingAs string, objects []string, notAfter time.Time, now func() time.Time, log *slog.Logger) *GrantSessions {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &GrantSessions{minter: m, actingAs: actingAs, objects: objects, notAfter: notAfter, now: now, log: log}
}

// session returns the live session, minting a fresh one when there is none
// or the current one is near its end. The caller must be the empty Caller
// (stdio).
func (g *GrantSessions) session(ctx context.Context, caller Caller) (GatewaySession, error) {
	if caller.ID != "" {
		return nil, refuseCode(refusal.Internal, "a stdio task serves one user only")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	if !now.Before(g.notAfter) {
		g.endLocked(ctx)
		return nil, refusal.GrantEnded(time.Time{}, true)
	}
	if g.cur != nil && g.cur.Live() && g.cur.ExpiresAt().Sub(now) > refreshMargin {
		return g.cur, nil
	}
	ttl := g.notAfter.Sub(now)
	if ttl > api.MaxScopedTTL {
		ttl = api.MaxScopedTTL
	}
	if ttl < time.Second {
		ttl = time.Second
	}
	next, err := g.minter.Mint(ctx, gateway.MintRequest{Objects: g.objects, ActingAs: g.actingAs, TTL: ttl})
	if err != nil {
		return nil, err
	}
	g.endLocked(ctx)
	g.cur = next
	g.log.Info("scoped session minted", "actingAs", next.ActingAs(), "jkt", next.JKT(),
		"objects", len(g.objects), "expiresAt", next.ExpiresAt().UTC().Format(time.RFC3339))
	return next, nil
}

// widen returns the task's session covering ttag too. When the live
// session does not cover it, that session is revoked first and a new one
// minted over the task's keys and ttag; the task keeps ttag for later
// renewals. More than api.MaxObjects keys is refused GRANT_TOO_WIDE.
func (g *GrantSessions) widen(ctx context.Context, caller Caller, ttag string) (GatewaySession, error) {
	if caller.ID != "" {
		return nil, refuseCode(refusal.Internal, "a stdio task serves one user only")
	}
	if err := g.cover(ctx, ttag); err != nil {
		return nil, err
	}
	return g.session(ctx, caller)
}

// cover adds ttag to the task's keys, and revokes the live session when
// it does not cover it. The lock is released in a defer: a panic in the
// revoke, recovered by the tool call, must not leave it held, or every
// later call of the task would wait on it for ever.
func (g *GrantSessions) cover(ctx context.Context, ttag string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !slices.Contains(g.objects, ttag) {
		if n := len(g.objects) + 1; n > api.MaxObjects {
			return scopeFull(n)
		}
		g.objects = append(slices.Clone(g.objects), ttag)
	}
	if g.cur != nil && !slices.Contains(g.cur.Objects(), ttag) {
		// Revoked before the wider one is minted: the task holds one
		// session.
		g.endLocked(ctx)
	}
	return nil
}

func scopeFull(n int) *Refusal {
	return refuseCode(refusal.GrantTooWide,
		"opening this envelope would make the task's session cover %d keys, over the limit of %d; nothing was decrypted; "+
			"ask the operator for a new task (grant) to open more files", n, api.MaxObjects)
}

// Current is the live session, or nil when there is none or one is being
// minted or revoked right now (it never waits on the Gateway).
func (g *GrantSessions) Current(caller Caller) GatewaySession {
	if caller.ID != "" || !g.mu.TryLock() {
		return nil
	}
	defer g.mu.Unlock()
	if g.cur == nil || !g.now().Before(g.cur.ExpiresAt()) {
		return nil
	}
	return g.cur
}

// Acquire is session; over stdio there is one caller and nothing to
// release.
func (g *GrantSessions) Acquire(ctx context.Context, caller Caller) (GatewaySession, func(), error) {
	s, err := g.session(ctx, caller)
	if err != nil {
		return nil, nil, err
	}
	return s, func() {}, nil
}

// AcquireWidened is widen, with nothing to release.
func (g *GrantSessions) AcquireWidened(ctx context.Context, caller Caller, ttag string) (GatewaySession, func(), error) {
	s, err := g.widen(ctx, caller, ttag)
	if err != nil {
		return nil, nil, err
	}
	return s, func() {}, nil
}

// Drop forgets dead if it is still the current session: the Gateway no
// longer knows it, so nothing is sent; its holder key is destroyed. The
// next call mints a new one over the task's keys (widened ones included).
func (g *GrantSessions) Drop(_ context.Context, _ Caller, dead GatewaySession) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cur == nil || GatewaySession(g.cur) != dead {
		return
	}
	g.cur.Discard()
	g.log.Info("scoped session dropped: the Gateway no longer knows it", "jkt", g.cur.JKT())
	g.cur = nil
}

// Len is 1 while a session is held, else 0.
func (g *GrantSessions) Len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cur == nil {
		return 0
	}
	return 1
}

// End revokes the one session (there is one caller over stdio).
func (g *GrantSessions) End(ctx context.Context, _ Caller) { g.EndAll(ctx) }

// EndAll revokes the current session and destroys its key.
func (g *GrantSessions) EndAll(ctx context.Context) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.endLocked(ctx)
}

func (g *GrantSessions) endLocked(ctx context.Context) {
	if g.cur == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := g.cur.Revoke(ctx); err != nil {
		g.log.Warn("scoped session revoke failed", "jkt", g.cur.JKT(), "err", err)
	} else {
		g.log.Info("scoped session revoked", "jkt", g.cur.JKT())
	}
	g.cur = nil
}

// Regrant follows a changed grant: the task's session covers objects from
// now on and lives no later than notAfter. The live session is ended when
// the keys changed (a narrowed grant must not keep a wider session; a
// widened one needs the new keys) or it lives past the new end.
func (g *GrantSessions) Regrant(ctx context.Context, objects []string, notAfter time.Time) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	changed := !sameKeys(g.objects, objects)
	g.objects, g.notAfter = slices.Clone(objects), notAfter
	if g.cur != nil && (changed || g.cur.ExpiresAt().After(notAfter)) {
		g.endLocked(ctx)
	}
	return nil
}

func sameKeys(a, b []string) bool {
	x, y := slices.Clone(a), slices.Clone(b)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(slices.Compact(x), slices.Compact(y))
}
