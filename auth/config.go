package auth

import (
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/pdmcp/pdmcp/internal/fileerr"
	"github.com/pdmcp/pdmcp/internal/safefile"
	"github.com/pdmcp/pdmcp/internal/strictjson"
	"github.com/pdmcp/pdmcp/internal/telemetry"
	"github.com/pdmcp/pdmcp/internal/tlspolicy"
)

// ListenHost is the only address the HTTP transport serves on.
const ListenHost = "127.0.0.1"

// HTTPConfig is the operator's mcp-http.json: what the Streamable HTTP
// transport listens on, its TLS material, the OpenID provider whose tokens
// it accepts, and how it exchanges them for the Gateway.
type HTTPConfig struct {
	Listen         ListenConfig   `json:"listen"`
	TLS            TLSConfig      `json:"tls"`
	Provider       ProviderConfig `json:"provider"`
	Exchange       ExchangeConfig `json:"exchange"`
	RequiredScopes []string       `json:"requiredScopes"`
	MaxCallers     int            `json:"maxCallers"`
	// AllowedClients, when set, are the host clients (the token's client_id
	// or azp) whose tokens are accepted; absent or empty accepts any.
	AllowedClients []string `json:"allowedClients,omitempty"`
	// MaxSessionsPerUser and MaxSessions bound the live MCP sessions of
	// one user and of everyone (0 or absent: the server's defaults).
	MaxSessionsPerUser int `json:"maxSessionsPerUser,omitempty"`
	MaxSessions        int `json:"maxSessions,omitempty"`
	// Per-user limits, applied after the token check (internal/serve's
	// userlimit.go): requests in flight, request body bytes held, the time
	// to send a body, and 2026-07-28 subscriptions/listen streams, for one
	// user and in all. 0 or absent: the server's defaults.
	MaxRequestsPerUser      int   `json:"maxRequestsPerUser,omitempty"`
	MaxRequests             int   `json:"maxRequests,omitempty"`
	MaxBodyBytesPerUser     int64 `json:"maxBodyBytesPerUser,omitempty"`
	MaxBodyBytes            int64 `json:"maxBodyBytes,omitempty"`
	BodyTimeoutSeconds      int   `json:"bodyTimeoutSeconds,omitempty"`
	MaxListenStreamsPerUser int   `json:"maxListenStreamsPerUser,omitempty"`
	MaxListenStreams        int   `json:"maxListenStreams,omitempty"`
	// Audience must be in every token's aud; exchange.clientId when absent.
	Audience string `json:"audience,omitempty"`
	// Resource is the URL hosts call, https://127.0.0.1:<port>/mcp when
	// absent. It is the protected-resource metadata's resource.
	Resource string `json:"resource,omitempty"`

	// Connections bounds open connections and the time a request may take
	// to arrive and to be answered (absent: the defaults, see
	// ConnectionsConfig).
	Connections ConnectionsConfig `json:"connections,omitzero"`
	// Tracing sets what the OTEL_* environment variables set (the
	// environment wins field by field); absent, tracing follows the
	// environment alone and is off unless it names an exporter.
	Tracing *telemetry.Settings `json:"tracing,omitempty"`
}

// ConnectionsConfig is mcp-http.json's "connections": every member is
// optional, 0 or absent meaning the default named beside it. Anyone on
// the machine can open connections to 127.0.0.1, token or not, so these
// bound what a connection can hold before and after the token check.
type ConnectionsConfig struct {
	// Max is the open connections the server keeps, whoever holds them
	// (DefaultMaxConnections). Keep it well under the process's
	// descriptor limit (LimitNOFILE in the systemd unit).
	Max int `json:"max,omitempty"`
	// SignedIn is the part of Max kept for connections that have carried
	// a request with a valid token (DefaultSignedInConnections). The rest
	// is for connections that have not (yet): when those are all open, the
	// oldest of them is closed to admit a new one, so stalled anonymous
	// connections never keep a signed-in user out.
	SignedIn int `json:"signedIn,omitempty"`
	// SignedInPerUser is how many of SignedIn one user may hold
	// (DefaultSignedInPerUser); a user's further connections are served
	// as not signed in.
	SignedInPerUser int `json:"signedInPerUser,omitempty"`
	// HeaderTimeoutSeconds bounds the TLS handshake and a request's
	// headers (DefaultHeaderTimeout).
	HeaderTimeoutSeconds int `json:"headerTimeoutSeconds,omitempty"`
	// AnswerTimeoutSeconds bounds writing a single answer, from its first
	// byte, so a client that does not read it is cut off
	// (DefaultAnswerTimeout); an event stream's writes are bounded one by
	// one instead.
	AnswerTimeoutSeconds int `json:"answerTimeoutSeconds,omitempty"`
}

// The connection defaults (docs/operating.md, "Limits"). 512 connections
// sit well under the systemd unit's LimitNOFILE of 4096 with the journal,
// the audit file, SQLite and the outgoing calls to the provider and the
// Gateway beside them.
const (
	DefaultMaxConnections      = 512
	DefaultSignedInConnections = 128
	DefaultSignedInPerUser     = 16
	DefaultHeaderTimeout       = 5 * time.Second
	// An answer is at most a few hundred KiB, written on loopback.
	DefaultAnswerTimeout = time.Minute
)

// Bounded timeouts a config may set: longer would defeat the point.
const maxTimeoutSeconds = 3600

// resolve checks the members and fills in the defaults.
func (c *ConnectionsConfig) resolve() error {
	for _, f := range []struct {
		name string
		v    int
	}{
		{"max", c.Max}, {"signedIn", c.SignedIn}, {"signedInPerUser", c.SignedInPerUser},
		{"headerTimeoutSeconds", c.HeaderTimeoutSeconds}, {"answerTimeoutSeconds", c.AnswerTimeoutSeconds},
	} {
		if f.v < 0 {
			return fmt.Errorf("connections.%s is %d; it must be 0 (the default) or more", f.name, f.v)
		}
	}
	for _, f := range []struct {
		name string
		v    int
	}{
		{"headerTimeoutSeconds", c.HeaderTimeoutSeconds}, {"answerTimeoutSeconds", c.AnswerTimeoutSeconds},
	} {
		if f.v > maxTimeoutSeconds {
			return fmt.Errorf("connections.%s is %d; at most %d", f.name, f.v, maxTimeoutSeconds)
		}
	}
	setDefault := func(p *int, d int) {
		if *p == 0 {
			*p = d
		}
	}
	setDefault(&c.Max, DefaultMaxConnections)
	setDefault(&c.SignedIn, min(DefaultSignedInConnections, c.Max/2))
	setDefault(&c.SignedInPerUser, min(DefaultSignedInPerUser, c.SignedIn))
	setDefault(&c.HeaderTimeoutSeconds, int(DefaultHeaderTimeout/time.Second))
	setDefault(&c.AnswerTimeoutSeconds, int(DefaultAnswerTimeout/time.Second))
	// At least one connection must be left for those not yet signed in:
	// every connection starts that way.
	if c.SignedIn >= c.Max {
		return fmt.Errorf("connections.signedIn (%d) must be less than connections.max (%d): every connection starts unauthenticated",
			c.SignedIn, c.Max)
	}
	if c.SignedInPerUser > c.SignedIn {
		return fmt.Errorf("connections.signedInPerUser (%d) is more than connections.signedIn (%d)", c.SignedInPerUser, c.SignedIn)
	}
	return nil
}

// HeaderTimeout and AnswerTimeout are the resolved timeouts. (A body's
// timeout is the per-user limits' bodyTimeoutSeconds.)
func (c ConnectionsConfig) HeaderTimeout() time.Duration {
	return time.Duration(c.HeaderTimeoutSeconds) * time.Second
}

// AnswerTimeout: see HeaderTimeout.
func (c ConnectionsConfig) AnswerTimeout() time.Duration {
	return time.Duration(c.AnswerTimeoutSeconds) * time.Second
}

// ListenConfig is where the transport listens.
type ListenConfig struct {
	Host string `json:"host"`
	Port int    `json:"port"`
}

// TLSConfig names the server's certificate and key files.
type TLSConfig struct {
	Certificate string `json:"certificate"`
	Key         string `json:"key"`
}

// ProviderConfig is the OpenID provider.
type ProviderConfig struct {
	Issuer string `json:"issuer"`
	// CAFile holds the only certificates trusted for the provider's TLS.
	CAFile      string   `json:"caFile"`
	AllowedAlgs []string `json:"allowedAlgs"`
	// JWKSRefreshMinSeconds is the least time between two key fetches;
	// 0 or absent means 5.
	JWKSRefreshMinSeconds int `json:"jwksRefreshMinSeconds"`

	// Token and key-set bounds (issue 31); 0 or absent means the default.
	// JWKSMaxAgeSeconds: a key set older than this is fetched again before
	// a token is accepted, so a key the provider withdrew is trusted at
	// most this long while the provider answers (600).
	JWKSMaxAgeSeconds int `json:"jwksMaxAgeSeconds,omitempty"`
	// JWKSGraceSeconds: while the keys cannot be fetched again, the held
	// ones stay in use this long after the last successful fetch; then
	// every token is refused provider-unavailable (1800).
	JWKSGraceSeconds int `json:"jwksGraceSeconds,omitempty"`
	// MaxTokenLifetimeSeconds: a token whose exp - iat is longer is
	// refused (86400).
	MaxTokenLifetimeSeconds int `json:"maxTokenLifetimeSeconds,omitempty"`
}

// Bounds on the provider's token and key-set settings, in seconds.
const (
	maxJWKSAgeSeconds       = 24 * 60 * 60
	minTokenLifetimeSeconds = 60
	// A provider may issue access tokens for up to 30 days (Auth0's
	// ceiling for an API); none is trusted for longer.
	maxTokenLifetimeSeconds = 30 * 24 * 60 * 60
)

// ExchangeConfig is this server as the provider's confidential client.
type ExchangeConfig struct {
	ClientID string `json:"clientId"`
	// ClientSecretFile holds the client secret; it must not be readable by
	// group or others.
	ClientSecretFile string `json:"clientSecretFile"`
	// GatewayAudience is the audience (and scope) asked for in the exchange.
	GatewayAudience string `json:"gatewayAudience"`
}

// LoadHTTPConfig reads and checks the file at path. Unknown fields, member
// names spelled in another case and names given twice are refused
// (internal/strictjson); relative paths are taken relative to the file's folder and made
// absolute; defaults are filled in (Audience, Resource, the JWKS refresh
// interval). The TLS certificate itself is checked by
// CheckServerCertificate.
func LoadHTTPConfig(path string) (*HTTPConfig, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	// It names the issuer, the CA, the audience and the TLS material: a
	// file group or others can write could widen who is let in. Its
	// refusals name the file as the operator gave it.
	raw, err := safefile.ReadConfig(path, 0)
	if err != nil {
		return nil, err
	}
	// As strict as config.json and grant.json: exact member names, none
	// given twice, every refusal with its line, column and JSON path.
	var c HTTPConfig
	f := strictjson.File{Path: path, Holds: HTTPConfigHolds}
	if err := f.Decode(raw, &c); err != nil {
		return nil, err
	}
	if err := c.resolve(filepath.Dir(abs)); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &c, nil
}

// HTTPConfigHolds is what mcp-http.json holds, for the refusal of an empty
// file.
const HTTPConfigHolds = "the HTTP transport's settings as a JSON object (docs/operating.md shows one)"

func (c *HTTPConfig) resolve(dir string) error {
	if c.Listen.Host != ListenHost {
		return fmt.Errorf("listen.host is %q: only %s is served", c.Listen.Host, ListenHost)
	}
	if c.Listen.Port < 1 || c.Listen.Port > 65535 {
		return fmt.Errorf("listen.port %d is not a TCP port (1-65535)", c.Listen.Port)
	}

	for _, f := range []struct {
		name string
		p    *string
	}{
		{"tls.certificate", &c.TLS.Certificate},
		{"tls.key", &c.TLS.Key},
		{"provider.caFile", &c.Provider.CAFile},
		{"exchange.clientSecretFile", &c.Exchange.ClientSecretFile},
	} {
		if *f.p == "" {
			return fmt.Errorf("%s is missing", f.name)
		}
		if !filepath.IsAbs(*f.p) {
			*f.p = filepath.Join(dir, *f.p)
		}
		if _, err := os.Stat(*f.p); err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
	}

	// Whoever reads the TLS key can pose as this server to every host.
	if _, err := safefile.ReadSecret(c.TLS.Key, 0); err != nil {
		return fmt.Errorf("tls.key: %w", err)
	}

	if err := checkIssuer(c.Provider.Issuer); err != nil {
		return fmt.Errorf("provider.issuer: %w", err)
	}
	if _, err := NewProviderClient(c.Provider.CAFile, 0); err != nil {
		return fmt.Errorf("provider.caFile: %w", err)
	}
	if err := CheckAlgs(c.Provider.AllowedAlgs); err != nil {
		return fmt.Errorf("provider.%w", err)
	}
	if c.Provider.JWKSRefreshMinSeconds < 0 {
		return fmt.Errorf("provider.jwksRefreshMinSeconds is %d; it must be 0 (the default, 5) or more", c.Provider.JWKSRefreshMinSeconds)
	}
	if c.Provider.JWKSRefreshMinSeconds == 0 {
		c.Provider.JWKSRefreshMinSeconds = int(DefaultJWKSRefreshMin / time.Second)
	}
	if err := c.Provider.resolveBounds(); err != nil {
		return err
	}

	if c.Exchange.ClientID == "" {
		return errors.New("exchange.clientId is missing")
	}
	if c.Exchange.GatewayAudience == "" {
		return errors.New("exchange.gatewayAudience is missing")
	}
	if _, err := c.ClientSecret(); err != nil {
		return err
	}

	for _, s := range c.RequiredScopes {
		if s == "" || strings.ContainsAny(s, " \t\r\n\"\\") {
			return fmt.Errorf("requiredScopes has %q: a scope is one non-empty word without quotes or backslashes", s)
		}
	}
	for _, id := range c.AllowedClients {
		if id == "" || strings.ContainsFunc(id, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
			return fmt.Errorf("allowedClients has %q: a client id is one non-empty word", id)
		}
	}
	if c.MaxCallers < 1 {
		return fmt.Errorf("maxCallers is %d; it must be at least 1", c.MaxCallers)
	}
	if c.MaxSessionsPerUser < 0 || c.MaxSessions < 0 {
		return fmt.Errorf("maxSessionsPerUser (%d) and maxSessions (%d) must be 0 (the defaults) or more",
			c.MaxSessionsPerUser, c.MaxSessions)
	}
	if c.MaxSessions > 0 && c.MaxSessionsPerUser > c.MaxSessions {
		return fmt.Errorf("maxSessionsPerUser (%d) is more than maxSessions (%d)", c.MaxSessionsPerUser, c.MaxSessions)
	}

	if err := c.checkUserLimits(); err != nil {
		return err
	}
	if err := c.Connections.resolve(); err != nil {
		return err
	}

	if c.Audience == "" {
		c.Audience = c.Exchange.ClientID
	}
	if c.Resource == "" {
		c.Resource = "https://" + ListenHost + ":" + strconv.Itoa(c.Listen.Port) + "/mcp"
	}
	if _, err := MetadataURL(c.Resource); err != nil {
		return fmt.Errorf("resource: %w", err)
	}
	if c.Tracing != nil {
		// Checked alone here, so a bad block is refused at load; the
		// environment is merged in at start (telemetry.Resolve).
		if _, err := telemetry.Resolve(c.Tracing, nil); err != nil {
			return fmt.Errorf("tracing: %w", err)
		}
	}
	return nil
}

// resolveBounds fills in and checks the token and key-set bounds:
// refresh <= max age <= grace <= one day, and a token lifetime between a
// minute and 30 days.
func (p *ProviderConfig) resolveBounds() error {
	if p.JWKSMaxAgeSeconds == 0 {
		p.JWKSMaxAgeSeconds = int(DefaultJWKSMaxAge / time.Second)
	}
	if p.JWKSGraceSeconds == 0 {
		p.JWKSGraceSeconds = max(int(DefaultJWKSGrace/time.Second), p.JWKSMaxAgeSeconds)
	}
	if p.MaxTokenLifetimeSeconds == 0 {
		p.MaxTokenLifetimeSeconds = int(DefaultMaxTokenLifetime / time.Second)
	}
	switch {
	case p.JWKSMaxAgeSeconds < p.JWKSRefreshMinSeconds:
		return fmt.Errorf("provider.jwksMaxAgeSeconds is %d; it must be at least provider.jwksRefreshMinSeconds (%d)",
			p.JWKSMaxAgeSeconds, p.JWKSRefreshMinSeconds)
	case p.JWKSGraceSeconds < p.JWKSMaxAgeSeconds:
		return fmt.Errorf("provider.jwksGraceSeconds is %d; it must be at least provider.jwksMaxAgeSeconds (%d)",
			p.JWKSGraceSeconds, p.JWKSMaxAgeSeconds)
	case p.JWKSGraceSeconds > maxJWKSAgeSeconds:
		return fmt.Errorf("provider.jwksGraceSeconds is %d; keys older than %d seconds (a day) are never trusted",
			p.JWKSGraceSeconds, maxJWKSAgeSeconds)
	case p.MaxTokenLifetimeSeconds < minTokenLifetimeSeconds || p.MaxTokenLifetimeSeconds > maxTokenLifetimeSeconds:
		return fmt.Errorf("provider.maxTokenLifetimeSeconds is %d; it must be between %d and %d (30 days), or 0 for the default (%d)",
			p.MaxTokenLifetimeSeconds, minTokenLifetimeSeconds, maxTokenLifetimeSeconds, int(DefaultMaxTokenLifetime/time.Second))
	}
	return nil
}

// MinBodyBytes is the least maxBodyBytesPerUser: one request body of the
// largest size the server reads (serve.MaxRequestBytes), which a body of
// unknown length is counted as until it has been read.
const MinBodyBytes = 1 << 20

// MaxBodyTimeoutSeconds bounds bodyTimeoutSeconds: a body on loopback takes
// milliseconds, and a longer wait only lets a stalled one hold memory.
const MaxBodyTimeoutSeconds = 300

// checkUserLimits checks the per-user limits: each 0 (the default) or
// positive, a per-user limit no more than its total, and a body budget
// that admits at least one body of the largest size.
func (c *HTTPConfig) checkUserLimits() error {
	for _, p := range []struct {
		user, total  string
		perUser, all int64
		minPerUser   int64
	}{
		{"maxRequestsPerUser", "maxRequests", int64(c.MaxRequestsPerUser), int64(c.MaxRequests), 1},
		{"maxBodyBytesPerUser", "maxBodyBytes", c.MaxBodyBytesPerUser, c.MaxBodyBytes, MinBodyBytes},
		{"maxListenStreamsPerUser", "maxListenStreams", int64(c.MaxListenStreamsPerUser), int64(c.MaxListenStreams), 1},
	} {
		if p.perUser < 0 || p.all < 0 {
			return fmt.Errorf("%s (%d) and %s (%d) must be 0 (the defaults) or more", p.user, p.perUser, p.total, p.all)
		}
		if p.perUser > 0 && p.perUser < p.minPerUser {
			return fmt.Errorf("%s is %d; it must be 0 (the default) or at least %d, one request body of the largest size",
				p.user, p.perUser, p.minPerUser)
		}
		if p.all > 0 && p.all < p.minPerUser {
			return fmt.Errorf("%s is %d; it must be 0 (the default) or at least %d, one request body of the largest size",
				p.total, p.all, p.minPerUser)
		}
		if p.all > 0 && p.perUser > p.all {
			return fmt.Errorf("%s (%d) is more than %s (%d)", p.user, p.perUser, p.total, p.all)
		}
	}
	if c.BodyTimeoutSeconds < 0 || c.BodyTimeoutSeconds > MaxBodyTimeoutSeconds {
		return fmt.Errorf("bodyTimeoutSeconds is %d; it must be 0 (the default) or 1 to %d",
			c.BodyTimeoutSeconds, MaxBodyTimeoutSeconds)
	}
	return nil
}

// ClientSecret reads the exchange client's secret, refusing a file that
// group or others may access, and an empty one. Surrounding white space
// (a trailing newline) is not part of the secret.
func (c *HTTPConfig) ClientSecret() (string, error) {
	path := c.Exchange.ClientSecretFile
	b, err := safefile.ReadSecret(path, 0)
	if err != nil {
		return "", fmt.Errorf("exchange.clientSecretFile: %w", err)
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", fmt.Errorf("exchange.clientSecretFile: %w", &fileerr.EmptyError{Path: path, Holds: "the secret the provider issued to exchange.clientId"})
	}
	return s, nil
}

// KeyPair loads the server's TLS certificate and key; the key is read as
// a secret (once, no symbolic link, owner-only).
func (c *HTTPConfig) KeyPair() (tls.Certificate, error) {
	certPEM, err := os.ReadFile(c.TLS.Certificate)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("tls.certificate: %w", err)
	}
	keyPEM, err := safefile.ReadSecret(c.TLS.Key, 0)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("tls.key: %w", err)
	}
	// Its refusals name the file at fault, or both when they are not a
	// pair.
	return tlspolicy.KeyPair(c.TLS.Certificate, certPEM, c.TLS.Key, keyPEM)
}

// JWKSRefreshMin is the configured least time between key fetches.
func (c *HTTPConfig) JWKSRefreshMin() time.Duration {
	return time.Duration(c.Provider.JWKSRefreshMinSeconds) * time.Second
}

// ListenAddr is host:port to listen on.
func (c *HTTPConfig) ListenAddr() string {
	return c.Listen.Host + ":" + strconv.Itoa(c.Listen.Port)
}

// NewProvider builds the provider from the configuration, with a client
// that trusts only provider.caFile.
func (c *HTTPConfig) NewProvider() (*Provider, error) {
	client, err := NewProviderClient(c.Provider.CAFile, 0)
	if err != nil {
		return nil, err
	}
	return NewProvider(c.Provider.Issuer, client), nil
}

// NewVerifier builds the token verifier for p from the configuration. now
// is its clock (VerifierConfig.Now: time.Now when nil); serve passes its own
// Options.Now, so a test's hand-moved clock decides token expiry and key-set
// age as it decides the grant's end.
func (c *HTTPConfig) NewVerifier(p *Provider, now func() time.Time) (*Verifier, error) {
	return NewVerifier(VerifierConfig{
		Provider:         p,
		Audience:         c.Audience,
		Resource:         c.Resource,
		AllowedAlgs:      c.Provider.AllowedAlgs,
		RequiredScopes:   c.RequiredScopes,
		AllowedClients:   c.AllowedClients,
		JWKSRefreshMin:   c.JWKSRefreshMin(),
		JWKSMaxAge:       time.Duration(c.Provider.JWKSMaxAgeSeconds) * time.Second,
		JWKSGrace:        time.Duration(c.Provider.JWKSGraceSeconds) * time.Second,
		MaxTokenLifetime: time.Duration(c.Provider.MaxTokenLifetimeSeconds) * time.Second,
		Now:              now,
	})
}

// NewExchanger builds the token exchanger for p from the configuration,
// reading the client secret. onPanic may be nil (ExchangerConfig.OnPanic);
// now is its clock for the cached tokens' reuse (time.Now when nil).
func (c *HTTPConfig) NewExchanger(p *Provider, onPanic func(v any), now func() time.Time) (*Exchanger, error) {
	secret, err := c.ClientSecret()
	if err != nil {
		return nil, err
	}
	return NewExchanger(ExchangerConfig{
		Provider:        p,
		ClientID:        c.Exchange.ClientID,
		ClientSecret:    secret,
		GatewayAudience: c.Exchange.GatewayAudience,
		// Exchanged tokens are kept for the callers the session pool
		// holds and as many again: a caller pushed out of the pool needs a
		// new mint on return anyway, and one exchange more then costs
		// little next to holding a Gateway token for every user ever seen.
		MaxEntries: 2 * max(c.MaxCallers, 1),
		OnPanic:    onPanic,
		Now:        now,
	})
}

// checkIssuer requires an https URL without query or fragment: the
// discovery document is found under it and tokens must name it exactly.
func checkIssuer(raw string) error {
	if err := checkHTTPS(raw); err != nil {
		return err
	}
	// A query or a fragment, even an empty one, is a "?" or a "#".
	if strings.ContainsAny(raw, "?#") {
		return fmt.Errorf("%q has a query or fragment", raw)
	}
	return nil
}

// ResourceMetadataURL is the URL of the protected-resource metadata named
// in every challenge. Resource was checked at load.
func (c *HTTPConfig) ResourceMetadataURL() string {
	u, _ := MetadataURL(c.Resource)
	return u
}

// MetadataPath is where MetadataHandler is mounted.
func (c *HTTPConfig) MetadataPath() string {
	p, _ := MetadataPath(c.Resource)
	return p
}
