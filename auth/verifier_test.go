package auth

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwa"
	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"

	"github.com/pdmcp/pdmcp/internal/testutil"
)

const (
	testAudience = "mcp-adapter"
	testSubject  = "user-alice-7c1f"
)

// verifierFixture is a provider with an RSA and an EC key published, and
// a verifier on a hand-moved clock.
type verifierFixture struct {
	p     *testProvider
	rsa   *testKey
	ec    *testKey
	clock *testutil.Clock
	v     *Verifier
}

func newVerifierFixture(t testing.TB) *verifierFixture {
	t.Helper()
	f := &verifierFixture{p: newTestProvider(t), rsa: newRSAKey(t, "rsa-1"), ec: newECKey(t, "ec-1"), clock: newTestClock()}
	f.p.publish(f.rsa, f.ec)
	v, err := NewVerifier(VerifierConfig{
		Provider:       f.p.provider(t),
		Audience:       testAudience,
		AllowedAlgs:    []string{"RS256", "ES256", "PS256"},
		RequiredScopes: []string{"openid"},
		JWKSRefreshMin: time.Minute,
		Now:            f.clock.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	f.v = v
	return f
}

// claims are a valid access token's claims at the fixture's clock.
func (f *verifierFixture) claims() map[string]any {
	now := f.clock.Now()
	return map[string]any{
		"iss":       f.p.issuer(),
		"sub":       testSubject,
		"aud":       []string{testAudience, "account"},
		"exp":       now.Add(5 * time.Minute).Unix(),
		"iat":       now.Add(-time.Second).Unix(),
		"nbf":       now.Add(-time.Second).Unix(),
		"jti":       "jti-1",
		"client_id": "mcp-host",
		"scope":     "openid profile",
	}
}

func atHeader(kid string) map[string]any { return map[string]any{"typ": "at+jwt", "kid": kid} }

// token signs claims (changed by edit) as an RFC 9068 access token.
func (f *verifierFixture) token(t testing.TB, edit func(map[string]any)) string {
	t.Helper()
	c := f.claims()
	if edit != nil {
		edit(c)
	}
	return sign(t, f.rsa, jwa.RS256, atHeader("rsa-1"), c)
}

// keycloakClaims are claims as Keycloak puts them in an access token.
func (f *verifierFixture) keycloakClaims() map[string]any {
	c := f.claims()
	delete(c, "client_id")
	c["typ"] = "Bearer"
	c["azp"] = "mcp-host"
	c["sid"] = "session-1"
	return c
}

func TestVerifyAccepts(t *testing.T) {
	f := newVerifierFixture(t)
	tests := []struct {
		name       string
		token      func() string
		wantClient string
		wantScopes []string
	}{
		{"RFC 9068 access token, RS256", func() string { return f.token(t, nil) }, "mcp-host", []string{"openid", "profile"}},
		{"RFC 9068 access token, ES256", func() string {
			return sign(t, f.ec, jwa.ES256, atHeader("ec-1"), f.claims())
		}, "mcp-host", []string{"openid", "profile"}},
		{"media type application/at+jwt", func() string {
			return sign(t, f.rsa, jwa.RS256, map[string]any{"typ": "application/AT+JWT", "kid": "rsa-1"}, f.claims())
		}, "mcp-host", []string{"openid", "profile"}},
		{"Keycloak access token (typ JWT, payload typ Bearer, azp)", func() string {
			return sign(t, f.rsa, jwa.RS256, map[string]any{"typ": "JWT", "kid": "rsa-1"}, f.keycloakClaims())
		}, "mcp-host", []string{"openid", "profile"}},
		{"scopes in scp as a list", func() string {
			return f.token(t, func(c map[string]any) { delete(c, "scope"); c["scp"] = []string{"openid", "x"} })
		}, "mcp-host", []string{"openid", "x"}},
		{"aud as a single string", func() string {
			return f.token(t, func(c map[string]any) { c["aud"] = testAudience })
		}, "mcp-host", []string{"openid", "profile"}},
		{"expired, but within the clock skew", func() string {
			return f.token(t, func(c map[string]any) { c["exp"] = f.clock.Now().Add(-29 * time.Second).Unix() })
		}, "mcp-host", []string{"openid", "profile"}},
		{"nbf in the future, but within the clock skew", func() string {
			return f.token(t, func(c map[string]any) { c["nbf"] = f.clock.Now().Add(29 * time.Second).Unix() })
		}, "mcp-host", []string{"openid", "profile"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := f.v.Verify(context.Background(), tc.token())
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if c.Issuer != f.p.issuer() || c.Subject != testSubject || c.ClientID != tc.wantClient {
				t.Errorf("caller = %+v", c)
			}
			if c.ID() != f.p.issuer()+"|"+testSubject {
				t.Errorf("ID() = %q", c.ID())
			}
			if strings.Join(c.Scopes, " ") != strings.Join(tc.wantScopes, " ") {
				t.Errorf("scopes = %v, want %v", c.Scopes, tc.wantScopes)
			}
			if c.Expiry.IsZero() {
				t.Error("no expiry")
			}
		})
	}
}

func TestVerifyRefuses(t *testing.T) {
	f := newVerifierFixture(t)
	other := newRSAKey(t, "rsa-1") // same kid as the provider's key, not published
	publicPEM := func() []byte {
		pub, err := f.rsa.key.PublicKey()
		if err != nil {
			t.Fatal(err)
		}
		var raw any
		if err := pub.Raw(&raw); err != nil {
			t.Fatal(err)
		}
		der, err := x509.MarshalPKIXPublicKey(raw)
		if err != nil {
			t.Fatal(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	}
	hmacWithPublicKey := func() string {
		k := wrapKey(t, publicPEM(), "rsa-1", jwa.HS256)
		return sign(t, k, jwa.HS256, atHeader("rsa-1"), f.claims())
	}
	withHeader := func(h map[string]any, edit func(map[string]any)) func() string {
		return func() string {
			c := f.claims()
			if edit != nil {
				edit(c)
			}
			return sign(t, f.rsa, jwa.RS256, h, c)
		}
	}
	edit := func(e func(map[string]any)) func() string { return func() string { return f.token(t, e) } }
	now := f.clock.Now()

	tests := []struct {
		name   string
		token  func() string
		class  Class
		reason string
	}{
		{"empty", func() string { return "" }, ClassNoToken, ReasonNoToken},
		{"expired", edit(func(c map[string]any) { c["exp"] = now.Add(-31 * time.Second).Unix() }), ClassExpired, ReasonExpired},
		// RFC 7519: a NumericDate is a JSON number; the JWT library alone
		// would read a string of digits.
		{"exp a string of digits", edit(func(c map[string]any) { c["exp"] = fmt.Sprint(c["exp"]) }), ClassMalformed, ReasonNumericDateNotNumber},
		{"nbf a string of digits", edit(func(c map[string]any) { c["nbf"] = fmt.Sprint(c["nbf"]) }), ClassMalformed, ReasonNumericDateNotNumber},
		{"iat a string of digits", edit(func(c map[string]any) { c["iat"] = fmt.Sprint(c["iat"]) }), ClassMalformed, ReasonNumericDateNotNumber},
		{"exp null", edit(func(c map[string]any) { c["exp"] = nil }), ClassMalformed, ReasonNumericDateNotNumber},
		{"iat true", edit(func(c map[string]any) { c["iat"] = true }), ClassMalformed, ReasonNumericDateNotNumber},
		{"nbf an object", edit(func(c map[string]any) { c["nbf"] = map[string]any{"v": 1} }), ClassMalformed, ReasonNumericDateNotNumber},
		{"exp a list", edit(func(c map[string]any) { c["exp"] = []any{c["exp"]} }), ClassMalformed, ReasonNumericDateNotNumber},
		{"not yet valid (nbf)", edit(func(c map[string]any) { c["nbf"] = now.Add(10 * time.Minute).Unix() }), ClassNotYetValid, ReasonNotYetValid},
		{"issued in the future (iat)", edit(func(c map[string]any) { c["iat"] = now.Add(10 * time.Minute).Unix() }), ClassNotYetValid, ReasonIssuedInFuture},
		{"wrong audience", edit(func(c map[string]any) { c["aud"] = []string{"gateway-api"} }), ClassWrongAudience, ReasonAudienceMismatch},
		{"audience differs only in case", edit(func(c map[string]any) { c["aud"] = "MCP-ADAPTER" }), ClassWrongAudience, ReasonAudienceMismatch},
		{"no audience", edit(func(c map[string]any) { delete(c, "aud") }), ClassWrongAudience, ReasonAudienceMissing},
		{"wrong issuer", edit(func(c map[string]any) { c["iss"] = "https://idp.example/realms/other" }), ClassWrongIssuer, ReasonIssuerMismatch},
		{"issuer with a trailing slash", edit(func(c map[string]any) { c["iss"] = f.p.issuer() + "/" }), ClassWrongIssuer, ReasonIssuerMismatch},
		{"no issuer", edit(func(c map[string]any) { delete(c, "iss") }), ClassClaimMissing, ReasonIssuerMissing},
		{"bad signature: another key with the same kid", func() string {
			return sign(t, other, jwa.RS256, atHeader("rsa-1"), f.claims())
		}, ClassBadSignature, ReasonSignatureInvalid},
		{"bad signature: embedded jwk header naming the signer", func() string {
			pub, _ := other.key.PublicKey()
			return sign(t, other, jwa.RS256, map[string]any{"typ": "at+jwt", "kid": "rsa-1", "jwk": pub}, f.claims())
		}, ClassBadSignature, ReasonSignatureInvalid},
		{"bad signature: payload altered", func() string {
			tok := f.token(t, nil)
			parts := strings.Split(tok, ".")
			c := f.claims()
			c["sub"] = "user-mallory"
			return parts[0] + "." + b64JSON(t, c) + "." + parts[2]
		}, ClassBadSignature, ReasonSignatureInvalid},
		{"bad signature: none given", func() string {
			tok := f.token(t, nil)
			return tok[:strings.LastIndex(tok, ".")+1]
		}, ClassBadSignature, ReasonSignatureInvalid},
		{"unknown kid", withHeader(atHeader("rsa-9"), nil), ClassUnknownKey, ReasonKeyUnknown},
		{"no kid", withHeader(map[string]any{"typ": "at+jwt"}, nil), ClassUnknownKey, ReasonKeyIDMissing},
		{"alg none", func() string {
			return unsigned(t, map[string]any{"alg": "none", "typ": "at+jwt", "kid": "rsa-1"}, f.claims())
		}, ClassInvalid, ReasonAlgNone},
		{"alg nOnE", func() string {
			return unsigned(t, map[string]any{"alg": "nOnE", "typ": "at+jwt", "kid": "rsa-1"}, f.claims())
		}, ClassInvalid, ReasonAlgNone},
		{"no alg", func() string { return unsigned(t, map[string]any{"typ": "at+jwt", "kid": "rsa-1"}, f.claims()) }, ClassInvalid, ReasonAlgNone},
		{"HS256 keyed with the provider's public key", hmacWithPublicKey, ClassInvalid, ReasonAlgNotAllowed},
		{"RS384, not on the allow-list", func() string {
			return sign(t, f.rsa, jwa.RS384, atHeader("rsa-1"), f.claims())
		}, ClassInvalid, ReasonAlgNotAllowed},
		{"ES256 header naming the RSA key", func() string {
			return sign(t, f.ec, jwa.ES256, atHeader("rsa-1"), f.claims())
		}, ClassInvalid, ReasonKeyAlgMismatch},
		{"PS256 with an RS256-only key", func() string {
			return sign(t, f.rsa, jwa.PS256, atHeader("rsa-1"), f.claims())
		}, ClassInvalid, ReasonKeyAlgMismatch},
		{"critical header", withHeader(map[string]any{"typ": "at+jwt", "kid": "rsa-1", "crit": []string{"exp"}, "exp": 1}, nil), ClassInvalid, ReasonCritHeader},
		{"ID token (payload typ ID)", withHeader(map[string]any{"typ": "JWT", "kid": "rsa-1"}, func(c map[string]any) {
			c["typ"] = "ID"
			c["azp"] = "mcp-host"
		}), ClassNotAnAccessToken, ReasonIDToken},
		{"ID token (payload typ ID) under at+jwt", withHeader(atHeader("rsa-1"), func(c map[string]any) { c["typ"] = "ID" }), ClassNotAnAccessToken, ReasonIDToken},
		{"ID-token-shaped: typ JWT, no payload typ", withHeader(map[string]any{"typ": "JWT", "kid": "rsa-1"}, nil), ClassNotAnAccessToken, ReasonIDTokenShape},
		{"ID-token-shaped: no typ at all", withHeader(map[string]any{"kid": "rsa-1"}, func(c map[string]any) { c["aud"] = []string{testAudience} }), ClassNotAnAccessToken, ReasonIDTokenShape},
		{"ID-token-shaped: Bearer with a nonce", withHeader(map[string]any{"typ": "JWT", "kid": "rsa-1"}, func(c map[string]any) {
			maps.Copy(c, f.keycloakClaims())
			c["nonce"] = "n-0S6_WzA2Mj"
		}), ClassNotAnAccessToken, ReasonNoncePresent},
		{"at+jwt with a nonce", edit(func(c map[string]any) { c["nonce"] = "n-0S6_WzA2Mj" }), ClassNotAnAccessToken, ReasonNoncePresent},
		{"Keycloak-shaped without azp", withHeader(map[string]any{"typ": "JWT", "kid": "rsa-1"}, func(c map[string]any) {
			maps.Copy(c, f.keycloakClaims())
			delete(c, "azp")
		}), ClassNotAnAccessToken, ReasonAuthorizedPartyMiss},
		{"Keycloak refresh token (payload typ Refresh)", withHeader(map[string]any{"typ": "JWT", "kid": "rsa-1"}, func(c map[string]any) {
			maps.Copy(c, f.keycloakClaims())
			c["typ"] = "Refresh"
		}), ClassNotAnAccessToken, ReasonNotAccessTokenType},
		{"DPoP proof", withHeader(map[string]any{"typ": "dpop+jwt", "kid": "rsa-1"}, nil), ClassNotAnAccessToken, ReasonNotAccessTokenType},
		{"not a token", func() string { return "not-a-token" }, ClassMalformed, ReasonNotCompactJWS},
		{"two segments", func() string { return "eyJhbGciOiJSUzI1NiJ9.e30" }, ClassMalformed, ReasonNotCompactJWS},
		{"JWS JSON serialisation", func() string { return `{"payload":"e30","signatures":[]}` }, ClassMalformed, ReasonNotCompactJWS},
		{"padding in a segment", func() string {
			tok := f.token(t, nil)
			return strings.Replace(tok, ".", "=.", 1)
		}, ClassMalformed, ReasonBadEncoding},
		{"header is not JSON", func() string { return "bm90IGpzb24.e30.c2ln" }, ClassMalformed, ReasonBadEncoding},
		{"claims are not an object", func() string {
			tok := f.token(t, nil)
			parts := strings.Split(tok, ".")
			return parts[0] + ".WzFd." + parts[2]
		}, ClassMalformed, ReasonBadEncoding},
		{"kid of 10 kB", withHeader(map[string]any{"typ": "at+jwt", "kid": strings.Repeat("k", 10000)}, nil), ClassMalformed, ReasonBadHeader},
		{"token over the size limit", func() string { return strings.Repeat("a", MaxTokenBytes+1) }, ClassMalformed, ReasonTooLong},
		{"no subject", edit(func(c map[string]any) { delete(c, "sub") }), ClassClaimMissing, ReasonSubjectMissing},
		{"empty subject", edit(func(c map[string]any) { c["sub"] = "" }), ClassClaimMissing, ReasonSubjectMissing},
		{"no expiry", edit(func(c map[string]any) { delete(c, "exp") }), ClassClaimMissing, ReasonExpiryMissing},
		{"exp is not a number", edit(func(c map[string]any) { c["exp"] = "tomorrow" }), ClassMalformed, ReasonNumericDateNotNumber},
		{"insufficient scope", edit(func(c map[string]any) { c["scope"] = "profile email" }), ClassInsufficientScope, ReasonScopeMissing},
		{"no scope at all", edit(func(c map[string]any) { delete(c, "scope") }), ClassInsufficientScope, ReasonScopeMissing},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tok := tc.token()
			c, err := f.v.Verify(context.Background(), tok)
			if err == nil {
				t.Fatalf("accepted, caller %+v", c)
			}
			var te *TokenError
			if !errors.As(err, &te) {
				t.Fatalf("error %T %v is not a *TokenError", err, err)
			}
			if te.Class != tc.class || te.Reason != tc.reason {
				t.Fatalf("got %s/%s, want %s/%s", te.Class, te.Reason, tc.class, tc.reason)
			}
			if !errors.Is(err, &TokenError{Class: tc.class}) {
				t.Error("errors.Is by class does not match")
			}
			wantStatus := http.StatusUnauthorized
			switch tc.class {
			case ClassInsufficientScope:
				wantStatus = http.StatusForbidden
			case ClassProviderUnavailable:
				wantStatus = http.StatusServiceUnavailable
			}
			if te.Status() != wantStatus {
				t.Errorf("status %d, want %d", te.Status(), wantStatus)
			}
			if errors.Is(err, sdkauth.ErrInvalidToken) != (wantStatus == http.StatusUnauthorized) {
				t.Error("errors.Is(ErrInvalidToken) disagrees with the status")
			}
			if tok != "" && strings.Contains(err.Error(), tok) {
				t.Error("error text holds the token")
			}
		})
	}
}

func TestVerifierRefreshesKeysOnUnknownKidRateLimited(t *testing.T) {
	f := newVerifierFixture(t)
	ctx := context.Background()
	if _, err := f.v.Verify(ctx, f.token(t, nil)); err != nil {
		t.Fatalf("first token: %v", err)
	}
	if n := f.p.jwksFetches.Load(); n != 1 {
		t.Fatalf("JWKS fetched %d times for the first token, want 1", n)
	}
	if _, err := f.v.Verify(ctx, f.token(t, nil)); err != nil {
		t.Fatal(err)
	}
	if n := f.p.jwksFetches.Load(); n != 1 {
		t.Fatalf("a known kid fetched the JWKS again (%d fetches)", n)
	}

	// The provider rotates to a new key. Within the refresh interval, a
	// token under it is unknown-key and the JWKS is not fetched again.
	rotated := newRSAKey(t, "rsa-2")
	f.p.publish(rotated, f.rsa)
	rotatedToken := func() string { return sign(t, rotated, jwa.RS256, atHeader("rsa-2"), f.claims()) }
	f.clock.Advance(30 * time.Second)
	for range 20 {
		_, err := f.v.Verify(ctx, rotatedToken())
		if !errors.Is(err, &TokenError{Class: ClassUnknownKey}) {
			t.Fatalf("within the interval: %v, want unknown-key", err)
		}
	}
	if n := f.p.jwksFetches.Load(); n != 1 {
		t.Fatalf("JWKS fetched %d times within the interval, want 1", n)
	}

	// Past the interval, the unknown kid causes one refetch and is accepted.
	f.clock.Advance(31 * time.Second)
	if _, err := f.v.Verify(ctx, rotatedToken()); err != nil {
		t.Fatalf("rotated key after the interval: %v", err)
	}
	if n := f.p.jwksFetches.Load(); n != 2 {
		t.Fatalf("JWKS fetched %d times, want 2", n)
	}

	// Straight after, a kid the provider does not publish stays unknown
	// without a fetch; a burst from many goroutines does not fetch either.
	// burst verifies n tokens at once, each under a kid named prefix-i
	// that the provider does not publish.
	burst := func(n int, prefix string) []error {
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() {
				_, errs[i] = f.v.Verify(ctx, sign(t, rotated, jwa.RS256, atHeader(fmt.Sprintf("%s-%d", prefix, i)), f.claims()))
			})
		}
		wg.Wait()
		return errs
	}
	for _, err := range burst(32, "random") {
		if !errors.Is(err, &TokenError{Class: ClassUnknownKey, Reason: ReasonKeyUnknown}) {
			t.Fatalf("random kid: %v", err)
		}
	}
	if n := f.p.jwksFetches.Load(); n != 2 {
		t.Fatalf("JWKS fetched %d times after a burst of unknown kids, want 2", n)
	}

	// Once the interval has passed again, a burst of unknown kids fetches
	// exactly once between them.
	f.clock.Advance(61 * time.Second)
	for _, err := range burst(16, "burst") {
		if !errors.Is(err, &TokenError{Class: ClassUnknownKey}) {
			t.Fatalf("burst kid: %v", err)
		}
	}
	if n := f.p.jwksFetches.Load(); n != 3 {
		t.Fatalf("JWKS fetched %d times for a burst past the interval, want 3", n)
	}
	if n := f.p.discoveryFetches.Load(); n != 1 {
		t.Errorf("discovery fetched %d times, want 1", n)
	}
}

func TestVerifierProviderUnavailable(t *testing.T) {
	t.Run("provider closed before the first token", func(t *testing.T) {
		f := newVerifierFixture(t)
		tok := f.token(t, nil)
		f.p.srv.Close()
		_, err := f.v.Verify(context.Background(), tok)
		var te *TokenError
		if !errors.As(err, &te) || te.Class != ClassProviderUnavailable || te.Reason != ReasonDiscoveryFailed {
			t.Fatalf("got %v, want provider-unavailable/%s", err, ReasonDiscoveryFailed)
		}
		if te.Status() != http.StatusServiceUnavailable || errors.Is(err, sdkauth.ErrInvalidToken) {
			t.Errorf("status %d; want 503, not an invalid token", te.Status())
		}
		if errors.Unwrap(err) == nil {
			t.Error("no provider failure behind the refusal")
		}
		// The next attempt waits for the refresh interval.
		_, err = f.v.Verify(context.Background(), tok)
		if !errors.Is(err, &TokenError{Class: ClassProviderUnavailable}) {
			t.Fatalf("second attempt: %v", err)
		}
	})

	t.Run("JWKS closed after discovery, keys held", func(t *testing.T) {
		f := newVerifierFixture(t)
		ctx := context.Background()
		if _, err := f.v.Verify(ctx, f.token(t, nil)); err != nil {
			t.Fatal(err)
		}
		f.p.srv.Close()
		// A known key still verifies: nothing is fetched for it.
		if _, err := f.v.Verify(ctx, f.token(t, nil)); err != nil {
			t.Fatalf("known key with the provider down: %v", err)
		}
		// An unknown kid past the interval needs the provider, which is gone.
		f.clock.Advance(2 * time.Minute)
		_, err := f.v.Verify(ctx, sign(t, f.rsa, jwa.RS256, atHeader("rsa-new"), f.claims()))
		if !errors.Is(err, &TokenError{Class: ClassProviderUnavailable, Reason: ReasonJWKSUnavailable}) {
			t.Fatalf("got %v, want provider-unavailable/%s", err, ReasonJWKSUnavailable)
		}
	})

	t.Run("provider certificate not from the CA file", func(t *testing.T) {
		f := newVerifierFixture(t)
		caFile := writeForeignCA(t)
		client, err := NewProviderClient(caFile, 0)
		if err != nil {
			t.Fatal(err)
		}
		v, err := NewVerifier(VerifierConfig{Provider: NewProvider(f.p.issuer(), client), Audience: testAudience, AllowedAlgs: []string{"RS256"}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = v.Verify(context.Background(), f.token(t, nil))
		if !errors.Is(err, &TokenError{Class: ClassProviderUnavailable}) {
			t.Fatalf("got %v, want provider-unavailable", err)
		}
		if f.p.discoveryFetches.Load() != 0 {
			t.Error("discovery was served over an untrusted connection")
		}
		if !strings.Contains(err.Error(), "certificate") {
			t.Errorf("the failure does not say it is the certificate: %v", err)
		}
	})

	t.Run("discovery names another issuer", func(t *testing.T) {
		f := newVerifierFixture(t)
		client, err := NewProviderClient(f.p.caFile, 0)
		if err != nil {
			t.Fatal(err)
		}
		// The configured issuer has a trailing slash the provider does not.
		v, err := NewVerifier(VerifierConfig{Provider: NewProvider(f.p.issuer()+"/", client), Audience: testAudience, AllowedAlgs: []string{"RS256"}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = v.Verify(context.Background(), f.token(t, nil))
		if !errors.Is(err, &TokenError{Class: ClassProviderUnavailable, Reason: ReasonDiscoveryFailed}) || !strings.Contains(err.Error(), "names issuer") {
			t.Fatalf("got %v", err)
		}
	})
}

func TestNewVerifierRefusesSymmetricAlgs(t *testing.T) {
	p := NewProvider("https://idp.example", http.DefaultClient)
	for _, algs := range [][]string{nil, {"none"}, {"HS256"}, {"RS256", "hs512"}, {"RSA-OAEP"}} {
		if _, err := NewVerifier(VerifierConfig{Provider: p, Audience: "a", AllowedAlgs: algs}); err == nil {
			t.Errorf("allowedAlgs %v accepted", algs)
		}
	}
}

// TestVerifyAllowedClients: with allowedClients set, only tokens issued to
// a named client (client_id, or Keycloak's azp) are accepted; another
// client, or none named, is refused 401 with its own class.
func TestVerifyAllowedClients(t *testing.T) {
	f := newVerifierFixture(t)
	v, err := NewVerifier(VerifierConfig{Provider: f.v.provider, Audience: testAudience, AllowedAlgs: []string{"RS256"},
		RequiredScopes: []string{"openid"}, AllowedClients: []string{"mcp-host", "second-host"}, Now: f.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		token func() string
		ok    bool
	}{
		{"client_id allowed", func() string { return f.token(t, nil) }, true},
		{"second client allowed", func() string { return f.token(t, func(c map[string]any) { c["client_id"] = "second-host" }) }, true},
		{"Keycloak azp allowed", func() string {
			return sign(t, f.rsa, jwa.RS256, map[string]any{"typ": "JWT", "kid": "rsa-1"}, f.keycloakClaims())
		}, true},
		{"another client", func() string { return f.token(t, func(c map[string]any) { c["client_id"] = "rogue-host" }) }, false},
		{"Keycloak azp of another client", func() string {
			c := f.keycloakClaims()
			c["azp"] = "rogue-host"
			return sign(t, f.rsa, jwa.RS256, map[string]any{"typ": "JWT", "kid": "rsa-1"}, c)
		}, false},
		{"client_id wins over azp", func() string {
			return f.token(t, func(c map[string]any) { c["client_id"] = "rogue-host"; c["azp"] = "mcp-host" })
		}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := v.Verify(context.Background(), tc.token())
			if tc.ok {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var te *TokenError
			if !errors.As(err, &te) || te.Class != ClassClientNotAllowed || te.Reason != ReasonClientNotAllowed || te.Status() != 401 {
				t.Fatalf("got %v, want client-not-allowed (401)", err)
			}
		})
	}
	// Without allowedClients any client is accepted, as before.
	if _, err := f.v.Verify(context.Background(), f.token(t, func(c map[string]any) { c["client_id"] = "rogue-host" })); err != nil {
		t.Fatalf("no allow-list: %v", err)
	}
}

// TestVerifierWithdrawnKeyCachedToken: a token verified (and cached) under
// a key the provider then withdraws is not served from the cache once the
// held key set is older than the maximum age: the keys are fetched again
// and the token is refused unknown-key, though its exp is hours away.
func TestVerifierWithdrawnKeyCachedToken(t *testing.T) {
	f := newVerifierFixture(t)
	ctx := context.Background()
	tok := f.token(t, func(c map[string]any) { c["exp"] = f.clock.Now().Add(3 * time.Hour).Unix() })
	if _, err := f.v.Verify(ctx, tok); err != nil {
		t.Fatal(err)
	}
	f.p.publish(newRSAKey(t, "rsa-2"))
	f.clock.Advance(DefaultJWKSMaxAge - time.Minute)
	if _, err := f.v.Verify(ctx, tok); err != nil {
		t.Fatalf("before the maximum age, from the cache: %v", err)
	}
	f.clock.Advance(2 * time.Minute)
	if _, err := f.v.Verify(ctx, tok); !errors.Is(err, &TokenError{Class: ClassUnknownKey}) {
		t.Fatalf("a cached token under a withdrawn key, past the maximum age: %v, want unknown-key", err)
	}
	if n := f.p.jwksFetches.Load(); n != 2 {
		t.Errorf("%d JWKS fetches, want 2 (first use, then past the maximum age)", n)
	}
	// And it stays refused (not put back in the cache).
	if _, err := f.v.Verify(ctx, tok); !errors.Is(err, &TokenError{Class: ClassUnknownKey}) {
		t.Fatalf("again: %v, want unknown-key", err)
	}
}

// TestVerifierWithdrawnKey: a key the provider stops publishing is not
// trusted once the held key set is older than the maximum age; while the
// provider cannot be reached, the held keys stay in use.
func TestVerifierWithdrawnKey(t *testing.T) {
	f := newVerifierFixture(t)
	ctx := context.Background()
	if _, err := f.v.Verify(ctx, f.token(t, nil)); err != nil {
		t.Fatal(err)
	}
	rotated := newRSAKey(t, "rsa-2")
	f.p.publish(rotated)
	// Younger than the maximum age: the held key is still used.
	f.clock.Advance(DefaultJWKSMaxAge - time.Minute)
	if _, err := f.v.Verify(ctx, f.token(t, nil)); err != nil {
		t.Fatalf("before the maximum age: %v", err)
	}
	if n := f.p.jwksFetches.Load(); n != 1 {
		t.Fatalf("%d JWKS fetches before the maximum age, want 1", n)
	}
	// Past it: the keys are fetched again and rsa-1 is gone.
	f.clock.Advance(2 * time.Minute)
	if _, err := f.v.Verify(ctx, f.token(t, nil)); !errors.Is(err, &TokenError{Class: ClassUnknownKey}) {
		t.Fatalf("withdrawn key after the maximum age: %v, want unknown-key", err)
	}
	if _, err := f.v.Verify(ctx, sign(t, rotated, jwa.RS256, atHeader("rsa-2"), f.claims())); err != nil {
		t.Fatalf("the published key: %v", err)
	}
	// The provider goes away: the held keys (rsa-2) stay in use.
	f.p.srv.Close()
	f.clock.Advance(DefaultJWKSMaxAge + time.Minute)
	if _, err := f.v.Verify(ctx, sign(t, rotated, jwa.RS256, atHeader("rsa-2"), f.claims())); err != nil {
		t.Fatalf("held key with the provider down: %v", err)
	}
}
