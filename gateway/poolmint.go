package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/pdmcp/pdmcp/gateway/api"
)

// SubjectToken is a token the provider issued to the Gateway's audience for
// one user, and when it expires. It prints and logs without the token.
type SubjectToken struct {
	Token  string
	Expiry time.Time
}

// String names the token without revealing it.
func (t SubjectToken) String() string {
	return "SubjectToken{redacted, expiry " + t.Expiry.UTC().Format(time.RFC3339) + "}"
}

// GoString is String, so that %#v prints no token either.
func (t SubjectToken) GoString() string { return t.String() }

// Format makes every fmt verb print String: a struct printed with, say,
// %d would otherwise show its fields.
func (t SubjectToken) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(t.String())) }

// LogValue keeps the token out of structured logs.
func (t SubjectToken) LogValue() slog.Value {
	return slog.GroupValue(slog.Time("expiry", t.Expiry))
}

// SubjectSource gives the calling user's subject token, typically by token
// exchange (package auth), which caches. The pool asks it each time it
// mints a session for that user.
type SubjectSource func(ctx context.Context) (SubjectToken, error)

// subjectToken gets the user's subject token.
func (p *Pool) subjectToken(ctx context.Context, e *poolEntry, subject SubjectSource) (SubjectToken, error) {
	tok, err := subject(ctx)
	if err != nil {
		p.log.LogAttrs(ctx, slog.LevelInfo, "gateway session pool: no subject token",
			slog.String("caller", e.digest), slog.String("code", refusalCode(err)))
		return SubjectToken{}, fmt.Errorf("subject token for the Gateway: %w", err)
	}
	if tok.Token == "" {
		return SubjectToken{}, errors.New("subject token for the Gateway: the source gave an empty token")
	}
	return tok, nil
}

// mint mints a session from tok, waiting out one short IDP_UNAVAILABLE.
// It returns the session and the time, on the pool's clock, past which it
// is not used.
func (p *Pool) mint(ctx context.Context, e *poolEntry, tok SubjectToken) (*Session, time.Time, error) {
	p.mu.Lock()
	scope := append(slices.Clone(p.objects), e.extra...)
	p.mu.Unlock()
	s, deadline, err := p.mintOnce(ctx, tok, scope)
	var ae *api.Error
	if err == nil || !errors.As(err, &ae) || !isRefusal(err, api.CodeIdPUnavailable) ||
		ae.RetryAfter <= 0 || ae.RetryAfter > p.maxRetryWait {
		p.logOutcome(ctx, e, err)
		return s, deadline, err
	}
	p.log.LogAttrs(ctx, slog.LevelInfo, "gateway session pool: waiting out IDP_UNAVAILABLE once",
		slog.String("caller", e.digest), slog.Duration("retryAfter", ae.RetryAfter))
	t := time.NewTimer(ae.RetryAfter)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return nil, time.Time{}, fmt.Errorf("%w (gave up waiting for its Retry-After: %w)", err, ctx.Err())
	}
	s, deadline, err = p.mintOnce(ctx, tok, scope)
	p.logOutcome(ctx, e, err)
	return s, deadline, err
}

// mintOnce asks for one session bound to tok, living no longer than tok.
func (p *Pool) mintOnce(ctx context.Context, tok SubjectToken, scope []string) (*Session, time.Time, error) {
	start := p.now()
	ttl := min(api.MaxScopedTTL, tok.Expiry.Sub(start)-subjectTTLMargin).Truncate(time.Second)
	if tok.Expiry.IsZero() || ttl < time.Second {
		return nil, time.Time{}, fmt.Errorf("subject token for the Gateway: %w", ErrSubjectTokenExpired)
	}
	if !p.notAfter.IsZero() {
		left := p.notAfter.Sub(start)
		if left < time.Second {
			return nil, time.Time{}, ErrPastNotAfter
		}
		ttl = min(ttl, left.Truncate(time.Second))
	}
	s, err := p.minter.Mint(ctx, MintRequest{Objects: slices.Clone(scope), SubjectToken: tok.Token, TTL: ttl})
	if err != nil {
		return nil, time.Time{}, err
	}
	return s, start.Add(ttl), nil
}

func (p *Pool) logOutcome(ctx context.Context, e *poolEntry, err error) {
	if err == nil {
		return
	}
	p.log.LogAttrs(ctx, slog.LevelInfo, "gateway session pool: mint failed",
		slog.String("caller", e.digest), slog.String("code", refusalCode(err)))
}
