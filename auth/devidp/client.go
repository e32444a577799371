package devidp

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// client is one of the provider's two registered clients; it implements
// op.Client.
type client struct {
	id            string
	secret        string // empty for the public host client
	appType       op.ApplicationType
	authMethod    oidc.AuthMethod
	grantTypes    []oidc.GrantType
	responseTypes []oidc.ResponseType
	loginURL      string
	// redirectURIs are the registered ones, checked by matchRedirect (the
	// library's own check cannot do wildcards); the per-request copy made by
	// withRedirect lists the one URI that passed, for the library.
	redirectURIs []string
	lifetime     time.Duration
}

func newHostClient(id, loginURL string, redirects []string, lifetime time.Duration) *client {
	return &client{
		redirectURIs:  slices.Clone(redirects),
		id:            id,
		appType:       op.ApplicationTypeNative,
		authMethod:    oidc.AuthMethodNone,
		grantTypes:    []oidc.GrantType{oidc.GrantTypeCode, oidc.GrantTypeRefreshToken},
		responseTypes: []oidc.ResponseType{oidc.ResponseTypeCode},
		loginURL:      loginURL,
		lifetime:      lifetime,
	}
}

func newAdapterClient(id, secret string, lifetime time.Duration) *client {
	return &client{
		id:         id,
		secret:     secret,
		appType:    op.ApplicationTypeWeb,
		authMethod: oidc.AuthMethodBasic, // client_secret_post is accepted too
		grantTypes: []oidc.GrantType{oidc.GrantTypeTokenExchange},
		lifetime:   lifetime,
	}
}

// withRedirect returns a copy of c whose only registered redirect URI is uri.
func (c *client) withRedirect(uri string) *client {
	cp := *c
	cp.redirectURIs = []string{uri}
	return &cp
}

func (c *client) GetID() string                        { return c.id }
func (c *client) RedirectURIs() []string               { return c.redirectURIs }
func (c *client) PostLogoutRedirectURIs() []string     { return nil }
func (c *client) ApplicationType() op.ApplicationType  { return c.appType }
func (c *client) AuthMethod() oidc.AuthMethod          { return c.authMethod }
func (c *client) ResponseTypes() []oidc.ResponseType   { return c.responseTypes }
func (c *client) GrantTypes() []oidc.GrantType         { return c.grantTypes }
func (c *client) AccessTokenType() op.AccessTokenType  { return op.AccessTokenTypeJWT }
func (c *client) IDTokenLifetime() time.Duration       { return c.lifetime }
func (c *client) DevMode() bool                        { return false }
func (c *client) IsScopeAllowed(string) bool           { return false }
func (c *client) IDTokenUserinfoClaimsAssertion() bool { return true }
func (c *client) ClockSkew() time.Duration             { return 0 }

func (c *client) LoginURL(id string) string {
	return c.loginURL + "?id=" + url.QueryEscape(id)
}

func (c *client) RestrictAdditionalIdTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}

func (c *client) RestrictAdditionalAccessTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}

// DefaultHostRedirectURIs are the redirect URIs the host client is
// registered with, the same list as mcp-host's redirectUris in
// deploy/keycloak/realm-pdmcp.json (a test keeps the two equal): each host
// docs/hosts.md names listens on the fixed port 18124, at its own path.
// Entries ending in * match any URI that starts with the rest, as Keycloak's
// wildcards do.
func DefaultHostRedirectURIs() []string {
	return []string{
		"http://localhost:18124/callback",           // Claude Code
		"http://127.0.0.1:18124/callback",           // Codex, the TypeScript SDK, pdmcp dev token
		"http://localhost:18124/callback/*",         // Codex's per-server segment
		"http://127.0.0.1:18124/callback/*",         //
		"http://localhost:18124/oauth/callback",     // Gemini CLI, mcp-remote
		"http://127.0.0.1:18124/oauth/callback",     //
		"http://localhost:18124/mcp/oauth/callback", // opencode
		"http://127.0.0.1:18124/mcp/oauth/callback", //
	}
}

// Reasons a redirect URI is refused.
var (
	errRedirectParts        = errors.New("redirect_uri must be an absolute URL without user info or fragment")
	errRedirectUnregistered = errors.New("redirect_uri is not one of the host client's registered redirect URIs (they are compared exactly)")
)

// checkRedirectList accepts a list of registered redirect URIs: absolute
// http or https URLs without user info or fragment, * only at the end.
func checkRedirectList(list []string) error {
	if len(list) == 0 {
		return errors.New("the host client needs at least one redirect URI")
	}
	for _, r := range list {
		base, wild := strings.CutSuffix(r, "*")
		u, err := url.Parse(base)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
			strings.Contains(r, "#") || strings.Contains(base, "*") || (wild && strings.Contains(base, "?")) {
			return fmt.Errorf("redirect URI %q: want an absolute http(s) URL without user info or fragment, * only at the end of the path", r)
		}
	}
	return nil
}

// matchRedirect is the host client's redirect rule, Keycloak's for the
// forms a realm file registers: raw must equal a registered URI exactly
// (scheme, host, port, path and query), or, for an entry ending in *, start
// with the rest after its query is cut off (the entry without its trailing
// "/*" matches too). Stricter than Keycloak in two ways, so that what this
// provider accepts Keycloak accepts: a fragment or user info is refused
// outright, and what a wildcard matches may hold no "." or ".." segment and
// no percent-escape.
func matchRedirect(registered []string, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" || u.Host == "" || u.Opaque != "" {
		return errRedirectParts
	}
	if u.User != nil || strings.Contains(raw, "#") {
		return errRedirectParts
	}
	noQuery, _, _ := strings.Cut(raw, "?")
	for _, r := range registered {
		prefix, wild := strings.CutSuffix(r, "*")
		switch {
		case !wild:
			if raw == r {
				return nil
			}
		case noQuery == strings.TrimSuffix(prefix, "/"):
			return nil
		case strings.HasPrefix(noQuery, prefix) && plainPath(strings.TrimPrefix(noQuery, prefix)):
			return nil
		}
	}
	return errRedirectUnregistered
}

// plainPath reports whether the part of a path a wildcard matched is plain
// segments: no escapes, no "." or "..".
func plainPath(rest string) bool {
	if strings.Contains(rest, "%") || strings.Contains(rest, "\\") {
		return false
	}
	for _, seg := range strings.Split(rest, "/") {
		if seg == "." || seg == ".." {
			return false
		}
	}
	return true
}
