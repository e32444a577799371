package check

import (
	"context"
	"errors"
	"fmt"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
)

// GatewayKeys asks the key server, as the keys' owner, whether a key still
// exists: the owner reads the key's access list back (the route pdmcp acl
// and seed --cleanup read), and KEY_NOT_FOUND means gone. Each key gets
// its own short owner session, revoked after, so one gone key does not
// spoil the question about the others.
type GatewayKeys struct {
	Client *gateway.Client
	// Owner is the principal that owns the keys, as the Gateway names it.
	Owner string
}

// KeyExists implements KeyChecker.
func (g GatewayKeys) KeyExists(ctx context.Context, ttag string) (bool, error) {
	notFound := &api.Error{Code: api.CodeKeyNotFound}
	s, err := g.Client.Mint(ctx, gateway.MintRequest{ActingAs: g.Owner, Objects: []string{ttag}, TTL: api.MaxScopedTTL})
	if errors.Is(err, notFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("owner session as %s: %w", g.Owner, err)
	}
	defer func() { _ = s.Revoke(context.WithoutCancel(ctx)) }()
	_, err = s.ACLGet(ctx, ttag)
	if errors.Is(err, notFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read the key's access list: %w", err)
	}
	return true, nil
}
