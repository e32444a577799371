package reference

import (
	"bytes"
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
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/lestrrat-go/jwx/v2/jwa"
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
	if err := g.providers.verify(ctx, b, raw, hdr.KeyID()); err != nil {
		if errors.Is(err, errBadSignature) {
			return nil, time.Time{}, subjectRefused("the subject token's signature does not verify with the provider's key; present a token the provider issued")
		}
		g.log.Warn("OpenID provider keys unavailable", "issuer", b.Issuer, "err", err)
		return nil, time.Time{}, idpUnavailable(g.cfg.IdPRetryAfter,
			"the Gateway could not get the provider's signing key just now; wait for Retry-After, then present the token again")
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

// providerCache keeps, per bound provider (issuer and CA), go-oidc's remote
// key set for the provider's jwks_uri, found by go-oidc's discovery with its
// issuer check, over TLS trusting only the binding's CA. The key set fetches
// the keys on first use and again for a kid it does not hold; a recorder on
// its HTTP client notes which kids the last fetch published, so that a kid
// the provider does not publish (IDP_UNAVAILABLE) is told apart from a
// signature that does not verify (SUBJECT_REFUSED).
type providerCache struct {
	timeout time.Duration
	maxAge  time.Duration // providerKeysMaxAge; tests shorten it
	now     func() time.Time
	mu      sync.Mutex
	sets    map[string]*providerKeys
}

type providerKeys struct {
	set     *oidc.RemoteKeySet
	rec     *jwksRecorder
	created time.Time
	// transport is the set's own; its idle connections are closed when the
	// set is replaced or forgotten, or each fresh discovery (every maxAge)
	// would leave one connection to the provider open for good.
	transport *http.Transport
}

// release closes the idle connections of a set no longer used.
func (k *providerKeys) release() {
	if k != nil && k.transport != nil {
		k.transport.CloseIdleConnections()
	}
}

// providerKeysMaxAge: a binding's key set is discovered and fetched afresh
// after this long, so a key the provider withdrew stops being trusted
// (go-oidc's key set only fetches again for a kid it does not hold).
const providerKeysMaxAge = 10 * time.Minute

func newProviderCache(timeout time.Duration, now func() time.Time) *providerCache {
	return &providerCache{timeout: timeout, maxAge: providerKeysMaxAge, now: now, sets: map[string]*providerKeys{}}
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
			p.sets[k].release()
			delete(p.sets, k)
		}
	}
}

// errBadSignature: the provider publishes the token's kid, and the
// signature does not verify with its keys.
var errBadSignature = errors.New("the subject token's signature does not verify")

// errUnknownKid is a kid the provider does not publish even after a fresh
// fetch of its keys.
var errUnknownKid = errors.New("the provider publishes no key with the token's kid")

// verify checks raw's signature against the provider's keys. Any error but
// errBadSignature means the keys could not be had, or do not name kid.
func (p *providerCache) verify(ctx context.Context, b *providerBinding, raw, kid string) error {
	keys, err := p.keys(ctx, b)
	if err != nil {
		return err
	}
	if _, err := keys.set.VerifySignature(ctx, raw); err != nil {
		switch fetched, ok := keys.rec.last(); {
		case !ok:
			return fmt.Errorf("jwks: %w", err)
		case !slices.Contains(fetched, kid):
			return errUnknownKid
		default:
			return errBadSignature
		}
	}
	return nil
}

// keys returns the binding's key set, running discovery when there is none
// yet. A failed discovery is not kept.
func (p *providerCache) keys(ctx context.Context, b *providerBinding) (*providerKeys, error) {
	ck := cacheKey(b)
	p.mu.Lock()
	held := p.sets[ck]
	fresh := held != nil && p.now().Sub(held.created) < p.maxAge
	p.mu.Unlock()
	if fresh {
		return held, nil
	}
	keys, err := p.discover(ctx, b)
	if err != nil {
		if held == nil {
			return nil, err
		}
		// The provider cannot be reached: the keys held stay in use, and
		// the next attempt waits another maxAge.
		p.mu.Lock()
		held.created = p.now()
		p.mu.Unlock()
		return held, nil
	}
	p.mu.Lock()
	old := p.sets[ck]
	p.sets[ck] = keys
	p.mu.Unlock()
	if old != keys {
		old.release()
	}
	return keys, nil
}

// discover runs go-oidc's discovery for the binding and makes a key set
// for its jwks_uri.
func (p *providerCache) discover(ctx context.Context, b *providerBinding) (*providerKeys, error) {
	roots, err := x509.SystemCertPool()
	if b.CAPEM != "" || err != nil {
		roots = x509.NewCertPool()
		roots.AppendCertsFromPEM([]byte(b.CAPEM))
	}
	// IdleConnTimeout lets go of a connection that became idle after its
	// set was released (a fetch still in flight then).
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		IdleConnTimeout: 2 * time.Minute}
	rec := &jwksRecorder{base: tr}
	client := &http.Client{
		Transport: rec,
		Timeout:   p.timeout,
		// A provider's documents are fetched where they are; a redirect
		// could leave TLS or the provider.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	op, err := oidc.NewProvider(oidc.ClientContext(ctx, client), b.Issuer)
	if err != nil {
		tr.CloseIdleConnections()
		return nil, fmt.Errorf("discovery: %w", err)
	}
	var disc struct {
		JWKSURI string `json:"jwks_uri"`
	}
	if err := op.Claims(&disc); err != nil {
		tr.CloseIdleConnections()
		return nil, fmt.Errorf("discovery: %w", err)
	}
	if u, err := url.Parse(disc.JWKSURI); err != nil || u.Scheme != "https" || u.Host == "" {
		tr.CloseIdleConnections()
		return nil, errors.New("discovery: jwks_uri is not an https URL")
	}
	rec.jwksURL = disc.JWKSURI
	// The key set keeps this context for its fetches: only its client.
	return &providerKeys{set: oidc.NewRemoteKeySet(oidc.ClientContext(context.Background(), client), disc.JWKSURI), rec: rec,
		created: p.now(), transport: tr}, nil
}

// jwksRecorder is the provider client's transport: it bounds every body
// and, for the jwks_uri, records the kids of the last key set fetched (or
// that the fetch failed).
type jwksRecorder struct {
	base    http.RoundTripper
	jwksURL string

	mu   sync.Mutex
	kids []string
	ok   bool
}

func (r *jwksRecorder) last() ([]string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.kids, r.ok
}

func (r *jwksRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	isJWKS := r.jwksURL != "" && req.URL.String() == r.jwksURL
	resp, err := r.base.RoundTrip(req)
	if err != nil {
		if isJWKS {
			r.record(nil, false)
		}
		return nil, err
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, providerBodyLimit+1))
	resp.Body.Close()
	if err == nil && len(body) > providerBodyLimit {
		err = fmt.Errorf("%s: answer larger than %d bytes", req.URL.Redacted(), providerBodyLimit)
	}
	if err != nil {
		if isJWKS {
			r.record(nil, false)
		}
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if isJWKS {
		var set struct {
			Keys []struct {
				Kid string `json:"kid"`
			} `json:"keys"`
		}
		if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &set) != nil {
			r.record(nil, false)
		} else {
			kids := make([]string, 0, len(set.Keys))
			for _, k := range set.Keys {
				kids = append(kids, k.Kid)
			}
			r.record(kids, true)
		}
	}
	return resp, nil
}

func (r *jwksRecorder) record(kids []string, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.kids, r.ok = kids, ok
}
