package devidp

import (
	"context"
	"crypto"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// Defaults for the Config fields left empty. The lifetimes are the realm's
// in deploy/keycloak/realm-pdmcp.json (a test keeps them equal), so that a
// host that works with `pdmcp dev` works at that Keycloak.
const (
	DefaultHostClientID    = "mcp-host"
	DefaultAdapterClientID = "mcp-adapter"
	DefaultGatewayAudience = "gateway-api"
	// DefaultAccessTokenLifetime is the realm's mcp-host
	// access.token.lifespan. It outlives the five-minute expiry margin
	// Gemini CLI applies (it treats a token that expires within five
	// minutes as expired already), by five minutes.
	DefaultAccessTokenLifetime = 10 * time.Minute
	// DefaultExchangedTokenLifetime is the realm's accessTokenLifespan,
	// which the adapter client's exchanged tokens get.
	DefaultExchangedTokenLifetime = 5 * time.Minute
	// DefaultRefreshTokenLifetime is how long an unused refresh token stays
	// redeemable (the realm's ssoSessionIdleTimeout); each use starts a new
	// one.
	DefaultRefreshTokenLifetime = 30 * time.Minute
	// DefaultSignInLifetime is how long one sign-in can be kept alive by
	// refreshing (the realm's ssoSessionMaxLifespan); after it the user
	// signs in again.
	DefaultSignInLifetime = 10 * time.Hour
)

// Paths under the issuer. The op routes are the library's defaults.
const (
	authorizePath = "/authorize"
	tokenPath     = "/oauth/token"
	keysPath      = "/keys"
	loginPath     = "/login"
)

// authRequestLifetime bounds how long a started sign-in, and the code it
// yields, stays redeemable.
const authRequestLifetime = 10 * time.Minute

// ErrConfig is wrapped by every error New returns for a bad Config.
var ErrConfig = errors.New("devidp: invalid config")

// User is one account of the provider. Passwords are compared as given; this
// is a development provider.
type User struct {
	Username string
	Password string
	// Subject is the sub claim of the user's tokens; Username when empty.
	Subject string
	Email   string // optional, in the ID token when scope email is granted
	Name    string // optional, in the ID token when scope profile is granted
}

// Config configures a Provider. Only Issuer is required.
type Config struct {
	// Issuer is the https URL the provider is served at, without a trailing
	// slash, for example https://127.0.0.1:8443. The caller creates the
	// listener first so the port is known; a path is allowed and is then
	// served under that path.
	Issuer string
	// Users who can sign in.
	Users []User
	// HostClientID is the pre-registered public client of MCP hosts
	// (DefaultHostClientID when empty).
	HostClientID string
	// HostRedirectURIs are the host client's registered redirect URIs
	// (DefaultHostRedirectURIs when empty). A sign-in must name one exactly;
	// an entry ending in * matches any URI starting with the rest.
	HostRedirectURIs []string
	// AdapterClientID is the confidential client of the MCP server: the aud
	// of users' access tokens and the client that performs token exchange
	// (DefaultAdapterClientID when empty).
	AdapterClientID string
	// AdapterClientSecret is that client's secret; a random one is made when
	// empty (see Provider.AdapterClientSecret).
	AdapterClientSecret string
	// GatewayAudience is the only audience token exchange issues for
	// (DefaultGatewayAudience when empty).
	GatewayAudience string
	// AccessTokenLifetime of users' access tokens and of ID tokens
	// (DefaultAccessTokenLifetime when zero).
	AccessTokenLifetime time.Duration
	// ExchangedTokenLifetime of Gateway tokens, which never outlive the
	// subject token either (DefaultExchangedTokenLifetime when zero).
	ExchangedTokenLifetime time.Duration
	// RefreshTokenLifetime is how long an unused refresh token of the host
	// client stays redeemable (DefaultRefreshTokenLifetime when zero).
	RefreshTokenLifetime time.Duration
	// SignInLifetime bounds how long refreshing keeps one sign-in alive
	// (DefaultSignInLifetime when zero).
	SignInLifetime time.Duration
	// StateDir, when set, is a folder (created with mode 0700) where the
	// provider keeps its signing key, the sign-ins in progress and the
	// records of the tokens it issued, in one file of mode 0600, so that a
	// provider started again on the same folder (and issuer) keeps every
	// issued token and refresh token valid. Empty: everything lives in
	// memory and dies with the provider. It cannot be combined with
	// SigningKey.
	StateDir string
	// SigningKey is a P-256 ECDSA key (ES256) or an RSA key of at least 2048
	// bits (RS256). A P-256 key is generated when nil. RotateKey makes keys
	// of the same kind.
	SigningKey crypto.Signer
	// Now is the clock for token times and expiry checks (time.Now when nil).
	Now func() time.Time
	// Logger receives the provider's own events (slog.Default when nil). No
	// token, password or key is ever logged. The op library logs request
	// errors to slog.Default itself.
	Logger *slog.Logger
}

// Provider is a development OpenID provider. It is an http.Handler that the
// caller serves over TLS at Config.Issuer.
type Provider struct {
	issuer     string
	issuerPath string // "" or "/a/b"
	host       *client
	adapter    *client
	gatewayAud string
	atLifetime time.Duration
	xLifetime  time.Duration
	// rtLifetime and signInLifetime bound refresh tokens (see Config).
	rtLifetime     time.Duration
	signInLifetime time.Duration
	// codeKey seals authorization codes (the library's CryptoKey).
	codeKey   [32]byte
	now       func() time.Time
	log       *slog.Logger
	users     map[string]User // by username
	loginTmpl *template.Template

	keys  *keyring
	store *storage

	legacy  *op.LegacyServer
	handler http.Handler

	mu     sync.Mutex
	closed bool
}

// New checks cfg and builds a Provider. It starts no goroutine and opens no
// listener.
func New(ctx context.Context, cfg Config) (*Provider, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p, err := newProvider(cfg)
	if err != nil {
		return nil, err
	}
	if err := p.wire(); err != nil {
		return nil, fmt.Errorf("devidp: build op: %w", err)
	}
	p.log.Info("development identity provider ready (development and tests only)",
		"issuer", p.issuer, "host_client", p.host.id, "adapter_client", p.adapter.id,
		"gateway_audience", p.gatewayAud, "users", len(p.users), "signing_kid", p.keys.currentKID())
	return p, nil
}

func newProvider(cfg Config) (*Provider, error) {
	issuerPath, err := checkIssuer(cfg.Issuer)
	if err != nil {
		return nil, err
	}
	p := &Provider{
		issuer:         cfg.Issuer,
		issuerPath:     issuerPath,
		gatewayAud:     orDefault(cfg.GatewayAudience, DefaultGatewayAudience),
		atLifetime:     cfg.AccessTokenLifetime,
		xLifetime:      cfg.ExchangedTokenLifetime,
		rtLifetime:     orDefaultDuration(cfg.RefreshTokenLifetime, DefaultRefreshTokenLifetime),
		signInLifetime: orDefaultDuration(cfg.SignInLifetime, DefaultSignInLifetime),
		now:            cfg.Now,
		log:            cfg.Logger,
		users:          make(map[string]User, len(cfg.Users)),
	}
	if p.atLifetime == 0 {
		p.atLifetime = DefaultAccessTokenLifetime
	}
	if p.xLifetime == 0 {
		p.xLifetime = DefaultExchangedTokenLifetime
	}
	if p.atLifetime < 0 || p.xLifetime < 0 || p.rtLifetime < 0 || p.signInLifetime < 0 {
		return nil, fmt.Errorf("%w: token lifetimes must be positive", ErrConfig)
	}
	if p.now == nil {
		p.now = time.Now
	}
	if p.log == nil {
		p.log = slog.Default()
	}
	hostID := orDefault(cfg.HostClientID, DefaultHostClientID)
	adapterID := orDefault(cfg.AdapterClientID, DefaultAdapterClientID)
	if hostID == adapterID {
		return nil, fmt.Errorf("%w: host and adapter client ids are both %q", ErrConfig, hostID)
	}
	if p.gatewayAud == adapterID || p.gatewayAud == hostID {
		return nil, fmt.Errorf("%w: gateway audience %q must differ from the client ids", ErrConfig, p.gatewayAud)
	}
	secret := cfg.AdapterClientSecret
	if secret == "" {
		if secret, err = randomString(32); err != nil {
			return nil, err
		}
	}
	redirects := cfg.HostRedirectURIs
	if len(redirects) == 0 {
		redirects = DefaultHostRedirectURIs()
	}
	if err := checkRedirectList(redirects); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	p.host = newHostClient(hostID, p.issuer+loginPath, redirects, p.atLifetime)
	p.adapter = newAdapterClient(adapterID, secret, p.atLifetime)

	subjects := map[string]bool{}
	for i, u := range cfg.Users {
		if u.Username == "" || u.Password == "" {
			return nil, fmt.Errorf("%w: user %d needs a username and a password", ErrConfig, i)
		}
		if _, dup := p.users[u.Username]; dup {
			return nil, fmt.Errorf("%w: user %q is listed twice", ErrConfig, u.Username)
		}
		if u.Subject == "" {
			u.Subject = u.Username
		}
		if subjects[u.Subject] {
			return nil, fmt.Errorf("%w: subject %q is given to two users", ErrConfig, u.Subject)
		}
		subjects[u.Subject] = true
		p.users[u.Username] = u
	}
	if p.loginTmpl, err = parseLoginTemplate(); err != nil {
		return nil, fmt.Errorf("devidp: sign-in page: %w", err)
	}

	if cfg.StateDir != "" {
		if cfg.SigningKey != nil {
			return nil, fmt.Errorf("%w: SigningKey and StateDir cannot both be set (the state folder keeps its own key)", ErrConfig)
		}
		if err := p.openState(cfg.StateDir); err != nil {
			return nil, err
		}
		return p, nil
	}
	signer := cfg.SigningKey
	if signer == nil {
		if signer, err = generateLike(nil); err != nil {
			return nil, err
		}
	}
	if p.keys, err = newKeyring(signer); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if _, err := rand.Read(p.codeKey[:]); err != nil {
		return nil, err
	}
	p.store = newStorage(p, "")
	return p, nil
}

// openState loads the provider's keys and records from dir, or, the first
// time, makes a key and writes them there.
func (p *Provider) openState(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("devidp: state folder: %w", err)
	}
	st, err := loadState(dir)
	if err != nil {
		return err
	}
	p.store = newStorage(p, dir)
	if st == nil {
		signer, err := generateLike(nil)
		if err != nil {
			return err
		}
		if p.keys, err = newKeyring(signer); err != nil {
			return err
		}
		if _, err := rand.Read(p.codeKey[:]); err != nil {
			return err
		}
		return p.store.save()
	}
	keys, err := unmarshalKeys(st.Keys)
	if err != nil {
		return err
	}
	p.keys = &keyring{current: keys[0], published: keys}
	copy(p.codeKey[:], st.CodeKey)
	p.store.load(st)
	return nil
}

// wire builds the op provider, the Server around it and the routes.
func (p *Provider) wire() error {
	provider, err := op.NewProvider(&op.Config{
		CryptoKey:             p.codeKey,
		CodeMethodS256:        true,
		AuthMethodPost:        true,
		GrantTypeRefreshToken: true,
		SupportedScopes:       hostScopes(),
	}, p.store, op.StaticIssuer(p.issuer))
	if err != nil {
		return err
	}
	// Only the routes this provider offers are registered: nil endpoints are
	// left out by the library.
	p.legacy = op.NewLegacyServer(provider, op.Endpoints{
		Authorization: op.NewEndpoint(strings.TrimPrefix(authorizePath, "/")),
		Token:         op.NewEndpoint(strings.TrimPrefix(tokenPath, "/")),
		JwksURI:       op.NewEndpoint(strings.TrimPrefix(keysPath, "/")),
	})
	opHandler := op.RegisterLegacyServer(&server{LegacyServer: p.legacy, p: p}, op.AuthorizeCallbackHandler(provider))

	mux := http.NewServeMux()
	mux.HandleFunc("GET "+loginPath, p.loginPage)
	mux.HandleFunc("POST "+loginPath, p.loginSubmit)
	mux.Handle("/", opHandler)

	var inner http.Handler = mux
	if p.issuerPath != "" {
		inner = http.StripPrefix(p.issuerPath, mux)
	}
	// The metadata handler sits in front because the RFC 8414 form puts the
	// issuer path after the well-known segment, at the root of the host.
	p.handler = withIssParameter(p.issuer, op.RegisterMetadataServer(&metadataServer{p: p}).Intercept(inner))
	return nil
}

// ServeHTTP serves the provider's endpoints.
func (p *Provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		http.Error(w, "development identity provider closed", http.StatusServiceUnavailable)
		return
	}
	p.handler.ServeHTTP(w, r)
}

// Close forgets every pending sign-in and issued token held in memory and
// makes the handler answer 503; a state file in Config.StateDir is left as
// it is, for the next provider on that folder. It does not close the
// caller's listener. It is safe to call more than once.
func (p *Provider) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.store.reset()
	return nil
}

// Issuer is the issuer URL, as configured.
func (p *Provider) Issuer() string { return p.issuer }

// TokenEndpoint is the URL of the token endpoint.
func (p *Provider) TokenEndpoint() string { return p.issuer + tokenPath }

// JWKSURL is the URL of the public key set.
func (p *Provider) JWKSURL() string { return p.issuer + keysPath }

// HostClientID is the public client id of MCP hosts.
func (p *Provider) HostClientID() string { return p.host.id }

// AdapterClientID is the confidential client id of the MCP server, which is
// also the aud of users' access tokens.
func (p *Provider) AdapterClientID() string { return p.adapter.id }

// AdapterClientSecret is the adapter client's secret, the configured one or
// the one generated by New. It is for handing to the MCP server under test.
func (p *Provider) AdapterClientSecret() string { return p.adapter.secret }

// GatewayAudience is the audience token exchange issues for.
func (p *Provider) GatewayAudience() string { return p.gatewayAud }

// checkIssuer accepts an absolute https URL without query, fragment, user
// info or trailing slash, and returns its path.
func checkIssuer(issuer string) (string, error) {
	u, err := url.Parse(issuer)
	switch {
	case issuer == "":
		return "", fmt.Errorf("%w: Issuer is required", ErrConfig)
	case err != nil:
		return "", fmt.Errorf("%w: Issuer: %w", ErrConfig, err)
	case u.Scheme != "https" || u.Host == "":
		return "", fmt.Errorf("%w: Issuer %q must be an absolute https URL", ErrConfig, issuer)
	case u.User != nil || u.RawQuery != "" || u.Fragment != "" || strings.HasSuffix(issuer, "?") || strings.HasSuffix(issuer, "#"):
		return "", fmt.Errorf("%w: Issuer %q must have no user info, query or fragment", ErrConfig, issuer)
	case strings.HasSuffix(u.Path, "/"):
		return "", fmt.Errorf("%w: Issuer %q must not end with a slash", ErrConfig, issuer)
	case u.RawPath != "":
		return "", fmt.Errorf("%w: Issuer %q must not have escaped characters in its path", ErrConfig, issuer)
	}
	if err := op.ValidateIssuer(issuer, false); err != nil {
		return "", fmt.Errorf("%w: Issuer: %w", ErrConfig, err)
	}
	return u.Path, nil
}

func orDefaultDuration(v, def time.Duration) time.Duration {
	if v == 0 {
		return def
	}
	return v
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// randomString returns n random bytes, base64url-encoded.
func randomString(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("devidp: random: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// hostScopes are the scopes the host client can be granted, and the ones
// discovery lists. offline_access is deliberately absent: a token from an
// offline session cannot be exchanged at some providers (Keycloak), and an
// MCP client asks for every scope the metadata lists.
func hostScopes() []string {
	return []string{oidc.ScopeOpenID, oidc.ScopeProfile, oidc.ScopeEmail}
}
