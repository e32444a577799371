package gateway

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/proof"
)

// SignIn signs the service in now, replacing any service session the client
// holds. Calls that need the session sign in by themselves; SignIn is for
// checking the credentials up front.
func (c *Client) SignIn(ctx context.Context) error {
	if err := c.lockSignIn(ctx); err != nil {
		return err
	}
	defer c.unlockSignIn()
	_, err := c.signIn(ctx, false)
	return err
}

// SignOut revokes the service session, if there is one. A session the
// Gateway has already dropped counts as revoked.
func (c *Client) SignOut(ctx context.Context) error {
	if err := c.lockSignIn(ctx); err != nil {
		return err
	}
	defer c.unlockSignIn()
	c.mu.Lock()
	sv := c.svc
	c.svc = nil
	c.mu.Unlock()
	if sv == nil {
		return nil
	}
	var out api.RevokeResponse
	err := c.do(ctx, &request{route: api.RouteRevoke, body: struct{}{}, out: &out, handle: sv.handle, prove: c.sender.Make})
	if isRefusal(err, api.CodeServiceSessionExpired) {
		return nil
	}
	return err
}

func (c *Client) lockSignIn(ctx context.Context) error {
	select {
	case c.signLock <- struct{}{}:
		return nil
	case <-ctx.Done():
		return unreachable(ctx.Err(), c.base+api.RouteServiceLogin)
	}
}

func (c *Client) unlockSignIn() { <-c.signLock }

// current is the service session held now, or nil.
func (c *Client) current() *serviceSession {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.svc
}

// service returns a live service session, signing in when there is none or
// it has run out; relogin says the latter happened.
func (c *Client) service(ctx context.Context) (sv *serviceSession, relogin bool, err error) {
	if sv := c.current(); sv.live(c.GatewayNow()) {
		return sv, false, nil
	}
	if err := c.lockSignIn(ctx); err != nil {
		return nil, false, err
	}
	defer c.unlockSignIn()
	// Another caller may have signed in while this one waited.
	if sv := c.current(); sv.live(c.GatewayNow()) {
		return sv, false, nil
	}
	relogin = c.current() != nil
	sv, err = c.signIn(ctx, relogin)
	return sv, relogin, err
}

// renew replaces a service session the Gateway said has expired, unless
// another caller already has.
func (c *Client) renew(ctx context.Context, stale *serviceSession) (*serviceSession, error) {
	if err := c.lockSignIn(ctx); err != nil {
		return nil, err
	}
	defer c.unlockSignIn()
	if sv := c.current(); sv != stale && sv.live(c.GatewayNow()) {
		return sv, nil
	}
	return c.signIn(ctx, true)
}

// signIn posts the login assertion; the caller holds signLock.
func (c *Client) signIn(ctx context.Context, relogin bool) (*serviceSession, error) {
	if c.sender == nil {
		return nil, ErrNoServiceCredentials
	}
	var out api.ServiceLoginResponse
	err := c.do(ctx, &request{
		route: api.RouteServiceLogin,
		build: func(url string, now time.Time) (any, error) {
			a, err := proof.MakeAssertion(c.loginKey, c.cert, url, now)
			return api.ServiceLoginRequest{Assertion: a}, err
		},
		out:     &out,
		prove:   c.sender.Make,
		relogin: relogin,
	})
	if err != nil {
		return nil, err
	}
	if out.Handle == "" || out.ExpiresAt.IsZero() {
		return nil, badResponse(200, errors.New("service sign-in answered no handle or expiry"))
	}
	if c.prefix != "" && out.Prefix != c.prefix {
		// Every scoped session will then fail the prefix check; say why
		// once, here, where the operator can see the two apart.
		c.log.LogAttrs(ctx, slog.LevelError, "gateway service sign-in answered another prefix than config.json names; "+
			"every scoped session will be refused SESSION_IDENTITY_MISMATCH",
			slog.String("configured", c.prefix), slog.String("answered", out.Prefix))
	}
	sv := &serviceSession{handle: out.Handle, expiresAt: out.ExpiresAt, prefix: out.Prefix,
		systemID: out.SystemID, serviceID: out.ServiceID}
	c.mu.Lock()
	c.svc = sv
	c.mu.Unlock()
	c.log.LogAttrs(ctx, slog.LevelInfo, "gateway service signed in",
		slog.String("serviceId", sv.serviceID), slog.Int64("systemId", sv.systemID),
		slog.Time("expiresAt", sv.expiresAt), slog.Bool("serviceRelogin", relogin))
	return sv, nil
}

// serviceCall sends one request on the service session. When the Gateway
// answers SERVICE_SESSION_EXPIRED the service signs in again, once, and the
// request is sent once more with a fresh proof; a second refusal stands.
func (c *Client) serviceCall(ctx context.Context, route string, body, out any) error {
	sv, relogin, err := c.service(ctx)
	if err != nil {
		return err
	}
	r := &request{route: route, body: body, out: out, handle: sv.handle, prove: c.sender.Make, relogin: relogin}
	err = c.do(ctx, r)
	if !isRefusal(err, api.CodeServiceSessionExpired) {
		return err
	}
	if sv, err = c.renew(ctx, sv); err != nil {
		return err
	}
	r.handle, r.relogin = sv.handle, true
	return c.do(ctx, r)
}
