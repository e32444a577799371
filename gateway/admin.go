package gateway

import (
	"context"
	"fmt"
	"io"

	"github.com/pdmcp/pdmcp/gateway/api"
)

// Admin runs the administration routes with the Gateway admin's HTTP Basic
// credentials (bootstrap and seed). It needs no service credentials.
type Admin struct {
	c              *Client
	user, password string
	principalRoutes
}

// Admin returns the admin routes under these credentials.
func (c *Client) Admin(user, password string) *Admin {
	a := &Admin{c: c, user: user, password: password}
	a.principalRoutes = a.call
	return a
}

// String names the admin without its password.
func (a *Admin) String() string { return "gateway admin " + a.user + " at " + a.c.base }

// GoString is String, so that %#v prints no password either.
func (a *Admin) GoString() string { return a.String() }

// Format prints String for every verb: %d of the struct would otherwise
// show the password.
func (a *Admin) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, a.String()) }

func (a *Admin) call(ctx context.Context, route string, body, out any) error {
	return a.c.do(ctx, &request{route: route, body: body, out: out, basic: true, user: a.user, password: a.password})
}

// RegisterService registers a service (see ServiceRegistration).
func (a *Admin) RegisterService(ctx context.Context, r api.RegisterServiceRequest) (*api.RegisterServiceResponse, error) {
	var out api.RegisterServiceResponse
	if err := a.call(ctx, api.RouteAdminRegisterService, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// BindProvider binds an OpenID provider to a service.
func (a *Admin) BindProvider(ctx context.Context, b api.BindProviderRequest) error {
	var out api.OKResponse
	return a.call(ctx, api.RouteAdminBindProvider, b, &out)
}

// RevokeSessions revokes every live scoped session acting as principal, or
// every one when principal is empty, and says how many it revoked.
func (a *Admin) RevokeSessions(ctx context.Context, principal string) (int, error) {
	var out api.RevokeSessionsResponse
	if err := a.call(ctx, api.RouteAdminRevokeSessions, api.RevokeSessionsRequest{Principal: principal}, &out); err != nil {
		return 0, err
	}
	return out.Revoked, nil
}
