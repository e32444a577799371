package reference

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/lestrrat-go/jwx/v2/jws"
	"github.com/lestrrat-go/jwx/v2/jwt"

	"github.com/pdmcp/pdmcp/gateway/api"
)

// Subject tokens (HTTP mode): a token an OpenID provider bound to the
// service issued to the Gateway's API audience, mapped to a principal.

// subjectTokenSkew is the clock skew allowed on exp and nbf.
const subjectTokenSkew = 30 * time.Second

// providerBodyLimit bounds a discovery document or JWKS.
const providerBodyLimit = 1 << 20

func subjectRefused(detail string) *api.Error {
	return gatewayError(api.CodeSubjectRefused, http.StatusUnauthorized, detail)
}

func idpUnavailable(retryAfter time.Duration, detail string) *api.Error {
	e := gatewayError(api.CodeIdPUnavailable, http.StatusServiceUnavailable, detail)
	e.RetryAfter = retryAfter
	return e
}

// subjectPrincipal verifies a subject token for the service and returns the
// principal its (issuer, subject) maps to and the token's expiry.
func (g *Gateway) subjectPrincipal(ctx context.Context, sv *service, raw string, now time.Time) (*principal, time.Time, error) {
	if d := g.faults.idpUnavailable(); d > 0 {
		return nil, time.Time{}, idpUnavailable(d,
			"the Gateway cannot check subject tokens just now (fault injection); wait for Retry-After, then present the token again")
	}
	if strings.Count(raw, ".") != 2 {
		return nil, time.Time{}, subjectRefused("the subject token is not a compact signed JWT; present the token the provider issued")
	}
	msg, err := jws.Parse([]byte(raw))
	if err != nil || len(msg.Signatures()) != 1 {
		return nil, time.Time{}, subjectRefused("the subject token is not a compact signed JWT; present the token the provider issued")
	}
	hdr := msg.Signatures()[0].ProtectedHeaders()
	alg := hdr.Algorithm()
	if alg != jwa.RS256 && alg != jwa.ES256 {
		return nil, time.Time{}, subjectRefused("the subject token must be signed RS256 or ES256; configure the provider to sign so")
	}
	var unverified struct {
		Iss string `json:"iss"`
	}
	if err := json.Unmarshal(msg.Payload(), &unverified); err != nil || unverified.Iss == "" {
		return nil, time.Time{}, subjectRefused("the subject token names no issuer; present a token from the bound provider")
	}
	b, err := g.store.binding(ctx, sv.ID, unverified.Iss)
	if errors.Is(err, errNotFound) {
		return nil, time.Time{}, subjectRefused("no OpenID provider with this token's issuer is bound to the service; bind the provider first")
	}
	if err != nil {
		return nil, time.Time{}, err
	}
	if hdr.KeyID() == "" {
		return nil, time.Time{}, subjectRefused("the subject token names no signing key (kid); present a token from the bound provider")
	}
	key, err := g.providers.key(ctx, b, hdr.KeyID())
	if err != nil {
		g.log.Warn("OpenID provider keys unavailable", "issuer", b.Issuer, "err", err)
		return nil, time.Time{}, idpUnavailable(g.cfg.IdPRetryAfter,
			"the Gateway could not get the provider's signing key just now; wait for Retry-After, then present the token again")
	}
	if _, err := jws.Verify([]byte(raw), jws.WithKey(alg, key)); err != nil {
		return nil, time.Time{}, subjectRefused("the subject token's signature does not verify with the provider's key; present a token the provider issued")
	}
	tok, err := jwt.Parse([]byte(raw), jwt.WithVerify(false), jwt.WithValidate(false))
	if err != nil {
		return nil, time.Time{}, subjectRefused("the subject token's claims do not parse; present the token the provider issued")
	}
	err = jwt.Validate(tok,
		jwt.WithClock(jwt.ClockFunc(func() time.Time { return now })),
		jwt.WithAcceptableSkew(subjectTokenSkew),
		jwt.WithIssuer(b.Issuer),
		jwt.WithAudience(b.Audience),
		jwt.WithRequiredClaim(jwt.ExpirationKey),
		jwt.WithRequiredClaim(jwt.SubjectKey))
	if err != nil {
		return nil, time.Time{}, subjectRefused("the subject token was not accepted (" + tokenProblem(err) + "); exchange for a fresh token issued to the Gateway's audience")
	}
	client := claimString(tok, "azp")
	if client == "" {
		client = claimString(tok, "client_id")
	}
	if client != b.AllowedClient {
		return nil, time.Time{}, subjectRefused("the subject token was issued to a client this service does not allow (azp); exchange the token as the allowed client")
	}
	p, err := g.store.mappedPrincipal(ctx, sv.ID, b.Issuer, tok.Subject())
	if errors.Is(err, errNotFound) {
		return nil, time.Time{}, gatewayError(api.CodeIdentityNotMapped, http.StatusForbidden,
			"the Gateway has no enabled mapping from this identity to a principal of the service; ask the operator to map it, do not retry")
	}
	if err != nil {
		return nil, time.Time{}, err
	}
	if p.Disabled {
		return nil, time.Time{}, gatewayError(api.CodeActingAsRefused, http.StatusForbidden,
			"the principal this identity maps to is disabled; ask the operator, do not retry")
	}
	return p, tok.Expiration(), nil
}

func tokenProblem(err error) string {
	switch {
	case errors.Is(err, jwt.ErrTokenExpired()):
		return "expired"
	case errors.Is(err, jwt.ErrTokenNotYetValid()):
		return "not valid yet"
	case errors.Is(err, jwt.ErrInvalidAudience()):
		return "wrong audience"
	case errors.Is(err, jwt.ErrInvalidIssuer()):
		return "wrong issuer"
	case errors.Is(err, jwt.ErrRequiredClaim()):
		return "a required claim is missing"
	default:
		return "invalid claims"
	}
}

func claimString(tok jwt.Token, name string) string {
	v, ok := tok.Get(name)
	if !ok {
		return ""
	}
	s, _ := v.(string)
	return s
}

// providerCache keeps each bound provider's JWKS, fetched over TLS trusting
// only the binding's CA.
type providerCache struct {
	timeout time.Duration
	mu      sync.Mutex
	sets    map[string]jwk.Set
}

func newProviderCache(timeout time.Duration) *providerCache {
	return &providerCache{timeout: timeout, sets: map[string]jwk.Set{}}
}

func cacheKey(b *providerBinding) string {
	sum := sha256.Sum256([]byte(b.CAPEM))
	return b.Issuer + "\x00" + string(sum[:])
}

// forget drops the cached keys of an issuer (its binding changed).
func (p *providerCache) forget(issuer string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k := range p.sets {
		if strings.HasPrefix(k, issuer+"\x00") {
			delete(p.sets, k)
		}
	}
}

// errUnknownKid is a kid the provider does not publish even after a fresh
// fetch of its keys.
var errUnknownKid = errors.New("the provider publishes no key with the token's kid")

// key is the provider's key kid, fetching the provider's keys when they are
// not cached and once more when kid is not among them.
func (p *providerCache) key(ctx context.Context, b *providerBinding, kid string) (jwk.Key, error) {
	ck := cacheKey(b)
	p.mu.Lock()
	set := p.sets[ck]
	p.mu.Unlock()
	if set != nil {
		if k, ok := set.LookupKeyID(kid); ok {
			return k, nil
		}
	}
	set, err := p.fetch(ctx, b)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.sets[ck] = set
	p.mu.Unlock()
	if k, ok := set.LookupKeyID(kid); ok {
		return k, nil
	}
	return nil, errUnknownKid
}

func (p *providerCache) fetch(ctx context.Context, b *providerBinding) (jwk.Set, error) {
	roots, err := x509.SystemCertPool()
	if b.CAPEM != "" || err != nil {
		roots = x509.NewCertPool()
		roots.AppendCertsFromPEM([]byte(b.CAPEM))
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}
	defer tr.CloseIdleConnections()
	client := &http.Client{
		Transport: tr,
		Timeout:   p.timeout,
		// A provider's documents are fetched where they are; a redirect
		// could leave TLS or the provider.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	var disc struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	if err := getJSON(ctx, client, strings.TrimSuffix(b.Issuer, "/")+"/.well-known/openid-configuration", &disc); err != nil {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	if disc.Issuer != b.Issuer {
		return nil, errors.New("discovery: the document names another issuer")
	}
	if u, err := url.Parse(disc.JWKSURI); err != nil || u.Scheme != "https" {
		return nil, errors.New("discovery: jwks_uri is not an https URL")
	}
	body, err := get(ctx, client, disc.JWKSURI)
	if err != nil {
		return nil, fmt.Errorf("jwks: %w", err)
	}
	set, err := jwk.Parse(body)
	if err != nil {
		return nil, fmt.Errorf("jwks: %w", err)
	}
	return set, nil
}

func get(ctx context.Context, client *http.Client, u string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s answered %d", u, resp.StatusCode)
	}
	return io.ReadAll(io.LimitReader(resp.Body, providerBodyLimit))
}

func getJSON(ctx context.Context, client *http.Client, u string, v any) error {
	body, err := get(ctx, client, u)
	if err != nil {
		return err
	}
	return json.Unmarshal(body, v)
}
