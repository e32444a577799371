package auth

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/lestrrat-go/jwx/v2/jws"
	"github.com/lestrrat-go/jwx/v2/jwt"
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
	// cannot be reached, the keys held are used.
	JWKSMaxAge time.Duration
	// ClockSkew is the leeway on exp, nbf and iat; DefaultClockSkew when zero.
	ClockSkew time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// Verifier validates access tokens against the provider's published keys.
//
// A token is accepted when, in this order: it is a compact JWS; its alg is
// on the allow-list; its kid names a provider key whose type (and alg, when
// the key states one) fits that alg; the signature verifies; exp, nbf and
// iat, where present, are JSON numbers (RFC 7519 NumericDate; a string of
// digits is refused); iss equals the
// issuer exactly; it is an access token (see below); exp is present and not
// past (with ClockSkew), and nbf and iat, when present, are not in the
// future; aud contains the Audience; sub is present; its client is one of
// AllowedClients, when they are set; and it grants the required scopes. The first failed check decides the class.
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
// being trusted; if that fetch fails, the keys held are kept.
type Verifier struct {
	provider  *Provider
	audience  string
	algs      []string
	scopes    []string
	clients   []string
	refresh   time.Duration
	maxAge    time.Duration
	skew      time.Duration
	now       func() time.Time
	fetchMu   sync.Mutex // serialises fetches, so a burst of unknown kids fetches once
	mu        sync.Mutex // guards keys and lastFetch
	keys      jwk.Set
	lastFetch time.Time

	// verified remembers tokens that passed every check, by the SHA-256 of
	// the token, until their exp (plus the skew): the same bearer token on
	// every call of a session is then checked once, not re-verified with
	// its signature each time. Only successes are kept; a new key set
	// empties it, and an entry is served only while the key set is not
	// older than maxAge and still holds the key that signed the token.
	cacheMu  sync.Mutex
	verified map[[sha256.Size]byte]verifiedToken
}

// verifiedToken is a verified-token cache entry: the caller, and the key
// (id and algorithm) the signature verified under.
type verifiedToken struct {
	caller   Caller
	kid, alg string
}

// maxVerified bounds the verified-token cache; a full cache is swept of
// expired entries and then, if still full, emptied. A token not in it is
// only verified again (about a quarter of a millisecond), so the bound is
// kept small: the server's heap stays flat however many users pass.
const maxVerified = 64

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
		provider: cfg.Provider,
		audience: cfg.Audience,
		algs:     slices.Clone(cfg.AllowedAlgs),
		scopes:   slices.Clone(cfg.RequiredScopes),
		clients:  slices.Clone(cfg.AllowedClients),
		refresh:  cfg.JWKSRefreshMin,
		maxAge:   cfg.JWKSMaxAge,
		skew:     cfg.ClockSkew,
		now:      cfg.Now,
		verified: map[[sha256.Size]byte]verifiedToken{},
	}
	if v.refresh <= 0 {
		v.refresh = DefaultJWKSRefreshMin
	}
	if v.maxAge <= 0 {
		v.maxAge = DefaultJWKSMaxAge
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
	sum := sha256.Sum256([]byte(token))
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

// stillTrusted reports whether a cached token's key is still one the
// provider publishes, as far as the held key set says: the set is not
// older than the maximum age (else it is fetched again, through verify),
// and it still holds the key. A lookup in the held set is a walk over a
// handful of keys, far cheaper than a signature check.
func (v *Verifier) stillTrusted(e verifiedToken) bool {
	if v.stale() {
		return false
	}
	key, found, err := v.lookup(e.kid, e.alg)
	return found && err == nil && key != nil
}

func (v *Verifier) remember(sum [sha256.Size]byte, e verifiedToken) {
	e.caller.Scopes = slices.Clone(e.caller.Scopes)
	now := v.now()
	v.cacheMu.Lock()
	defer v.cacheMu.Unlock()
	if len(v.verified) >= maxVerified {
		for k, old := range v.verified {
			if !now.Before(old.caller.Expiry.Add(v.skew)) {
				delete(v.verified, k)
			}
		}
		if len(v.verified) >= maxVerified {
			clear(v.verified)
		}
	}
	v.verified[sum] = e
}

// forgetVerified empties the verified-token cache.
func (v *Verifier) forgetVerified() {
	v.cacheMu.Lock()
	defer v.cacheMu.Unlock()
	clear(v.verified)
}

// verify makes every check of Verify. It also returns the key (id and
// algorithm) the token verified under, for the cache.
func (v *Verifier) verify(ctx context.Context, token string) (*Caller, verifiedToken, error) {
	var key verifiedToken
	c, err := v.check(ctx, token, &key)
	if err != nil {
		return nil, verifiedToken{}, err
	}
	return c, key, nil
}

// check makes every check of Verify, and names the verifying key in key.
func (v *Verifier) check(ctx context.Context, token string, used *verifiedToken) (*Caller, error) {
	if token == "" {
		return nil, refuse(ClassNoToken, ReasonNoToken)
	}
	if len(token) > MaxTokenBytes {
		return nil, refuse(ClassMalformed, ReasonTooLong)
	}
	rawHeader, err := checkCompact(token)
	if err != nil {
		return nil, err
	}
	// The alg is judged from the raw header, before the JWS library sees
	// it, so "none" in any spelling is refused as such and never parsed.
	var h struct {
		Alg *string `json:"alg"`
	}
	if err := json.Unmarshal(rawHeader, &h); err != nil {
		return nil, refuse(ClassMalformed, ReasonBadHeader)
	}
	if h.Alg == nil || *h.Alg == "" || strings.EqualFold(*h.Alg, "none") {
		return nil, refuse(ClassInvalid, ReasonAlgNone)
	}
	alg := *h.Alg
	if !slices.Contains(v.algs, alg) {
		return nil, refuse(ClassInvalid, ReasonAlgNotAllowed)
	}
	msg, err := jws.Parse([]byte(token), jws.WithCompact())
	if err != nil || len(msg.Signatures()) != 1 {
		return nil, refuse(ClassMalformed, ReasonBadHeader)
	}
	hdr := msg.Signatures()[0].ProtectedHeaders()
	if hdr.Algorithm().String() != alg {
		return nil, refuse(ClassMalformed, ReasonBadHeader)
	}
	if _, ok := hdr.Get(jws.CriticalKey); ok {
		// No JWS extension is understood here (RFC 7515 §4.1.11).
		return nil, refuse(ClassInvalid, ReasonCritHeader)
	}
	if _, ok := hdr.Get("b64"); ok {
		return nil, refuse(ClassInvalid, ReasonCritHeader)
	}
	kid := hdr.KeyID()
	if kid == "" {
		return nil, refuse(ClassUnknownKey, ReasonKeyIDMissing)
	}
	if len(kid) > maxKeyIDBytes {
		return nil, refuse(ClassMalformed, ReasonBadHeader)
	}

	key, err := v.keyFor(ctx, kid, alg)
	if err != nil {
		return nil, err
	}
	payload, err := jws.Verify([]byte(token), jws.WithKey(jwa.SignatureAlgorithm(alg), key), jws.WithCompact())
	if err != nil {
		return nil, refuse(ClassBadSignature, ReasonSignatureInvalid)
	}
	used.kid, used.alg = kid, alg

	// RFC 7519 §2: exp, nbf and iat are NumericDates, JSON numbers. The
	// JWT library would also read a string of digits; a provider that
	// signs one is not followed, and the token is refused.
	if err := checkNumericDates(payload); err != nil {
		return nil, err
	}

	claims := jwt.New()
	if err := json.Unmarshal(payload, claims); err != nil {
		return nil, refuse(ClassMalformed, ReasonBadClaims)
	}
	var extra struct {
		Typ      *string          `json:"typ"`
		Azp      string           `json:"azp"`
		ClientID string           `json:"client_id"`
		Nonce    *json.RawMessage `json:"nonce"`
		Scope    *string          `json:"scope"`
		Scp      json.RawMessage  `json:"scp"`
	}
	if err := json.Unmarshal(payload, &extra); err != nil {
		return nil, refuse(ClassMalformed, ReasonBadClaims)
	}

	switch iss := claims.Issuer(); {
	case iss == "":
		return nil, refuse(ClassClaimMissing, ReasonIssuerMissing)
	case iss != v.provider.Issuer():
		return nil, refuse(ClassWrongIssuer, ReasonIssuerMismatch)
	}

	if err := checkAccessTokenShape(hdr.Type(), extra.Typ, extra.Azp, extra.Nonce != nil); err != nil {
		return nil, err
	}

	now := v.now()
	exp := claims.Expiration()
	switch {
	case exp.IsZero():
		return nil, refuse(ClassClaimMissing, ReasonExpiryMissing)
	case !now.Before(exp.Add(v.skew)):
		return nil, refuse(ClassExpired, ReasonExpired)
	}
	if nbf := claims.NotBefore(); !nbf.IsZero() && now.Add(v.skew).Before(nbf) {
		return nil, refuse(ClassNotYetValid, ReasonNotYetValid)
	}
	if iat := claims.IssuedAt(); !iat.IsZero() && now.Add(v.skew).Before(iat) {
		return nil, refuse(ClassNotYetValid, ReasonIssuedInFuture)
	}

	aud := claims.Audience()
	switch {
	case len(aud) == 0:
		return nil, refuse(ClassWrongAudience, ReasonAudienceMissing)
	case !slices.Contains(aud, v.audience):
		return nil, refuse(ClassWrongAudience, ReasonAudienceMismatch)
	}

	sub := claims.Subject()
	if sub == "" {
		return nil, refuse(ClassClaimMissing, ReasonSubjectMissing)
	}

	client := extra.ClientID
	if client == "" {
		client = extra.Azp
	}
	if len(v.clients) > 0 && !slices.Contains(v.clients, client) {
		return nil, refuse(ClassClientNotAllowed, ReasonClientNotAllowed)
	}

	scopes, ok := parseScopes(extra.Scope, extra.Scp)
	if !ok {
		return nil, refuse(ClassMalformed, ReasonBadClaims)
	}
	for _, s := range v.scopes {
		if !slices.Contains(scopes, s) {
			return nil, refuse(ClassInsufficientScope, ReasonScopeMissing)
		}
	}

	return &Caller{Issuer: claims.Issuer(), Subject: sub, ClientID: client, Scopes: scopes, Expiry: exp}, nil
}

// checkNumericDates refuses a payload whose exp, nbf or iat is present and
// not a JSON number (a string, null, a boolean, an object).
func checkNumericDates(payload []byte) error {
	var dates struct {
		Exp json.RawMessage `json:"exp"`
		Nbf json.RawMessage `json:"nbf"`
		Iat json.RawMessage `json:"iat"`
	}
	if err := json.Unmarshal(payload, &dates); err != nil {
		return refuse(ClassMalformed, ReasonBadClaims)
	}
	for _, raw := range []json.RawMessage{dates.Exp, dates.Nbf, dates.Iat} {
		if raw == nil {
			continue // absent (a null is present, and refused below)
		}
		if c := raw[0]; c != '-' && (c < '0' || c > '9') {
			return refuse(ClassMalformed, ReasonNumericDateNotNumber)
		}
	}
	return nil
}

// checkCompact refuses anything but three base64url segments: no JWS JSON
// serialisation, no padding, no other characters (RFC 8725 §3.3). It
// returns the decoded header.
func checkCompact(token string) ([]byte, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return nil, refuse(ClassMalformed, ReasonNotCompactJWS)
	}
	var header []byte
	for i, p := range parts {
		// An empty signature is left for the alg check (an unsigned
		// token is "invalid", not "malformed") and the signature check.
		if p == "" && i < 2 {
			return nil, refuse(ClassMalformed, ReasonNotCompactJWS)
		}
		for _, c := range []byte(p) {
			if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return nil, refuse(ClassMalformed, ReasonBadEncoding)
			}
		}
		if i == 2 {
			break
		}
		b, err := base64.RawURLEncoding.DecodeString(p)
		if err != nil || !json.Valid(b) || b[0] != '{' {
			return nil, refuse(ClassMalformed, ReasonBadEncoding)
		}
		if i == 0 {
			header = b
		}
	}
	return header, nil
}

// checkAccessTokenShape applies the rule documented on Verifier.
func checkAccessTokenShape(headerTyp string, payloadTyp *string, azp string, hasNonce bool) error {
	t := strings.ToLower(headerTyp)
	t = strings.TrimPrefix(t, "application/")
	if payloadTyp != nil && strings.EqualFold(*payloadTyp, "ID") {
		return refuse(ClassNotAnAccessToken, ReasonIDToken)
	}
	switch t {
	case "at+jwt":
		if payloadTyp != nil && !strings.EqualFold(*payloadTyp, "Bearer") {
			return refuse(ClassNotAnAccessToken, ReasonNotAccessTokenType)
		}
	case "jwt", "":
		if payloadTyp == nil {
			return refuse(ClassNotAnAccessToken, ReasonIDTokenShape)
		}
		if !strings.EqualFold(*payloadTyp, "Bearer") {
			return refuse(ClassNotAnAccessToken, ReasonNotAccessTokenType)
		}
		if azp == "" {
			return refuse(ClassNotAnAccessToken, ReasonAuthorizedPartyMiss)
		}
	default:
		return refuse(ClassNotAnAccessToken, ReasonNotAccessTokenType)
	}
	if hasNonce {
		return refuse(ClassNotAnAccessToken, ReasonNoncePresent)
	}
	return nil
}

// parseScopes reads scope (a space-separated string, RFC 9068 / RFC 8693)
// or, failing that, scp (a list or a string, as some providers emit it).
func parseScopes(scope *string, scp json.RawMessage) ([]string, bool) {
	if scope != nil {
		return strings.Fields(*scope), true
	}
	if len(scp) == 0 || string(scp) == "null" {
		return nil, true
	}
	var list []string
	if err := json.Unmarshal(scp, &list); err == nil {
		return list, true
	}
	var s string
	if err := json.Unmarshal(scp, &s); err == nil {
		return strings.Fields(s), true
	}
	return nil, false
}

// keyFor returns the provider's key for kid, fit for alg, fetching the key
// set when it is not held yet or does not name kid (rate-limited).
func (v *Verifier) keyFor(ctx context.Context, kid, alg string) (jwk.Key, error) {
	if v.stale() {
		v.fetchMu.Lock()
		if v.stale() {
			// On failure the held keys stay; the attempt counts for the
			// rate limit and the age, so the provider is not hammered.
			_ = v.fetch(ctx)
		}
		v.fetchMu.Unlock()
	}
	if key, found, err := v.lookup(kid, alg); found || err != nil {
		return key, err
	}
	v.fetchMu.Lock()
	defer v.fetchMu.Unlock()
	// Another request may have fetched while this one waited.
	if key, found, err := v.lookup(kid, alg); found || err != nil {
		return key, err
	}
	v.mu.Lock()
	held := v.keys != nil
	recent := !v.lastFetch.IsZero() && v.now().Before(v.lastFetch.Add(v.refresh))
	v.mu.Unlock()
	if recent {
		if held {
			return nil, refuse(ClassUnknownKey, ReasonKeyUnknown)
		}
		return nil, &TokenError{Class: ClassProviderUnavailable, Reason: ReasonJWKSUnavailable,
			cause: errors.New("the provider's keys could not be read, and the next attempt is not due yet")}
	}
	if err := v.fetch(ctx); err != nil {
		return nil, err
	}
	key, found, err := v.lookup(kid, alg)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, refuse(ClassUnknownKey, ReasonKeyUnknown)
	}
	return key, nil
}

// stale reports whether keys are held and were fetched (or last tried)
// longer than the maximum age ago.
func (v *Verifier) stale() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.keys != nil && !v.now().Before(v.lastFetch.Add(v.maxAge))
}

// lookup finds kid in the held key set. found is false when no key of that
// id is held; a key of that id that does not fit alg is an invalid token.
func (v *Verifier) lookup(kid, alg string) (jwk.Key, bool, error) {
	v.mu.Lock()
	set := v.keys
	v.mu.Unlock()
	if set == nil {
		return nil, false, nil
	}
	found := false
	for i := 0; i < set.Len(); i++ {
		k, ok := set.Key(i)
		if !ok || k.KeyID() != kid {
			continue
		}
		if u := k.KeyUsage(); u != "" && u != string(jwk.ForSignature) {
			continue
		}
		found = true
		if keyFits(k, alg) {
			return k, true, nil
		}
	}
	if found {
		return nil, true, refuse(ClassInvalid, ReasonKeyAlgMismatch)
	}
	return nil, false, nil
}

// keyFits reports whether a public key may verify alg: its stated alg, if
// any, is alg, and its type (and curve) is the one alg uses. Symmetric and
// private keys never fit.
func keyFits(k jwk.Key, alg string) bool {
	if a := k.Algorithm().String(); a != "" && a != alg {
		return false
	}
	switch k := k.(type) {
	case jwk.RSAPublicKey:
		return strings.HasPrefix(alg, "RS") || strings.HasPrefix(alg, "PS")
	case jwk.ECDSAPublicKey:
		want := map[string]jwa.EllipticCurveAlgorithm{"ES256": jwa.P256, "ES384": jwa.P384, "ES512": jwa.P521}[alg]
		return want != "" && k.Crv() == want
	case jwk.OKPPublicKey:
		return alg == "EdDSA" && k.Crv() == jwa.Ed25519
	default:
		return false
	}
}

// fetch reads the provider's key set (discovering jwks_uri first if need
// be) and records the attempt, successful or not, for the rate limit.
func (v *Verifier) fetch(ctx context.Context) error {
	// The fetch serves every waiting request, so one client hanging up must
	// not cut it short (and spend the rate limit); the provider client's
	// own timeout bounds it.
	ctx = context.WithoutCancel(ctx)
	v.mu.Lock()
	v.lastFetch = v.now()
	v.mu.Unlock()
	meta, err := v.provider.Metadata(ctx)
	if err != nil {
		return &TokenError{Class: ClassProviderUnavailable, Reason: ReasonDiscoveryFailed, cause: err}
	}
	body, err := v.provider.get(ctx, meta.JWKSURI)
	if err != nil {
		return &TokenError{Class: ClassProviderUnavailable, Reason: ReasonJWKSUnavailable, cause: err}
	}
	set, err := jwk.Parse(body)
	if err != nil {
		return &TokenError{Class: ClassProviderUnavailable, Reason: ReasonJWKSUnavailable,
			cause: fmt.Errorf("the key set at %s is not a JWK set: %w", meta.JWKSURI, err)}
	}
	// A token verified under a key the provider has since dropped is
	// checked again under the new set.
	v.forgetVerified()
	v.mu.Lock()
	v.keys = set
	v.mu.Unlock()
	return nil
}
