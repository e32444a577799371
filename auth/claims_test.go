package auth

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwa"
)

// signRaw signs header and payload, written byte for byte (so a test can
// repeat a member, which a Go map cannot), with the fixture's RSA key
// under RS256.
func (f *verifierFixture) signRaw(t *testing.T, header, payload string) string {
	t.Helper()
	var raw any
	if err := f.rsa.key.Raw(&raw); err != nil {
		t.Fatal(err)
	}
	priv, ok := raw.(*rsa.PrivateKey)
	if !ok {
		t.Fatalf("fixture key is %T", raw)
	}
	input := base64.RawURLEncoding.EncodeToString([]byte(header)) + "." + base64.RawURLEncoding.EncodeToString([]byte(payload))
	sum := sha256.Sum256([]byte(input))
	sig, err := rsa.SignPKCS1v15(rand.Reader, priv, crypto.SHA256, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	return input + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// payloadWith is the fixture's valid claims as a JSON object, with extra
// (raw JSON members, e.g. `"CLIENT_ID":"x"`) appended after them, and the
// named claims left out.
func (f *verifierFixture) payloadWith(t *testing.T, extra string, without ...string) string {
	t.Helper()
	c := f.claims()
	for _, n := range without {
		delete(c, n)
	}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if extra == "" {
		return string(b)
	}
	return strings.TrimSuffix(string(b), "}") + "," + extra + "}"
}

const rs256Header = `{"alg":"RS256","kid":"rsa-1","typ":"at+jwt"}`

// TestVerifyMemberNamesExact: the claims and the header are read by
// exact member names. A duplicate member, or one named like a claim or
// parameter the verifier reads but in another case, is refused malformed,
// so a case variant cannot stand in for the real claim: a rogue client
// cannot pass allowedClients with CLIENT_ID, nor a token without the
// required scope with Scope. encoding/json alone would match CLIENT_ID to
// client_id, and let the later member win.
func TestVerifyMemberNamesExact(t *testing.T) {
	f := newVerifierFixture(t)
	v, err := NewVerifier(VerifierConfig{Provider: f.v.provider, Audience: testAudience, AllowedAlgs: []string{"RS256"},
		RequiredScopes: []string{"openid"}, AllowedClients: []string{"mcp-host"}, Now: f.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	rogue := func(extra string, without ...string) func() string {
		return func() string {
			return f.signRaw(t, rs256Header, f.payloadWith(t, extra, without...))
		}
	}
	tests := []struct {
		name   string
		token  func() string
		reason string // empty: accepted
	}{
		{"the valid token, written by hand", rogue(""), ""},
		{"CLIENT_ID after a rogue client_id", func() string {
			p := strings.Replace(f.payloadWith(t, `"CLIENT_ID":"mcp-host"`), `"client_id":"mcp-host"`, `"client_id":"rogue-host"`, 1)
			return f.signRaw(t, rs256Header, p)
		}, ReasonMemberNameCase},
		{"CLIENT_ID alone", func() string {
			c := f.claims()
			delete(c, "client_id")
			c["azp"] = "rogue-host"
			b, _ := json.Marshal(c)
			return f.signRaw(t, rs256Header, strings.TrimSuffix(string(b), "}")+`,"CLIENT_ID":"mcp-host"}`)
		}, ReasonMemberNameCase},
		{"client_id twice, the allowed one last", func() string {
			p := strings.Replace(f.payloadWith(t, `"client_id":"mcp-host"`), `"client_id":"mcp-host"`, `"client_id":"rogue-host"`, 1)
			return f.signRaw(t, rs256Header, p)
		}, ReasonDuplicateMember},
		{"client_id twice, once escaped", rogue(`"\u0063lient_id":"mcp-host"`), ReasonDuplicateMember},
		{"Scope after a scope without openid", func() string {
			p := strings.Replace(f.payloadWith(t, `"Scope":"openid"`), `"scope":"openid profile"`, `"scope":"profile"`, 1)
			return f.signRaw(t, rs256Header, p)
		}, ReasonMemberNameCase},
		{"SCOPE instead of scope", rogue(`"SCOPE":"openid"`, "scope"), ReasonMemberNameCase},
		{"scope with a long s (folds to scope)", rogue(`"ſcope":"openid"`, "scope"), ReasonMemberNameCase},
		{"scope twice", rogue(`"scope":"openid"`), ReasonDuplicateMember},
		{"AUD beside aud", rogue(`"AUD":"mcp-adapter"`), ReasonMemberNameCase},
		{"Exp beside exp", rogue(fmt.Sprintf(`"Exp":%d`, f.clock.Now().Add(time.Hour).Unix())), ReasonMemberNameCase},
		{"sub twice", rogue(`"sub":"user-mallory"`), ReasonDuplicateMember},
		{"Iss", rogue(`"Iss":"https://elsewhere.example"`), ReasonMemberNameCase},
		{"a claim not read here, in two cases", rogue(`"email":"a@example.org","Email":"b@example.org"`), ""},
		{"header: Typ beside typ", func() string {
			return f.signRaw(t, `{"alg":"RS256","kid":"rsa-1","typ":"at+jwt","Typ":"JWT"}`, f.payloadWith(t, ""))
		}, ReasonMemberNameCase},
		{"header: ALG beside alg", func() string {
			return f.signRaw(t, `{"ALG":"none","alg":"RS256","kid":"rsa-1","typ":"at+jwt"}`, f.payloadWith(t, ""))
		}, ReasonMemberNameCase},
		{"header: kid twice", func() string {
			return f.signRaw(t, `{"alg":"RS256","kid":"rsa-9","kid":"rsa-1","typ":"at+jwt"}`, f.payloadWith(t, ""))
		}, ReasonDuplicateMember},
		{"header: CRIT", func() string {
			return f.signRaw(t, `{"alg":"RS256","kid":"rsa-1","typ":"at+jwt","CRIT":["exp"]}`, f.payloadWith(t, ""))
		}, ReasonMemberNameCase},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := v.Verify(context.Background(), tc.token())
			if tc.reason == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if c.ClientID != "mcp-host" || strings.Join(c.Scopes, " ") != "openid profile" {
					t.Fatalf("caller %+v", c)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted, caller %+v", c)
			}
			if !errors.Is(err, &TokenError{Class: ClassMalformed, Reason: tc.reason}) {
				t.Fatalf("got %v, want malformed (%s)", err, tc.reason)
			}
		})
	}
}

// TestVerifyRFC9068RequiredClaims: an at+jwt access token must carry iat,
// jti and client_id (RFC 9068 §2.2); azp stands in for client_id
// (Keycloak's at+jwt switch names the client there only). A Keycloak
// token typed JWT keeps its own rule (azp required), with jti optional.
func TestVerifyRFC9068RequiredClaims(t *testing.T) {
	f := newVerifierFixture(t)
	edit := func(e func(map[string]any)) func() string { return func() string { return f.token(t, e) } }
	keycloak := func(e func(map[string]any)) func() string {
		return func() string {
			c := f.keycloakClaims()
			e(c)
			return sign(t, f.rsa, jwa.RS256, map[string]any{"typ": "JWT", "kid": "rsa-1"}, c)
		}
	}
	tests := []struct {
		name   string
		token  func() string
		reason string // empty: accepted
	}{
		{"at+jwt without iat", edit(func(c map[string]any) { delete(c, "iat") }), ReasonIssuedAtMissing},
		{"at+jwt without jti", edit(func(c map[string]any) { delete(c, "jti") }), ReasonTokenIDMissing},
		{"at+jwt with an empty jti", edit(func(c map[string]any) { c["jti"] = "" }), ReasonTokenIDMissing},
		{"at+jwt without client_id", edit(func(c map[string]any) { delete(c, "client_id") }), ReasonClientIDMissing},
		{"at+jwt with azp instead of client_id", edit(func(c map[string]any) {
			delete(c, "client_id")
			c["azp"] = "mcp-host"
		}), ""},
		{"Keycloak JWT without jti", keycloak(func(c map[string]any) { delete(c, "jti") }), ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := f.v.Verify(context.Background(), tc.token())
			if tc.reason == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if c.ClientID != "mcp-host" {
					t.Errorf("client %q", c.ClientID)
				}
				return
			}
			if !errors.Is(err, &TokenError{Class: ClassClaimMissing, Reason: tc.reason}) {
				t.Fatalf("got %v, want claim-missing (%s)", err, tc.reason)
			}
		})
	}
}

// TestVerifyMaxTokenLifetime: exp - iat (exp - now when there is no iat)
// longer than the maximum is refused: a token valid for 50 years is never
// accepted. A NumericDate outside 0 to year 9999 is malformed.
func TestVerifyMaxTokenLifetime(t *testing.T) {
	f := newVerifierFixture(t)
	hourly, err := NewVerifier(VerifierConfig{Provider: f.v.provider, Audience: testAudience, AllowedAlgs: []string{"RS256"},
		MaxTokenLifetime: time.Hour, Now: f.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	now := f.clock.Now()
	lifetime := func(iat time.Time, d time.Duration) func(map[string]any) {
		return func(c map[string]any) { c["iat"], c["exp"] = iat.Unix(), iat.Add(d).Unix() }
	}
	tests := []struct {
		name   string
		v      *Verifier
		edit   func(map[string]any)
		shape  string // "keycloak" for a JWT-typed token without iat
		class  Class  // empty: accepted
		reason string
	}{
		{"exp 50 years ahead", f.v, func(c map[string]any) { c["exp"] = now.AddDate(50, 0, 0).Unix() }, "", ClassInvalid, ReasonLifetimeTooLong},
		{"24 hours exactly (the default)", f.v, lifetime(now.Add(-time.Minute), DefaultMaxTokenLifetime), "", "", ""},
		{"24 hours and a second", f.v, lifetime(now.Add(-time.Minute), DefaultMaxTokenLifetime+time.Second), "", ClassInvalid, ReasonLifetimeTooLong},
		{"issued 23 hours ago, 25 hour life", f.v, lifetime(now.Add(-23*time.Hour), 25*time.Hour), "", ClassInvalid, ReasonLifetimeTooLong},
		{"no iat, exp 50 years ahead", f.v, func(c map[string]any) {
			delete(c, "iat")
			c["exp"] = now.AddDate(50, 0, 0).Unix()
		}, "keycloak", ClassInvalid, ReasonLifetimeTooLong},
		{"no iat, exp in 5 minutes", f.v, func(c map[string]any) { delete(c, "iat") }, "keycloak", "", ""},
		{"configured 1 hour: 2 hours refused", hourly, lifetime(now, 2*time.Hour), "", ClassInvalid, ReasonLifetimeTooLong},
		{"configured 1 hour: 1 hour accepted", hourly, lifetime(now, time.Hour), "", "", ""},
		{"exp past year 9999", f.v, func(c map[string]any) { c["exp"] = 1e20 }, "", ClassMalformed, ReasonNumericDateRange},
		{"iat negative", f.v, func(c map[string]any) { c["iat"] = -1 }, "", ClassMalformed, ReasonNumericDateRange},
		{"fractional exp", f.v, func(c map[string]any) { c["exp"] = float64(now.Add(time.Minute).Unix()) + 0.5 }, "", "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var tok string
			if tc.shape == "keycloak" {
				c := f.keycloakClaims()
				tc.edit(c)
				tok = sign(t, f.rsa, jwa.RS256, map[string]any{"typ": "JWT", "kid": "rsa-1"}, c)
			} else {
				tok = f.token(t, tc.edit)
			}
			c, err := tc.v.Verify(context.Background(), tok)
			if tc.class == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if c.Expiry.IsZero() {
					t.Error("no expiry")
				}
				return
			}
			if !errors.Is(err, &TokenError{Class: tc.class, Reason: tc.reason}) {
				t.Fatalf("got %v, want %s (%s)", err, tc.class, tc.reason)
			}
		})
	}
}

// TestVerifyResourceAudience: the advertised resource URL (what RFC 8707
// clients ask the provider for) is an accepted audience beside the client
// id, compared exactly; without a configured resource it is not.
func TestVerifyResourceAudience(t *testing.T) {
	f := newVerifierFixture(t)
	const resource = "https://127.0.0.1:8443/mcp"
	v, err := NewVerifier(VerifierConfig{Provider: f.v.provider, Audience: testAudience, Resource: resource,
		AllowedAlgs: []string{"RS256"}, Now: f.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		v    *Verifier
		aud  any
		ok   bool
	}{
		{"aud the resource URL", v, resource, true},
		{"aud the resource URL in a list", v, []string{"account", resource}, true},
		{"aud the client id", v, testAudience, true},
		{"aud the resource URL with a trailing slash", v, resource + "/", false},
		{"aud the resource URL in upper case", v, strings.ToUpper(resource), false},
		{"aud another resource", v, "https://127.0.0.1:9443/mcp", false},
		{"no resource configured", f.v, resource, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.v.Verify(context.Background(), f.token(t, func(c map[string]any) { c["aud"] = tc.aud }))
			if tc.ok {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, &TokenError{Class: ClassWrongAudience, Reason: ReasonAudienceMismatch}) {
				t.Fatalf("got %v, want wrong-audience", err)
			}
		})
	}
}

// FuzzReadClaims checks the claim view's security property: whatever
// payload readClaims accepts, encoding/json (which matches member names
// case-insensitively and lets a later member win) reads the same client,
// scope, subject, issuer and audience from it. A payload on which the two
// readings could differ is refused.
func FuzzReadClaims(f *testing.F) {
	for _, seed := range []string{
		`{"iss":"https://idp","sub":"alice","aud":"mcp-adapter","client_id":"mcp-host","scope":"openid"}`,
		`{"client_id":"rogue","CLIENT_ID":"mcp-host"}`,
		`{"scope":"profile","Scope":"openid"}`,
		`{"ſcope":"openid"}`,
		`{"aud":["a","b"],"AUD":"c"}`,
		`{"client_id":"a","client_id":"b"}`,
		`{"\u0063lient_id":"a","client_id":"b"}`,
		`{"azp":"x","Azp":"y","email":"e","Email":"f"}`,
		`{"exp":1.5e9,"iat":-1}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		c, err := readClaims(payload)
		if err != nil {
			return
		}
		var loose struct {
			Iss      string          `json:"iss"`
			Sub      string          `json:"sub"`
			ClientID string          `json:"client_id"`
			Azp      string          `json:"azp"`
			Scope    *string         `json:"scope"`
			Aud      json.RawMessage `json:"aud"`
		}
		if err := json.Unmarshal(payload, &loose); err != nil {
			t.Fatalf("readClaims accepted what encoding/json refuses: %v", err)
		}
		if loose.Iss != c.iss || loose.Sub != c.sub || loose.ClientID != c.clientID || loose.Azp != c.azp {
			t.Fatalf("readings differ: strict %q %q %q %q, encoding/json %q %q %q %q",
				c.iss, c.sub, c.clientID, c.azp, loose.Iss, loose.Sub, loose.ClientID, loose.Azp)
		}
		if (loose.Scope == nil) != (c.scope == nil) || (c.scope != nil && *loose.Scope != *c.scope) {
			t.Fatal("the scope readings differ")
		}
		if loose.Aud != nil {
			aud, ok := audience(loose.Aud)
			if !ok || strings.Join(aud, "\x00") != strings.Join(c.aud, "\x00") {
				t.Fatal("the audience readings differ")
			}
		}
	})
}
