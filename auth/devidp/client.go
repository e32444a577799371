package devidp

import (
	"errors"
	"net"
	"net/url"
	"strconv"
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
	// redirectURIs is empty on the registered host client: its rule is
	// checked by checkLoopbackRedirect, and the per-request copy made by
	// withRedirect lists the one URI that passed.
	redirectURIs []string
	lifetime     time.Duration
}

func newHostClient(id, loginURL string, lifetime time.Duration) *client {
	return &client{
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

// Reasons checkLoopbackRedirect refuses a redirect URI.
var (
	errRedirectScheme = errors.New("redirect_uri must use http on localhost or 127.0.0.1")
	errRedirectHost   = errors.New("redirect_uri host must be localhost or 127.0.0.1")
	errRedirectParts  = errors.New("redirect_uri must have no user info or fragment")
	errRedirectPort   = errors.New("redirect_uri port is not a valid port number")
)

// checkLoopbackRedirect is the host client's redirect rule: http, host
// exactly localhost or 127.0.0.1, any port, any path, a query allowed, no
// user info and no fragment. Native hosts listen on a port they pick at run
// time and choose their own callback path (RFC 8252 section 7.3), so this is
// a rule and not a list.
func checkLoopbackRedirect(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return errRedirectScheme
	}
	if u.Scheme != "http" || u.Opaque != "" {
		return errRedirectScheme
	}
	if u.User != nil || u.Fragment != "" || u.RawFragment != "" {
		return errRedirectParts
	}
	host, port := u.Hostname(), u.Port()
	if host != "localhost" && host != "127.0.0.1" {
		return errRedirectHost
	}
	// Hostname strips brackets and a port; require the authority to be
	// exactly host[:port] so nothing else hides in it.
	want := host
	if port != "" {
		want = net.JoinHostPort(host, port)
	}
	if u.Host != want {
		return errRedirectHost
	}
	if port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return errRedirectPort
		}
	}
	return nil
}
