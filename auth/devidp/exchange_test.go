package devidp

import (
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwk"
)

const tokenTypeAccess = "urn:ietf:params:oauth:token-type:access_token"

func parseJWKS(b []byte) (jwk.Set, error) { return jwk.Parse(b) }

// exchangeForm is the adapter's usual exchange request.
func exchangeForm(subject string) url.Values {
	return url.Values{
		"grant_type":         {"urn:ietf:params:oauth:grant-type:token-exchange"},
		"subject_token":      {subject},
		"subject_token_type": {tokenTypeAccess},
		"audience":           {"gateway-api"},
		"scope":              {"gateway-api"},
	}
}

// exchangeFormAt moves the clock on by advance for the rest of the test and
// returns the exchange form for subject, after edit (if any) changes it.
func (e *env) exchangeFormAt(t *testing.T, subject string, advance time.Duration, edit func(url.Values)) url.Values {
	e.clock.Advance(advance)
	t.Cleanup(func() { e.clock.Advance(-advance) })
	f := exchangeForm(subject)
	if edit != nil {
		edit(f)
	}
	return f
}

// exchange posts the adapter's exchange request with client_secret_basic,
// after edit changes the form.
func (e *env) exchange(t *testing.T, subject string, edit func(url.Values)) *http.Response {
	t.Helper()
	f := e.exchangeFormAt(t, subject, 0, edit)
	return e.postForm(t, e.p.TokenEndpoint(), f, e.p.AdapterClientID(), e.p.AdapterClientSecret())
}

func TestTokenExchange(t *testing.T) {
	e := startEnv(t, "", nil)
	user := e.login(t, "alice", alicePassword)
	_, subj := e.verified(t, user.AccessToken)

	cases := []struct {
		name    string
		advance time.Duration
		form    func(url.Values)
		post    bool // client_secret_post instead of basic
		scope   string
	}{
		{name: "audience and scope", scope: "gateway-api"},
		{name: "audience only", form: func(f url.Values) { f.Del("scope") }},
		{name: "scope only", form: func(f url.Values) { f.Del("audience") }, scope: "gateway-api"},
		{name: "resource naming the audience", form: func(f url.Values) { f.Del("audience"); f.Del("scope"); f.Set("resource", "gateway-api") }},
		{name: "client_secret_post", post: true, scope: "gateway-api"},
		{name: "late in the subject's life: cut at its expiry", advance: 400 * time.Second, scope: "gateway-api"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := e.exchangeFormAt(t, user.AccessToken, c.advance, c.form)
			var resp *http.Response
			if c.post {
				f.Set("client_id", e.p.AdapterClientID())
				f.Set("client_secret", e.p.AdapterClientSecret())
				resp = e.postForm(t, e.p.TokenEndpoint(), f, "", "")
			} else {
				resp = e.postForm(t, e.p.TokenEndpoint(), f, e.p.AdapterClientID(), e.p.AdapterClientSecret())
			}
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, readBody(t, resp))
			}
			body := decodeJSON(t, resp)
			if body["issued_token_type"] != tokenTypeAccess || body["token_type"] != "Bearer" || body["refresh_token"] != nil {
				t.Errorf("response %v", body)
			}
			gw, _ := body["access_token"].(string)
			h, claims := e.verified(t, gw)
			if h.Type() != "at+jwt" {
				t.Errorf("typ %q", h.Type())
			}
			if got := claimStrings(claims["aud"]); !slices.Equal(got, []string{"gateway-api"}) {
				t.Errorf("aud %v, want [gateway-api]", got)
			}
			if claims["sub"] != "sub-alice" || claims["azp"] != "mcp-adapter" || claims["client_id"] != "mcp-adapter" || claims["iss"] != e.p.Issuer() {
				t.Errorf("claims %v", claims)
			}
			if got, _ := claims["scope"].(string); got != c.scope {
				t.Errorf("scope %q, want %q", got, c.scope)
			}
			// Never longer-lived than the subject token.
			exp, sexp := claims["exp"].(float64), subj["exp"].(float64)
			if exp > sexp {
				t.Errorf("exp %v is after the subject's %v", exp, sexp)
			}
			// DefaultExchangedTokenLifetime (the realm's 300 s), cut at the
			// subject's expiry.
			now := float64(e.clock.Now().Unix())
			wantLeft := min(sexp-now, DefaultExchangedTokenLifetime.Seconds())
			if body["expires_in"] != wantLeft || exp != now+wantLeft {
				t.Errorf("expires_in %v exp %v, want %v (the subject's exp %v)", body["expires_in"], exp, wantLeft, sexp)
			}
		})
	}

	t.Run("shorter exchanged lifetime", func(t *testing.T) {
		e := startEnv(t, "", func(c *Config) { c.ExchangedTokenLifetime = time.Minute })
		user := e.login(t, "alice", alicePassword)
		resp := e.exchange(t, user.AccessToken, nil)
		body := decodeJSON(t, resp)
		if body["expires_in"] != float64(60) {
			t.Errorf("expires_in %v, want 60", body["expires_in"])
		}
	})
}

func TestTokenExchangeRefusals(t *testing.T) {
	e := startEnv(t, "", nil)
	user := e.login(t, "alice", alicePassword)
	idToken := user.Extra("id_token").(string)

	gwResp := e.exchange(t, user.AccessToken, nil)
	gateway, _ := decodeJSON(t, gwResp)["access_token"].(string)
	if gateway == "" {
		t.Fatal("no gateway token to test with")
	}
	other := startEnv(t, "", nil)
	foreign := other.login(t, "alice", alicePassword).AccessToken

	secret := e.p.AdapterClientSecret()
	cases := []struct {
		name    string
		form    func(url.Values)
		user    string
		pass    string
		advance time.Duration
		status  int
		error   string
	}{
		{name: "wrong client secret", user: "mcp-adapter", pass: "wrong", status: 401, error: "invalid_client"},
		{name: "no client secret", form: func(f url.Values) { f.Set("client_id", "mcp-adapter") }, status: 401, error: "invalid_client"},
		{name: "wrong secret by post", form: func(f url.Values) { f.Set("client_id", "mcp-adapter"); f.Set("client_secret", "wrong") }, status: 401, error: "invalid_client"},
		{name: "unknown client", user: "stranger", pass: "x", status: 401, error: "invalid_client"},
		{name: "public host client", form: func(f url.Values) { f.Set("client_id", "mcp-host") }, status: 400, error: "unauthorized_client"},
		{name: "other audience", form: func(f url.Values) { f.Set("audience", "other-api") }, status: 400, error: "invalid_target"},
		{name: "two audiences", form: func(f url.Values) { f.Add("audience", "other-api") }, status: 400, error: "invalid_target"},
		{name: "other resource", form: func(f url.Values) { f.Set("resource", "https://elsewhere.example/api") }, status: 400, error: "invalid_target"},
		{name: "no target", form: func(f url.Values) { f.Del("audience"); f.Del("scope") }, status: 400, error: "invalid_target"},
		{name: "other scope", form: func(f url.Values) { f.Set("scope", "gateway-api openid") }, status: 400, error: "invalid_scope"},
		{name: "expired subject token", advance: DefaultAccessTokenLifetime + time.Second, status: 400, error: "invalid_request"},
		{name: "subject token for another audience", form: func(f url.Values) { f.Set("subject_token", gateway) }, status: 400, error: "invalid_request"},
		{name: "ID token as access token", form: func(f url.Values) { f.Set("subject_token", idToken) }, status: 400, error: "invalid_request"},
		{name: "ID token as ID token", form: func(f url.Values) {
			f.Set("subject_token", idToken)
			f.Set("subject_token_type", "urn:ietf:params:oauth:token-type:id_token")
		}, status: 400, error: "invalid_request"},
		{name: "another provider's token", form: func(f url.Values) { f.Set("subject_token", foreign) }, status: 400, error: "invalid_request"},
		{name: "not a token", form: func(f url.Values) { f.Set("subject_token", "not-a-token") }, status: 400, error: "invalid_request"},
		{name: "no subject token", form: func(f url.Values) { f.Del("subject_token") }, status: 400, error: "invalid_request"},
		{name: "refresh token requested", form: func(f url.Values) {
			f.Set("requested_token_type", "urn:ietf:params:oauth:token-type:refresh_token")
		}, status: 400, error: "invalid_request"},
		{name: "ID token requested", form: func(f url.Values) {
			f.Set("requested_token_type", "urn:ietf:params:oauth:token-type:id_token")
		}, status: 400, error: "invalid_request"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := e.exchangeFormAt(t, user.AccessToken, c.advance, c.form)
			u, p := c.user, c.pass
			if u == "" && f.Get("client_id") == "" {
				u, p = "mcp-adapter", secret
			}
			resp := e.postForm(t, e.p.TokenEndpoint(), f, u, p)
			body := decodeJSON(t, resp)
			if resp.StatusCode != c.status || body["error"] != c.error {
				t.Fatalf("status %d error %v (%v), want %d %s", resp.StatusCode, body["error"], body["error_description"], c.status, c.error)
			}
			if d, _ := body["error_description"].(string); d == "" {
				t.Error("no error_description")
			}
			if body["access_token"] != nil {
				t.Error("a token was issued")
			}
		})
	}

	// The same subject token still exchanges: every refusal above was about
	// the request, not a spent token.
	if resp := e.exchange(t, user.AccessToken, nil); resp.StatusCode != http.StatusOK {
		t.Errorf("control exchange: status %d", resp.StatusCode)
	}
}

func TestOtherGrantsRefused(t *testing.T) {
	e := startEnv(t, "", nil)
	secret := e.p.AdapterClientSecret()
	for _, grant := range []string{"refresh_token", "client_credentials", "urn:ietf:params:oauth:grant-type:jwt-bearer", "password"} {
		t.Run(grant, func(t *testing.T) {
			f := url.Values{"grant_type": {grant}, "refresh_token": {"x"}, "assertion": {"x"}, "username": {"alice"}, "password": {alicePassword}}
			resp := e.postForm(t, e.p.TokenEndpoint(), f, "mcp-adapter", secret)
			body := decodeJSON(t, resp)
			if resp.StatusCode < 400 || body["access_token"] != nil {
				t.Errorf("status %d body %v", resp.StatusCode, body)
			}
		})
	}
}
