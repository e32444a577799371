package serve

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/grant"
)

// StartFiles are the files a start reads before it signs in: the
// service's config.json, the manifest and the grant.
type StartFiles struct {
	ConfigPath   string
	ManifestPath string
	GrantPath    string
}

// checked is what CheckStart loaded.
type checked struct {
	service  *gateway.ServiceConfig
	grant    *grant.Grant
	manifest *grant.Manifest
	// manifestPath is the manifest's path resolved (grant.RealPath).
	manifestPath string
}

// CheckStart makes the checks `pdmcp serve` makes before it signs in,
// reading the files and nothing on the network: config.json loads; the
// grant loads and its identity fits the transport (caller identity over
// HTTP, a local user over stdio); a local user lies inside the service's
// prefix (config.json's "prefix"), which every session must act in; the
// grant fits the manifest, every document it names is approved, and it has
// not ended at now. `pdmcp host-config` runs it too, so an operator's
// mistake is refused where the operator is, not found by the model.
func CheckStart(f StartFiles, httpMode bool, now time.Time) error {
	_, err := checkStart(f, httpMode, now)
	return err
}

func checkStart(f StartFiles, httpMode bool, now time.Time) (*checked, error) {
	sc, err := gateway.LoadServiceConfig(f.ConfigPath)
	if err != nil {
		return nil, err
	}
	g, err := grant.Load(f.GrantPath)
	if err != nil {
		return nil, err
	}
	switch {
	case httpMode && !g.CallerIdentity:
		return nil, fmt.Errorf("this grant names the local user %q; over HTTP each caller acts as themselves: "+
			"write the grant with --caller-identity", g.LocalUser)
	case !httpMode && g.LocalUser == "":
		return nil, errors.New("this grant names no local user (it was written with --caller-identity for HTTP); " +
			"over stdio write the grant with --local-user")
	}
	if err := checkPrefix(g.LocalUser, sc.Prefix); err != nil {
		return nil, err
	}
	// The manifest's path is resolved once, here: the server reads, and
	// keeps its journal and locks beside, the file a symbolic link names,
	// as every command does, and follows that file (not a later retarget
	// of the link) until it restarts.
	resolved, err := grant.RealPath(f.ManifestPath)
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", f.ManifestPath, err)
	}
	m, err := grant.LoadManifest(resolved)
	if err != nil {
		return nil, err
	}
	if err := grant.Validate(g, m); err != nil {
		return nil, err
	}
	if err := grant.CheckApproved(g, m); err != nil {
		return nil, err
	}
	if g.Expired(now) {
		return nil, fmt.Errorf("the grant ended at %s; write a new one with `pdmcp grant`", g.NotAfter.UTC().Format(time.RFC3339))
	}
	return &checked{service: sc, grant: g, manifest: m, manifestPath: resolved}, nil
}

// ErrOutsidePrefix: the grant's local user lies outside the service's
// prefix, so the Gateway would refuse every session (ACTING_AS_REFUSED).
var ErrOutsidePrefix = errors.New("the grant's local user lies outside the service's prefix")

// checkPrefix applies the rule every minted session is checked by
// (gateway's checkIdentity): the principal starts with the prefix and is
// longer. An empty local user (caller identity) or prefix (learnt at
// sign-in) is not checked here.
func checkPrefix(user, prefix string) error {
	if user == "" || prefix == "" {
		return nil
	}
	if !strings.HasPrefix(user, prefix) || len(user) == len(prefix) {
		return fmt.Errorf("%w: %q does not start with %q; write the grant with a --local-user inside it", ErrOutsidePrefix, user, prefix)
	}
	return nil
}
