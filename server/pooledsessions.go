package server

import (
	"context"
	"errors"
	"time"

	"github.com/pdmcp/pdmcp/auth"
	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/server/refusal"
)

// PooledSessions gives each HTTP caller their own Gateway session, minted
// from their exchanged token.
type PooledSessions struct {
	pool *gateway.Pool
	ex   *auth.Exchanger
}

// NewPooledSessions is the session source of an HTTP server: pool's
// sessions, minted from each caller's token exchanged by ex.
func NewPooledSessions(pool *gateway.Pool, ex *auth.Exchanger) *PooledSessions {
	return &PooledSessions{pool: pool, ex: ex}
}

// Acquire is the caller's pooled session, minted (their token exchanged)
// when they hold none.
func (p *PooledSessions) Acquire(ctx context.Context, c Caller) (GatewaySession, func(), error) {
	if c.ID == "" || c.Credential.Caller == nil {
		return nil, nil, refusal.NoVerifiedCaller()
	}
	sess, release, err := p.pool.Acquire(ctx, c.ID, p.subject(c))
	if err != nil {
		return nil, nil, p.refusal(c, err)
	}
	return sess, release, nil
}

// AcquireWidened is Acquire covering ttag too.
func (p *PooledSessions) AcquireWidened(ctx context.Context, c Caller, ttag string) (GatewaySession, func(), error) {
	if c.ID == "" || c.Credential.Caller == nil {
		return nil, nil, refusal.NoVerifiedCaller()
	}
	sess, release, err := p.pool.AcquireWidened(ctx, c.ID, p.subject(c), ttag)
	if err != nil {
		return nil, nil, p.refusal(c, err)
	}
	return sess, release, nil
}

// refusal maps what the pool refused with for a tool call.
func (p *PooledSessions) refusal(c Caller, err error) error {
	var full *gateway.ScopeFullError
	switch {
	case errors.As(err, &full):
		return scopeFull(full.Count)
	case errors.Is(err, gateway.ErrPastNotAfter):
		return refusal.GrantEnded(time.Time{}, true)
	case errors.Is(err, &api.Error{Code: api.CodeSubjectRefused}):
		// The Gateway would not take the exchanged token: do not present
		// it again; the next call exchanges afresh.
		p.ex.Forget(c.ID)
	}
	return err
}

// Drop forgets dead if the pool still holds it for the caller.
func (p *PooledSessions) Drop(ctx context.Context, c Caller, dead GatewaySession) {
	if s, ok := dead.(*gateway.Session); ok {
		p.pool.Drop(ctx, c.ID, s)
	}
}

func (p *PooledSessions) subject(c Caller) gateway.SubjectSource {
	return func(ctx context.Context) (gateway.SubjectToken, error) {
		t, err := p.ex.Exchange(ctx, c.Credential.Caller, c.Credential.AccessToken())
		if err != nil {
			return gateway.SubjectToken{}, err
		}
		return gateway.SubjectToken{Token: t.AccessToken, Expiry: t.Expiry}, nil
	}
}

// ExchangeAhead prepares the first call of a caller who holds no pooled
// session, in the background: their token's exchange (auth.Exchanger.Ahead)
// and, when the pool is full, a place (gateway.Pool.Expect). A host
// connects and lists the tools before its first call, which then finds
// both ready or on their way.
func (p *PooledSessions) ExchangeAhead(c *auth.Caller, accessToken string) {
	id := c.ID()
	if p.pool.Current(id) == nil {
		p.pool.Expect(id)
		p.ex.Ahead(c, accessToken)
	}
}

// ExchangeAhead passes an accepted HTTP request's caller to the session
// source, when it exchanges tokens (PooledSessions.ExchangeAhead).
func (s *Server) ExchangeAhead(c *auth.Caller, accessToken string) {
	if a, ok := s.cfg.Sessions.(interface {
		ExchangeAhead(*auth.Caller, string)
	}); ok {
		a.ExchangeAhead(c, accessToken)
	}
}

// Current is the caller's pooled session, or nil when they hold none.
func (p *PooledSessions) Current(c Caller) GatewaySession {
	if sess := p.pool.Current(c.ID); sess != nil {
		return sess
	}
	return nil
}

// End revokes the caller's session; EndAll everyone's.
func (p *PooledSessions) End(ctx context.Context, c Caller) { p.pool.End(ctx, c.ID) }
func (p *PooledSessions) EndAll(ctx context.Context)        { p.pool.EndAll(ctx) }
