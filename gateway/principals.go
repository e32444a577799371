package gateway

import (
	"context"

	"github.com/pdmcp/pdmcp/gateway/api"
)

// principalRoutes are the principal and identity-mapping routes, sent by
// call: on the admin's Basic credentials (Admin), or on the service session
// (Client), where the Gateway limits them to names inside the service's
// prefix and a mapping's ServiceID defaults to the signed-in service. The
// routes and their answers are the same either way.
type principalRoutes func(ctx context.Context, route string, body, out any) error

// CreatePrincipal creates a principal.
func (call principalRoutes) CreatePrincipal(ctx context.Context, p api.PrincipalRequest) (*api.Principal, error) {
	var out api.Principal
	if err := call(ctx, api.RouteAdminCreatePrincipal, p, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeletePrincipal deletes a principal by name.
func (call principalRoutes) DeletePrincipal(ctx context.Context, name string) error {
	var out api.OKResponse
	return call(ctx, api.RouteAdminDeletePrincipal, api.PrincipalRequest{Name: name}, &out)
}

// GetPrincipal reads a principal by name.
func (call principalRoutes) GetPrincipal(ctx context.Context, name string) (*api.Principal, error) {
	var out api.Principal
	if err := call(ctx, api.RouteAdminGetPrincipal, api.PrincipalRequest{Name: name}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// MapIdentity maps a provider's (issuer, subject) to a principal.
func (call principalRoutes) MapIdentity(ctx context.Context, m api.MapIdentityRequest) error {
	var out api.OKResponse
	return call(ctx, api.RouteAdminMapIdentity, m, &out)
}

// UnmapIdentity removes such a mapping.
func (call principalRoutes) UnmapIdentity(ctx context.Context, m api.MapIdentityRequest) error {
	var out api.OKResponse
	return call(ctx, api.RouteAdminUnmapIdentity, m, &out)
}
