package auth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"

	"github.com/pdmcp/pdmcp/internal/fileerr"
	"github.com/pdmcp/pdmcp/internal/noanswer"
	"github.com/pdmcp/pdmcp/internal/safefile"
)

// maxProviderBody bounds what is read from the provider's discovery and
// JWKS documents.
const maxProviderBody = 1 << 20

// NewProviderClient returns an HTTP client for talking to the provider that
// trusts only the certificates in caFile (not the system roots), speaks TLS
// 1.2 or later, follows no redirects and gives up after timeout (10 s when
// zero).
func NewProviderClient(caFile string, timeout time.Duration) (*http.Client, error) {
	// The only CAs trusted for the provider: a file group or others can
	// write could add one.
	pemBytes, err := safefile.ReadConfig(caFile, 0)
	if err != nil {
		return nil, fmt.Errorf("provider CA file: %w", err)
	}
	if err := fileerr.CheckEmpty(caFile, pemBytes, "the CA certificates the OpenID provider is trusted by, in PEM form"); err != nil {
		return nil, fmt.Errorf("provider CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemBytes) {
		return nil, fmt.Errorf("provider CA file %s holds no PEM certificate", caFile)
	}
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return &http.Client{
		Transport: limitBodies{tr},
		Timeout:   timeout,
		// A redirect could take a key fetch somewhere the operator did not
		// name; the provider's documents are read where discovery says.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}, nil
}

// limitBodies cuts every response body at maxProviderBody: go-oidc reads
// discovery documents and key sets whole, and a provider's answer is never
// that large. Reading past the limit is an error, not a silent truncation.
type limitBodies struct{ base http.RoundTripper }

func (l limitBodies) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := l.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	resp.Body = &limitedBody{rc: resp.Body, left: maxProviderBody}
	return resp, nil
}

type limitedBody struct {
	rc   io.ReadCloser
	left int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left < 0 {
		return 0, errBodyTooLarge
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		return n + int(b.left), errBodyTooLarge
	}
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }

var errBodyTooLarge = fmt.Errorf("the provider's answer is larger than %d bytes", maxProviderBody)

// ProviderMetadata is the part of the provider's OpenID discovery document
// this package uses.
type ProviderMetadata struct {
	Issuer                   string   `json:"issuer"`
	JWKSURI                  string   `json:"jwks_uri"`
	TokenEndpoint            string   `json:"token_endpoint"`
	TokenEndpointAuthMethods []string `json:"token_endpoint_auth_methods_supported"`
}

// Provider is the OpenID provider that issues the callers' tokens: its
// issuer, the client used to reach it, and its discovery document, read
// once on first use and kept.
type Provider struct {
	issuer string
	client *http.Client

	mu   sync.Mutex
	meta *ProviderMetadata
}

// NewProvider returns the provider at issuer, reached with client (see
// NewProviderClient). Nothing is fetched until first use.
func NewProvider(issuer string, client *http.Client) *Provider {
	return &Provider{issuer: issuer, client: client}
}

// Issuer is the configured issuer, exactly as the tokens must name it.
func (p *Provider) Issuer() string { return p.issuer }

// Client is the HTTP client that reaches the provider.
func (p *Provider) Client() *http.Client { return p.client }

// Metadata returns the provider's discovery document, fetched by go-oidc
// from <issuer>/.well-known/openid-configuration on first use with the
// provider's client (CA-pinned, no redirects, bounded bodies). A document
// whose issuer differs from the configured one (OpenID Connect Discovery
// §4.3, go-oidc's check), or whose endpoints are not https, is refused. A
// failure is not kept: the next call tries again.
func (p *Provider) Metadata(ctx context.Context) (ProviderMetadata, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.meta != nil {
		return *p.meta, nil
	}
	u := strings.TrimSuffix(p.issuer, "/") + "/.well-known/openid-configuration"
	op, err := oidc.NewProvider(oidc.ClientContext(ctx, p.client), p.issuer)
	var mismatch *oidc.IssuerMismatchError
	switch {
	case errors.As(err, &mismatch):
		return ProviderMetadata{}, fmt.Errorf("provider discovery at %s names issuer %q, not the configured %q", u, mismatch.Discovered, p.issuer)
	case errors.As(err, new(*url.Error)):
		// The transport's failure: nothing answered.
		return ProviderMetadata{}, &noanswer.Error{Peer: "the OpenID provider", URL: u, Err: err}
	case err != nil:
		return ProviderMetadata{}, fmt.Errorf("provider discovery at %s: %w", u, err)
	}
	var m ProviderMetadata
	if err := op.Claims(&m); err != nil {
		return ProviderMetadata{}, fmt.Errorf("provider discovery at %s: %w", u, err)
	}
	for name, v := range map[string]string{"jwks_uri": m.JWKSURI, "token_endpoint": m.TokenEndpoint} {
		if err := checkHTTPS(v); err != nil {
			return ProviderMetadata{}, fmt.Errorf("provider discovery at %s: %s: %w", u, name, err)
		}
	}
	p.meta = &m
	return m, nil
}

// get fetches u with the provider's client and returns the body, bounded.
func (p *Provider) get(ctx context.Context, u string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, &noanswer.Error{Peer: "the OpenID provider", URL: u, Err: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxProviderBody+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: HTTP %d", u, resp.StatusCode)
	}
	if len(body) > maxProviderBody {
		return nil, fmt.Errorf("GET %s: document larger than %d bytes", u, maxProviderBody)
	}
	return body, nil
}

func checkHTTPS(raw string) error {
	if raw == "" {
		return errors.New("missing")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	if u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("%q is not an https URL", raw)
	}
	return nil
}

// Reachable fetches the provider's discovery document once, with the
// provider's client, and reports whether it came back; unlike Metadata it
// never answers from what it holds. It sends no token.
func (p *Provider) Reachable(ctx context.Context) error {
	u := strings.TrimSuffix(p.issuer, "/") + "/.well-known/openid-configuration"
	if _, err := p.get(ctx, u); err != nil {
		if errors.As(err, new(*noanswer.Error)) {
			return err // it names the URL
		}
		return fmt.Errorf("provider discovery at %s: %w", u, err)
	}
	return nil
}
