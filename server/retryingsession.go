package server

import (
	"context"
	"sync"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/server/refusal"
)

// retryingSession is the GatewaySession a tool call works with. When the Gateway
// answers one of its requests that it no longer knows the session
// (SESSION_MISSING after a Gateway restart, SESSION_REVOKED by an operator,
// SESSION_EXPIRED), the session is dropped, a new one acquired (minted
// while the grant is valid, the service signing in again if the Gateway
// forgot that too) and the request sent once more: a request refused so did
// nothing at the Gateway. One replacement per call; a second such refusal
// stands. The audit line then says sessionReplaced, and names the new
// session.
type retryingSession struct {
	s     *Server
	c     *call
	widen string // the t-Tag the session was widened to, if any

	mu       sync.Mutex
	cur      GatewaySession
	replaced bool
}

// retryingSession acquires the caller's session (widened to ttag when it is not
// empty) for this call.
func (s *Server) retryingSession(ctx context.Context, c *call, ttag string) (GatewaySession, error) {
	sess, err := s.acquire(ctx, c, ttag)
	if err != nil {
		return nil, err
	}
	l := &retryingSession{s: s, c: c, widen: ttag, cur: sess}
	c.session = l
	return l, nil
}

// acquire gets the caller's session and records its release on the call.
func (s *Server) acquire(ctx context.Context, c *call, ttag string) (GatewaySession, error) {
	var (
		sess    GatewaySession
		release func()
		err     error
	)
	if ttag == "" {
		sess, release, err = s.cfg.Sessions.Acquire(ctx, c.caller)
	} else {
		sess, release, err = s.cfg.Sessions.AcquireWidened(ctx, c.caller, ttag)
	}
	if err != nil {
		return nil, err
	}
	c.releases = append(c.releases, release)
	return sess, nil
}

// releaseSessions ends the call's hold on its sessions.
func (c *call) releaseSessions() {
	for _, r := range c.releases {
		r()
	}
	c.releases = nil
}

func (l *retryingSession) current() GatewaySession {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cur
}

// do runs op on the current session, replacing it once as the type says.
func (l *retryingSession) do(ctx context.Context, op func(GatewaySession) error) error {
	sess := l.current()
	err := op(sess)
	if !gateway.IsSessionGone(err) {
		return err
	}
	l.mu.Lock()
	if l.replaced || l.cur != sess {
		l.mu.Unlock()
		return err
	}
	l.replaced = true
	l.mu.Unlock()
	if g := l.s.grantNow(); g.Expired(l.s.cfg.Now()) {
		return refusal.GrantEnded(g.NotAfter, false)
	}
	l.s.cfg.Sessions.Drop(ctx, l.c.caller, sess)
	l.s.log.Info("gateway session gone; replacing it and sending the request once more",
		"tool", l.c.line.Tool, "handleDigest", sess.HandleDigest(), "code", refusalCode(err))
	next, aerr := l.s.acquire(ctx, l.c, l.widen)
	if aerr != nil {
		return aerr
	}
	l.mu.Lock()
	l.cur = next
	l.mu.Unlock()
	l.c.line.SessionReplaced = true
	return op(next)
}

// refusalCode is the code of the refusal behind err, for logs.
func refusalCode(err error) string {
	r, _ := asRefusal(err)
	return r.Code
}

func (l *retryingSession) Encrypt(ctx context.Context, in gateway.EncryptInput) (out *gateway.EncryptResult, err error) {
	err = l.do(ctx, func(s GatewaySession) (err error) { out, err = s.Encrypt(ctx, in); return err })
	return out, err
}

func (l *retryingSession) DecryptWithLink(ctx context.Context, ttag string, iv, ct []byte) (out *gateway.DecryptResult, err error) {
	err = l.do(ctx, func(s GatewaySession) (err error) { out, err = s.DecryptWithLink(ctx, ttag, iv, ct); return err })
	return out, err
}

func (l *retryingSession) ACLGet(ctx context.Context, ttag string) (out []api.ACLEntry, err error) {
	err = l.do(ctx, func(s GatewaySession) (err error) { out, err = s.ACLGet(ctx, ttag); return err })
	return out, err
}

func (l *retryingSession) ACLGrant(ctx context.Context, g api.ACLGrantRequest) error {
	return l.do(ctx, func(s GatewaySession) error { return s.ACLGrant(ctx, g) })
}

func (l *retryingSession) ACLRevoke(ctx context.Context, r api.ACLRevokeRequest) error {
	return l.do(ctx, func(s GatewaySession) error { return s.ACLRevoke(ctx, r) })
}

func (l *retryingSession) ActingAs() string     { return l.current().ActingAs() }
func (l *retryingSession) JKT() string          { return l.current().JKT() }
func (l *retryingSession) HandleDigest() string { return l.current().HandleDigest() }
func (l *retryingSession) Objects() []string    { return l.current().Objects() }
func (l *retryingSession) SystemID() int64      { return l.current().SystemID() }
func (l *retryingSession) PrincipalID() string  { return l.current().PrincipalID() }
