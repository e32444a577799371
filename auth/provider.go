package auth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"
)

// maxProviderBody bounds what is read from the provider's discovery and
// JWKS documents.
const maxProviderBody = 1 << 20

// NewProviderClient returns an HTTP client for talking to the provider that
// trusts only the certificates in caFile (not the system roots), speaks TLS
// 1.2 or later, follows no redirects and gives up after timeout (10 s when
// zero).
func NewProviderClient(caFile string, timeout time.Duration) (*http.Client, error) {
	pemBytes, err := os.ReadFile(caFile)
	if err != nil {
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
		Transport: tr,
		Timeout:   timeout,
		// A redirect could take a key fetch somewhere the operator did not
		// name; the provider's documents are read where discovery says.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}, nil
}

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

// Metadata returns the provider's discovery document, fetching it from
// <issuer>/.well-known/openid-configuration on first use. A document whose
// issuer differs from the configured one, or whose endpoints are not https,
// is refused (OpenID Connect Discovery §4.3).
func (p *Provider) Metadata(ctx context.Context) (ProviderMetadata, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.meta != nil {
		return *p.meta, nil
	}
	u := strings.TrimSuffix(p.issuer, "/") + "/.well-known/openid-configuration"
	var m ProviderMetadata
	if err := p.getJSON(ctx, u, &m); err != nil {
		return ProviderMetadata{}, fmt.Errorf("provider discovery: %w", err)
	}
	if m.Issuer != p.issuer {
		return ProviderMetadata{}, fmt.Errorf("provider discovery at %s names issuer %q, not the configured %q", u, m.Issuer, p.issuer)
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
		return nil, err
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

func (p *Provider) getJSON(ctx context.Context, u string, v any) error {
	body, err := p.get(ctx, u)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("GET %s: not a JSON document: %w", u, err)
	}
	return nil
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
