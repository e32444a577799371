package auth

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwk"
)

// Limits on untrusted input.
const (
	// MaxTokenBytes is the longest access token looked at.
	MaxTokenBytes = 16 << 10
	maxKeyIDBytes = 256
)

// DefaultClockSkew is the leeway on exp, nbf and iat.
const DefaultClockSkew = 30 * time.Second

// DefaultJWKSMaxAge is how long a fetched key set is used before it is
// fetched again (when a token is verified after that): a key the provider
// stopped publishing is no longer trusted after at most this long.
const DefaultJWKSMaxAge = 10 * time.Minute

// DefaultJWKSGrace is how long after the last successful fetch the held
// key set stays in use while the provider's keys cannot be read again:
// three maximum ages, long enough for a provider restart; by then the
// access tokens of a provider like deploy/keycloak's (10 minutes) have
// expired anyway. Past it every token is refused provider-unavailable.
const DefaultJWKSGrace = 30 * time.Minute

// DefaultMaxTokenLifetime is the longest exp - iat accepted: 24 hours, the
// longest access-token lifetime the common providers default to (Auth0's
// default, Okta's maximum); Keycloak's realm here issues 5 and 10 minutes.
const DefaultMaxTokenLifetime = 24 * time.Hour

// DefaultJWKSRefreshMin is the least time between two fetches of the
// provider's keys when the configuration names none.
const DefaultJWKSRefreshMin = 5 * time.Second

// asymmetricAlgs lists the only signing algorithms a configuration may
// allow. HMAC algorithms are excluded outright: a resource server holds no
// secret shared with the provider, and accepting them invites signing with
// the provider's public key as the MAC key.
const asymmetricAlgs = "RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, ES512, EdDSA"

func isAsymmetricAlg(a string) bool {
	switch a {
	case "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA":
		return true
	}
	return false
}

// CheckAlgs refuses an allow-list that is empty or names an algorithm
// outside the asymmetric set (none, HS256 and the like).
func CheckAlgs(algs []string) error {
	if len(algs) == 0 {
		return errors.New("allowedAlgs is empty; name the provider's signing algorithms, e.g. [\"RS256\"]")
	}
	for _, a := range algs {
		switch {
		case strings.EqualFold(a, "none"):
			return fmt.Errorf("allowedAlgs names %q: unsigned tokens are never accepted", a)
		case strings.HasPrefix(strings.ToUpper(a), "HS"):
			return fmt.Errorf("allowedAlgs names %q: HMAC algorithms are never accepted (only asymmetric ones: %s)", a, asymmetricAlgs)
		case !isAsymmetricAlg(a):
			return fmt.Errorf("allowedAlgs names %q, which is not one of %s", a, asymmetricAlgs)
		}
	}
	return nil
}

// VerifierConfig configures a Verifier.
type VerifierConfig struct {
	// Provider issues the tokens; its issuer is the only one accepted.
	Provider *Provider
	// Audience must be one of the token's aud values, compared exactly.
	Audience string
	// Resource, when set, is accepted as an aud value beside Audience,
	// compared exactly: the advertised resource URL, which RFC 8707
	// clients send the provider as their resource parameter.
	Resource string
	// AllowedAlgs is the allow-list of signing algorithms (see CheckAlgs).
	AllowedAlgs []string
	// RequiredScopes must all be granted (scope or scp claim).
	RequiredScopes []string
	// AllowedClients, when not empty, are the only OAuth clients (the
	// token's client_id, or azp when it has none) whose tokens are
	// accepted; empty accepts any client.
	AllowedClients []string
	// JWKSRefreshMin is the least time between two fetches of the
	// provider's keys; DefaultJWKSRefreshMin when zero.
	JWKSRefreshMin time.Duration
	// JWKSMaxAge is how long a fetched key set is used before a token makes
	// it fetched again; DefaultJWKSMaxAge when zero. While the provider
	// cannot be reached, the keys held are used, up to JWKSGrace.
	JWKSMaxAge time.Duration
	// JWKSGrace is how long after the last successful fetch the held keys
	// stay in use while they cannot be fetched again; past it every token
	// is refused provider-unavailable. DefaultJWKSGrace when zero; never
	// less than JWKSMaxAge.
	JWKSGrace time.Duration
	// MaxTokenLifetime bounds exp - iat (exp - now without iat);
	// DefaultMaxTokenLifetime when zero.
	MaxTokenLifetime time.Duration
	// ClockSkew is the leeway on exp, nbf and iat; DefaultClockSkew when zero.
	ClockSkew time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// Verifier validates access tokens against the provider's published keys.
//
// A token is accepted when, in this order: it is a compact JWS whose header
// names no member twice or in another case (see below); its alg is on the
// allow-list; its kid names a provider key whose type (and alg, when the
// key states one) fits that alg; the signature verifies; the claims name
// no member twice or in another case; exp, nbf and iat, where present, are
// JSON numbers (RFC 7519 NumericDate; a string of digits is refused)
// between 0 and the year 9999; iss equals the issuer exactly; it is an
// access token (see below), and when typed at+jwt it has iat, jti and
// client_id (or azp; RFC 9068 §2.2); exp is present and not past (with
// ClockSkew), and nbf and iat, when present, are not in the future; exp -
// iat (exp - now without iat) is within MaxTokenLifetime; aud contains the
// Audience or the Resource; sub is present; its client is one of
// AllowedClients, when they are set; and it grants the required scopes.
// The first failed check decides the class.
//
// The header and the claims are JSON objects whose member names are
// compared exactly (RFC 7515, RFC 7519): a duplicate member, or one named
// like a header parameter or claim read here but in another case
// (CLIENT_ID, Scope, AUD), is malformed. Each claim is read from the member
// of exactly its name, never through encoding/json's case-insensitive
// matching.
//
// Access token or ID token. The header typ is compared case-insensitively,
// with an "application/" prefix ignored.
//   - typ "at+jwt" (RFC 9068): an access token, unless the payload says
//     otherwise (a payload typ other than "Bearer", or a nonce).
//   - typ "JWT" or no typ (Keycloak's default): an access token only when
//     the payload typ is "Bearer" AND azp names the client it was issued to
//     AND there is no nonce. A payload typ "ID" is an ID token; no payload
//     typ at all is how other providers' ID tokens look, so it is refused
//     too; a nonce belongs to ID tokens (Keycloak stopped copying it into
//     access tokens, keycloak#26893).
//   - any other typ (dpop+jwt, logout+jwt, ...) is not an access token.
//
// aud == azp is not used as a marker: a Keycloak access token without an
// audience mapper looks like that, and reporting it as wrong-audience points
// the operator at the missing mapper.
//
// Keys are fetched on first use and again when a token names an unknown
// kid, at most once per JWKSRefreshMin (failed attempts count); a kid still
// unknown after that is unknown-key. A key set older than JWKSMaxAge is
// fetched again before it is used, so a key the provider withdrew stops
// being trusted; while that fetch fails (tried again at most once per
// JWKSRefreshMin), the keys held are kept, but only until JWKSGrace after
// the last successful fetch: then every token is refused
// provider-unavailable until the keys can be read again.
type Verifier struct {
	provider    *Provider
	audience    string
	resource    string
	algs        []string
	scopes      []string
	clients     []string
	refresh     time.Duration
	maxAge      time.Duration
	grace       time.Duration
	maxLifetime time.Duration
	skew        time.Duration
	now         func() time.Time
	fetchMu     sync.Mutex // serialises fetches, so a burst of unknown kids fetches once
	mu          sync.Mutex // guards keys, lastFetch and lastGood
	keys        jwk.Set
	lastFetch   time.Time // the last attempt, for the rate limit
	lastGood    time.Time // the last successful fetch, for the age and grace

	// verified remembers tokens that passed every check, by the SHA-256 of
	// the token, until their exp (plus the skew): the same bearer token on
	// every call of a session is then checked once, not re-verified with
	// its signature each time. Only successes are kept; a new key set
	// empties it, and an entry is served only while the key set is not
	// older than maxAge and still holds the key that signed the token.
	cacheMu  sync.Mutex
	verified map[[sha256.Size]byte]verifiedToken
}

// NewVerifier checks cfg and returns a Verifier. It fetches nothing.
func NewVerifier(cfg VerifierConfig) (*Verifier, error) {
	if cfg.Provider == nil || cfg.Provider.Issuer() == "" {
		return nil, errors.New("verifier: no provider")
	}
	if cfg.Audience == "" {
		return nil, errors.New("verifier: no audience")
	}
	if err := CheckAlgs(cfg.AllowedAlgs); err != nil {
		return nil, fmt.Errorf("verifier: %w", err)
	}
	v := &Verifier{
		provider:    cfg.Provider,
		audience:    cfg.Audience,
		resource:    cfg.Resource,
		algs:        slices.Clone(cfg.AllowedAlgs),
		scopes:      slices.Clone(cfg.RequiredScopes),
		clients:     slices.Clone(cfg.AllowedClients),
		refresh:     cfg.JWKSRefreshMin,
		maxAge:      cfg.JWKSMaxAge,
		grace:       cfg.JWKSGrace,
		maxLifetime: cfg.MaxTokenLifetime,
		skew:        cfg.ClockSkew,
		now:         cfg.Now,
		// Sized for its bound once: clear keeps a map's table, so a cache
		// that grew to the bound would otherwise hold it from then on,
		// and the heap would step up after the first maxVerified users.
		verified: make(map[[sha256.Size]byte]verifiedToken, maxVerified),
	}
	if v.refresh <= 0 {
		v.refresh = DefaultJWKSRefreshMin
	}
	if v.maxAge <= 0 {
		v.maxAge = DefaultJWKSMaxAge
	}
	if v.grace <= 0 {
		v.grace = DefaultJWKSGrace
	}
	// A grace shorter than the maximum age would refuse every token
	// before a fetch is even due.
	v.grace = max(v.grace, v.maxAge)
	if v.maxLifetime <= 0 {
		v.maxLifetime = DefaultMaxTokenLifetime
	}
	if v.skew <= 0 {
		v.skew = DefaultClockSkew
	}
	if v.now == nil {
		v.now = time.Now
	}
	return v, nil
}

// ClockSkew is the leeway the Verifier allows on token times.
func (v *Verifier) ClockSkew() time.Duration { return v.skew }

// Verify validates token and returns its caller. Every refusal is a
// *TokenError. A token that passed before is answered from the cache until
// its exp (with the skew), while the held key set is younger than the
// maximum age and still holds the token's key; otherwise it is checked
// again in full (fetching the key set when it is that old), and refused
// as expired, or as unknown-key when its key was withdrawn.
func (v *Verifier) Verify(ctx context.Context, token string) (*Caller, error) {
	if token == "" || len(token) > MaxTokenBytes {
		c, _, err := v.verify(ctx, token)
		return c, err
	}
	sum := tokenSum(token)
	now := v.now()
	v.cacheMu.Lock()
	e, ok := v.verified[sum]
	if ok && !now.Before(e.caller.Expiry.Add(v.skew)) {
		delete(v.verified, sum)
		ok = false
	}
	v.cacheMu.Unlock()
	if ok && v.stillTrusted(e) {
		c := e.caller
		c.Scopes = slices.Clone(c.Scopes)
		return &c, nil
	}
	caller, key, err := v.verify(ctx, token)
	if err != nil {
		if ok {
			v.cacheMu.Lock()
			delete(v.verified, sum)
			v.cacheMu.Unlock()
		}
		return nil, err
	}
	key.caller = *caller
	v.remember(sum, key)
	return caller, nil
}

// tokenSum is the SHA-256 of token. A token of the common size is hashed
// from a copy on the stack rather than from one made on the heap for
// every request.
func tokenSum(token string) [sha256.Size]byte {
	var buf [tokenSumStack]byte
	if len(token) <= len(buf) {
		return sha256.Sum256(append(buf[:0], token...))
	}
	return sha256.Sum256([]byte(token))
}

// tokenSumStack is the longest token tokenSum hashes from the stack: a
// provider's access token is mostly under two kilobytes, and the frame is
// kept small (a longer token is copied to the heap, as it always was).
const tokenSumStack = 2 << 10
