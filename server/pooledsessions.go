package server

import (
	"context"
	"errors"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/auth"
	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/internal/telemetry"
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
		ctx, span := telemetry.Child(ctx, SpanTokenExchange)
		defer span.End()
		t, err := p.ex.Exchange(ctx, c.Credential.Caller, c.Credential.AccessToken())
		if err != nil {
			// The provider's answer may quote the token's claims: the
			// span keeps that it failed, not why.
			telemetry.Fail(span, telemetry.ErrorExchange)
			return gateway.SubjectToken{}, err
		}
		return gateway.SubjectToken{Token: t.AccessToken, Expiry: t.Expiry}, nil
	}
}

// ExchangeAhead prepares the first call of a caller who holds no pooled
// session, in the background: their token's exchange (auth.Exchanger.Ahead)
// and, when the pool is full, a place freed for them and kept for them
// (gateway.Pool.Expect, which ends no user who called within the pool's
// MinIdle). A host connects and lists the tools before its first call,
// which then finds both ready or on their way. It does not block.
func (p *PooledSessions) ExchangeAhead(c *auth.Caller, accessToken string) {
	id := c.ID()
	if p.pool.Current(id) == nil {
		p.pool.Expect(id)
		p.ex.Ahead(c, accessToken)
	}
}

// aheadSource is a session source that prepares a caller's first call
// ahead of need (PooledSessions).
type aheadSource interface {
	ExchangeAhead(c *auth.Caller, accessToken string)
}

// precedesCall says a request of this method comes before a host's first
// tool call: it introduces the host (initialize, or server/discover from
// protocol 2026-07-28 on) or lists the tools.
func precedesCall(method string) bool {
	return method == "initialize" || method == "server/discover" || method == "tools/list"
}

// aheadOfNeed passes the caller of a request that precedes a tool call
// (precedesCall), once it has been served without error, to src's
// ExchangeAhead. Nothing else reaches it: a body that is not a JSON-RPC
// request never gets here (the HTTP handler answers it), and any other
// method, or a request refused, prepares nothing, so a caller's junk can
// neither exchange a token nor end another user's session.
func aheadOfNeed(src aheadSource) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			res, err := next(ctx, method, req)
			if err == nil && precedesCall(method) {
				if cred := callerOf(req).Credential; cred.Caller != nil && cred.AccessToken() != "" {
					src.ExchangeAhead(cred.Caller, cred.AccessToken())
				}
			}
			return res, err
		}
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

// EndSessions ends every caller's session and keeps the pool open (a
// grant that ended may be renewed).
func (p *PooledSessions) EndSessions(ctx context.Context) { p.pool.EndSessions(ctx) }

// Regrant follows a changed grant (see gateway.Pool.Regrant).
func (p *PooledSessions) Regrant(ctx context.Context, objects []string, notAfter time.Time) error {
	return p.pool.Regrant(ctx, objects, notAfter)
}
