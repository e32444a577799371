package devidp

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
)

func TestDiscoveryDocuments(t *testing.T) {
	e := startEnv(t, "", nil)
	iss := e.p.Issuer()
	for _, path := range []string{"/.well-known/openid-configuration", "/.well-known/oauth-authorization-server"} {
		t.Run(path, func(t *testing.T) {
			resp := e.get(t, iss+path)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
				t.Errorf("Content-Type %q", ct)
			}
			d := decodeJSON(t, resp)
			wantStr := map[string]string{
				"issuer":                 iss,
				"authorization_endpoint": iss + "/authorize",
				"token_endpoint":         iss + "/oauth/token",
				"jwks_uri":               iss + "/keys",
			}
			for k, want := range wantStr {
				if d[k] != want {
					t.Errorf("%s = %v, want %q", k, d[k], want)
				}
			}
			wantList := map[string][]string{
				"code_challenge_methods_supported":      {"S256"},
				"response_types_supported":              {"code"},
				"grant_types_supported":                 {"authorization_code", "refresh_token", "urn:ietf:params:oauth:grant-type:token-exchange"},
				"token_endpoint_auth_methods_supported": {"none", "client_secret_basic", "client_secret_post"},
				"scopes_supported":                      {"openid", "profile", "email"},
				"id_token_signing_alg_values_supported": {"ES256"},
			}
			for k, want := range wantList {
				if got := claimStrings(d[k]); !slices.Equal(got, want) {
					t.Errorf("%s = %v, want %v", k, got, want)
				}
			}
			if slices.Contains(claimStrings(d["scopes_supported"]), "offline_access") {
				t.Error("offline_access is advertised")
			}
			if d["authorization_response_iss_parameter_supported"] != true {
				t.Error("RFC 9207 iss support is not advertised")
			}
			for _, k := range []string{"userinfo_endpoint", "introspection_endpoint", "revocation_endpoint", "device_authorization_endpoint", "end_session_endpoint"} {
				if _, ok := d[k]; ok {
					t.Errorf("%s is advertised but not served", k)
				}
			}
		})
	}
}

func TestDiscoveryWithIssuerPath(t *testing.T) {
	e := startEnv(t, "/realms/dev", nil)
	origin := e.srv.URL
	cases := []struct {
		path string
		want int
	}{
		{"/.well-known/oauth-authorization-server/realms/dev", http.StatusOK}, // RFC 8414 section 3
		{"/.well-known/openid-configuration/realms/dev", http.StatusOK},       // RFC 8414 section 5
		{"/realms/dev/.well-known/openid-configuration", http.StatusOK},       // OpenID Discovery
		{"/.well-known/oauth-authorization-server", http.StatusNotFound},      // another issuer
		{"/.well-known/oauth-authorization-server/realms/other", http.StatusNotFound},
	}
	for _, c := range cases {
		t.Run(c.path, func(t *testing.T) {
			resp := e.get(t, origin+c.path)
			if resp.StatusCode != c.want {
				t.Fatalf("status %d, want %d", resp.StatusCode, c.want)
			}
			if c.want == http.StatusOK {
				if d := decodeJSON(t, resp); d["issuer"] != e.p.Issuer() || d["token_endpoint"] != e.p.Issuer()+"/oauth/token" {
					t.Errorf("issuer %v, token_endpoint %v", d["issuer"], d["token_endpoint"])
				}
			}
		})
	}
	// The whole flow works under the path.
	tok := e.login(t, "alice", alicePassword)
	if _, claims := e.verified(t, tok.AccessToken); claims["iss"] != e.p.Issuer() {
		t.Errorf("iss %v", claims["iss"])
	}
}

func TestJWKS(t *testing.T) {
	e := startEnv(t, "", nil)
	set := e.fetchJWKS(t)
	if set.Len() != 1 {
		t.Fatalf("%d keys, want 1", set.Len())
	}
	k, _ := set.Key(0)
	if k.KeyID() != e.p.KeyID() || k.Algorithm().String() != "ES256" || k.KeyUsage() != "sig" {
		t.Errorf("key kid=%q alg=%v use=%q", k.KeyID(), k.Algorithm(), k.KeyUsage())
	}
	var raw any
	if err := k.Raw(&raw); err != nil {
		t.Fatal(err)
	}
	if _, ok := raw.(*ecdsa.PublicKey); !ok {
		t.Errorf("published key is %T, want a public ECDSA key", raw)
	}
	// JWKS() is the same document.
	local, err := parseJWKS(e.p.JWKS())
	if err != nil || local.Len() != 1 {
		t.Fatalf("JWKS(): %v (%d keys)", err, local.Len())
	}
	if lk, _ := local.Key(0); lk.KeyID() != k.KeyID() {
		t.Errorf("JWKS() kid %q, served %q", lk.KeyID(), k.KeyID())
	}
}

func TestLoginCodeFlow(t *testing.T) {
	e := startEnv(t, "", nil)
	tok := e.login(t, "alice", alicePassword, "openid", "email", "profile")

	if tok.RefreshToken == "" {
		t.Error("no refresh token was issued to the host client")
	}
	if got := tok.Extra("expires_in"); got != float64(600) {
		t.Errorf("expires_in = %v, want 600 (10 minutes, the realm's mcp-host lifespan)", got)
	}
	hdr, at := e.verified(t, tok.AccessToken)
	if hdr.Type() != "at+jwt" || hdr.KeyID() != e.p.KeyID() || hdr.Algorithm().String() != "ES256" {
		t.Errorf("access token header typ=%q kid=%q alg=%v", hdr.Type(), hdr.KeyID(), hdr.Algorithm())
	}
	checks := map[string]any{
		"iss":       e.p.Issuer(),
		"sub":       "sub-alice",
		"azp":       "mcp-host",
		"client_id": "mcp-host",
		"scope":     "openid email profile",
	}
	for k, want := range checks {
		if at[k] != want {
			t.Errorf("access token %s = %v, want %v", k, at[k], want)
		}
	}
	if got := claimStrings(at["aud"]); !slices.Equal(got, []string{"mcp-adapter"}) {
		t.Errorf("access token aud = %v, want [mcp-adapter]", got)
	}
	now := float64(e.clock.Now().Unix())
	if at["iat"] != now || at["exp"] != now+600 {
		t.Errorf("iat=%v exp=%v, want %v and +600", at["iat"], at["exp"], now)
	}
	if jti, _ := at["jti"].(string); jti == "" {
		t.Error("access token has no jti")
	}
	for _, k := range []string{"nonce", "email", "at_hash"} {
		if _, ok := at[k]; ok {
			t.Errorf("access token carries %s", k)
		}
	}

	idt, _ := tok.Extra("id_token").(string)
	if idt == "" {
		t.Fatal("no ID token though openid was granted")
	}
	ih, id := e.verified(t, idt)
	if ih.Type() != "JWT" {
		t.Errorf("ID token typ = %q, want JWT", ih.Type())
	}
	if got := claimStrings(id["aud"]); !slices.Equal(got, []string{"mcp-host"}) {
		t.Errorf("ID token aud = %v, want [mcp-host]", got)
	}
	if id["sub"] != "sub-alice" || id["azp"] != "mcp-host" || id["email"] != "alice@example.test" ||
		id["name"] != "Alice A" || id["preferred_username"] != "alice" {
		t.Errorf("ID token claims %v", id)
	}
	if n, _ := id["nonce"].(string); n == "" {
		t.Error("ID token has no nonce")
	}
	if id["at_hash"] != atHash(tok.AccessToken) {
		t.Errorf("at_hash %v does not match the access token", id["at_hash"])
	}
}

func TestIDTokenIsNotShapedLikeAccessToken(t *testing.T) {
	e := startEnv(t, "", nil)
	tok := e.login(t, "alice", alicePassword)
	ah, at := e.verified(t, tok.AccessToken)
	ih, id := e.verified(t, tok.Extra("id_token").(string))
	if ah.Type() == ih.Type() {
		t.Errorf("both tokens have typ %q", ah.Type())
	}
	if slices.Contains(claimStrings(id["aud"]), e.p.AdapterClientID()) {
		t.Error("the ID token's aud names the MCP server, so aud alone would not tell it apart")
	}
	if _, ok := id["nonce"]; !ok {
		t.Error("ID token has no nonce")
	}
	if _, ok := at["nonce"]; ok {
		t.Error("access token has a nonce")
	}
}

func TestNoIDTokenWithoutOpenID(t *testing.T) {
	e := startEnv(t, "", nil)
	tok := e.login(t, "bob", "bob-password", "email")
	if idt, _ := tok.Extra("id_token").(string); idt != "" {
		t.Error("an ID token was issued without the openid scope")
	}
	_, at := e.verified(t, tok.AccessToken)
	if at["sub"] != "bob" || at["scope"] != "email" {
		t.Errorf("sub=%v scope=%v", at["sub"], at["scope"])
	}
}

func TestOfflineAccessRefused(t *testing.T) {
	e := startEnv(t, "", nil)
	_, err := Login(t.Context(), e.client, LoginParams{
		Issuer: e.p.Issuer(), ClientID: e.p.HostClientID(), RedirectURL: hostRedirect,
		Username: "alice", Password: alicePassword, Scopes: []string{"openid", "offline_access"},
	})
	var ae *AuthorizationError
	if !errors.As(err, &ae) || ae.Code != "invalid_scope" {
		t.Fatalf("err = %v, want an invalid_scope AuthorizationError", err)
	}
}

func TestAuthorizationRefusals(t *testing.T) {
	e := startEnv(t, "", nil)
	cases := []struct {
		name  string
		edit  func(url.Values)
		error string
	}{
		{"no challenge", func(q url.Values) { q.Del("code_challenge"); q.Del("code_challenge_method") }, "invalid_request"},
		{"no method", func(q url.Values) { q.Del("code_challenge_method") }, "invalid_request"},
		{"prompt none", func(q url.Values) { q.Set("prompt", "none") }, "login_required"},
		{"plain", func(q url.Values) {
			q.Set("code_challenge", "plain-verifier-plain-verifier-plain-verifier-x")
			q.Set("code_challenge_method", "plain")
		}, "invalid_request"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q := e.authorizeQuery("v")
			c.edit(q)
			resp := e.get(t, e.p.Issuer()+"/authorize?"+q.Encode())
			if resp.StatusCode != http.StatusFound {
				t.Fatalf("status %d, want an error redirect", resp.StatusCode)
			}
			loc, _ := resp.Location()
			if !sameEndpoint(loc, mustURL(t, hostRedirect)) {
				t.Fatalf("redirected to %s, want the client's redirect URI", where(loc))
			}
			lq := loc.Query()
			if lq.Get("error") != c.error || lq.Get("code") != "" || lq.Get("state") != "st-1" || lq.Get("error_description") == "" {
				t.Errorf("redirect query %v", lq)
			}
		})
	}

	t.Run("verifier checked at the token endpoint", func(t *testing.T) {
		verifier := "correct-verifier-correct-verifier-correct-verifier"
		loc := e.signIn(t, e.authorizeQuery(verifier), "alice", alicePassword)
		code := loc.Query().Get("code")
		if code == "" || loc.Query().Get("state") != "st-1" {
			t.Fatalf("callback %v", loc.Query())
		}
		redeem := func(v string, withVerifier bool) *http.Response {
			f := url.Values{"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {hostRedirect}, "client_id": {"mcp-host"}}
			if withVerifier {
				f.Set("code_verifier", v)
			}
			return e.postForm(t, e.p.TokenEndpoint(), f, "", "")
		}
		for _, c := range []struct {
			name         string
			v            string
			withVerifier bool
			error        string
		}{
			{"missing verifier", "", false, "invalid_request"},
			{"wrong verifier", "wrong-verifier-wrong-verifier-wrong-verifier-wrong", true, "invalid_grant"},
		} {
			resp := redeem(c.v, c.withVerifier)
			if body := decodeJSON(t, resp); resp.StatusCode != http.StatusBadRequest || body["error"] != c.error || body["access_token"] != nil {
				t.Errorf("%s: status %d body %v, want 400 %s", c.name, resp.StatusCode, body, c.error)
			}
		}
		// The refusals were about the verifier: the right one still redeems,
		// and only once.
		if resp := redeem(verifier, true); resp.StatusCode != http.StatusOK {
			t.Fatalf("right verifier: status %d: %s", resp.StatusCode, readBody(t, resp))
		}
		if resp := redeem(verifier, true); resp.StatusCode != http.StatusBadRequest || decodeJSON(t, resp)["error"] != "invalid_grant" {
			t.Errorf("second redemption: status %d, want 400 invalid_grant", resp.StatusCode)
		}
	})
}

func TestRedirectRules(t *testing.T) {
	e := startEnv(t, "", nil)
	cases := redirectCases()
	for _, c := range cases {
		t.Run(c.uri, func(t *testing.T) {
			q := e.authorizeQuery("v")
			q.Set("redirect_uri", c.uri)
			resp := e.get(t, e.p.Issuer()+"/authorize?"+q.Encode())
			if c.ok {
				loc, err := resp.Location()
				if resp.StatusCode != http.StatusFound || err != nil || loc.Path != "/login" {
					t.Fatalf("status %d location %v: want a redirect to the sign-in form", resp.StatusCode, resp.Header.Get("Location"))
				}
				return
			}
			if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Location") != "" {
				t.Fatalf("status %d location %q: want 400 and no redirect", resp.StatusCode, resp.Header.Get("Location"))
			}
		})
	}
	t.Run("a code flow to a Codex-style URI", func(t *testing.T) {
		q := e.authorizeQuery("v")
		q.Set("redirect_uri", "http://127.0.0.1:18124/callback/abc1")
		loc := e.signIn(t, q, "alice", alicePassword)
		if loc.Host != "127.0.0.1:18124" || loc.Path != "/callback/abc1" || loc.Query().Get("code") == "" {
			t.Errorf("redirected to %s with %v", where(loc), loc.Query())
		}
	})
	t.Run("the adapter client cannot sign users in", func(t *testing.T) {
		q := e.authorizeQuery("v")
		q.Set("client_id", e.p.AdapterClientID())
		if resp := e.get(t, e.p.Issuer()+"/authorize?"+q.Encode()); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("status %d, want 400", resp.StatusCode)
		}
	})
}

func TestWrongPassword(t *testing.T) {
	e := startEnv(t, "", nil)
	resp := e.get(t, e.p.Issuer()+"/authorize?"+e.authorizeQuery("v").Encode())
	loginURL, err := resp.Location()
	if err != nil {
		t.Fatal(err)
	}
	page := e.get(t, loginURL.String())
	body := readBody(t, page)
	for _, want := range []string{`name="username"`, `name="password"`, `type="hidden" name="id"`, `method="post"`} {
		if !strings.Contains(body, want) {
			t.Errorf("sign-in page lacks %s", want)
		}
	}
	form, err := parseLoginForm(body, loginURL)
	if err != nil {
		t.Fatal(err)
	}

	// The last: a password typed into the username field.
	for _, c := range []struct{ user, pass string }{{"alice", "wrong"}, {"nobody", alicePassword}, {"alice", ""}, {alicePassword, ""}} {
		form.values.Set("username", c.user)
		form.values.Set("password", c.pass)
		resp := e.postForm(t, form.action.String(), form.values, "", "")
		again := readBody(t, resp)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Location") != "" {
			t.Fatalf("%s/%q: status %d location %q, want the form again", c.user, c.pass, resp.StatusCode, resp.Header.Get("Location"))
		}
		if pageError(again) == "" || !strings.Contains(again, `name="password"`) {
			t.Errorf("%s/%q: the form is not shown again with an error", c.user, c.pass)
		}
	}
	// The log says which refusals named a user, and never repeats what
	// was typed as an unknown username.
	logs := e.logs.String()
	if strings.Contains(logs, alicePassword) || strings.Contains(logs, "nobody") {
		t.Errorf("the log repeats what was typed as an unknown username:\n%s", logs)
	}
	if n := strings.Count(logs, "sign-in refused: wrong password"); n != 2 || !strings.Contains(logs, "username=alice") {
		t.Errorf("%d refusals of alice's sign-in logged with her name, want 2:\n%s", n, logs)
	}
	if n := strings.Count(logs, "sign-in refused: no such user"); n != 2 {
		t.Errorf("%d refusals of an unknown username logged, want 2:\n%s", n, logs)
	}
	// No code was issued: the sign-in is still pending, and the right
	// password on the same form completes it.
	form.values.Set("username", "alice")
	form.values.Set("password", alicePassword)
	if resp := e.postForm(t, form.action.String(), form.values, "", ""); resp.StatusCode != http.StatusFound {
		t.Fatalf("right password: status %d", resp.StatusCode)
	}
	// A finished sign-in cannot be submitted again.
	if resp := e.postForm(t, form.action.String(), form.values, "", ""); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("second submit: status %d, want 400", resp.StatusCode)
	}

	_, err = Login(t.Context(), e.client, LoginParams{
		Issuer: e.p.Issuer(), ClientID: e.p.HostClientID(), RedirectURL: hostRedirect,
		Username: "alice", Password: "wrong",
	})
	if !errors.Is(err, ErrLoginRefused) {
		t.Errorf("Login with a wrong password: %v, want ErrLoginRefused", err)
	}
}

func TestRotateKey(t *testing.T) {
	e := startEnv(t, "", nil)
	old := e.login(t, "alice", alicePassword)
	oldKID := e.p.KeyID()

	kid, err := e.p.RotateKey(true)
	if err != nil {
		t.Fatal(err)
	}
	if kid == oldKID || e.p.KeyID() != kid {
		t.Fatalf("RotateKey returned %q; KeyID %q; old %q", kid, e.p.KeyID(), oldKID)
	}
	if set := e.fetchJWKS(t); set.Len() != 2 {
		t.Errorf("JWKS has %d keys after a rotation keeping the old one, want 2", set.Len())
	}
	fresh := e.login(t, "alice", alicePassword)
	if h, _ := e.verified(t, fresh.AccessToken); h.KeyID() != kid {
		t.Errorf("new token kid %q, want %q", h.KeyID(), kid)
	}
	e.verified(t, old.AccessToken) // still verifies
	if resp := e.exchange(t, old.AccessToken, nil); resp.StatusCode != http.StatusOK {
		t.Errorf("exchange of a token under a kept key: status %d", resp.StatusCode)
	}

	kid2, err := e.p.RotateKey(false)
	if err != nil {
		t.Fatal(err)
	}
	set := e.fetchJWKS(t)
	if k, _ := set.Key(0); set.Len() != 1 || k.KeyID() != kid2 {
		t.Errorf("JWKS after a rotation dropping old keys: %d keys", set.Len())
	}
	if resp := e.exchange(t, old.AccessToken, nil); resp.StatusCode != http.StatusBadRequest || decodeJSON(t, resp)["error"] != "invalid_request" {
		t.Errorf("exchange of a token under a dropped key: status %d, want 400 invalid_request", resp.StatusCode)
	}
}

func TestRSAKey(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	e := startEnv(t, "", func(c *Config) { c.SigningKey = key })
	tok := e.login(t, "alice", alicePassword)
	h, _ := e.verified(t, tok.AccessToken)
	if h.Algorithm().String() != "RS256" || h.Type() != "at+jwt" {
		t.Errorf("alg %v typ %q", h.Algorithm(), h.Type())
	}
	if _, err := e.p.RotateKey(false); err != nil {
		t.Fatal(err)
	}
	set := e.fetchJWKS(t)
	k, _ := set.Key(0)
	if k.Algorithm().String() != "RS256" {
		t.Errorf("rotated key alg %v, want RS256", k.Algorithm())
	}
}

func TestConfigErrors(t *testing.T) {
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	base := func() Config { return Config{Issuer: "https://127.0.0.1:8443", Users: testUsers()} }
	cases := []struct {
		name string
		edit func(*Config)
	}{
		{"no issuer", func(c *Config) { c.Issuer = "" }},
		{"http issuer", func(c *Config) { c.Issuer = "http://127.0.0.1:8443" }},
		{"relative issuer", func(c *Config) { c.Issuer = "127.0.0.1:8443" }},
		{"trailing slash", func(c *Config) { c.Issuer = "https://127.0.0.1:8443/" }},
		{"query", func(c *Config) { c.Issuer = "https://127.0.0.1:8443?x=1" }},
		{"fragment", func(c *Config) { c.Issuer = "https://127.0.0.1:8443#x" }},
		{"user without password", func(c *Config) { c.Users = []User{{Username: "a"}} }},
		{"user without name", func(c *Config) { c.Users = []User{{Password: "p"}} }},
		{"duplicate user", func(c *Config) { c.Users = append(c.Users, User{Username: "alice", Password: "x"}) }},
		{"duplicate subject", func(c *Config) {
			c.Users = append(c.Users, User{Username: "carol", Password: "x", Subject: "sub-alice"})
		}},
		{"same client ids", func(c *Config) { c.HostClientID = "x"; c.AdapterClientID = "x" }},
		{"gateway audience is a client", func(c *Config) { c.GatewayAudience = DefaultAdapterClientID }},
		{"negative lifetime", func(c *Config) { c.AccessTokenLifetime = -1 }},
		{"P-384 key", func(c *Config) { c.SigningKey = p384 }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := base()
			c.edit(&cfg)
			if _, err := New(context.Background(), cfg); !errors.Is(err, ErrConfig) {
				t.Errorf("New: %v, want ErrConfig", err)
			}
		})
	}
	if _, err := New(context.Background(), base()); err != nil {
		t.Errorf("base config: %v", err)
	}
}

func TestDefaultsAndClose(t *testing.T) {
	p, err := New(context.Background(), Config{Issuer: "https://127.0.0.1:8443"})
	if err != nil {
		t.Fatal(err)
	}
	if p.HostClientID() != "mcp-host" || p.AdapterClientID() != "mcp-adapter" || p.GatewayAudience() != "gateway-api" {
		t.Errorf("defaults %q %q %q", p.HostClientID(), p.AdapterClientID(), p.GatewayAudience())
	}
	if len(p.AdapterClientSecret()) < 32 {
		t.Errorf("generated adapter secret is %d characters", len(p.AdapterClientSecret()))
	}
	e := startEnv(t, "", nil)
	if err := e.p.Close(); err != nil {
		t.Fatal(err)
	}
	if resp := e.get(t, e.p.Issuer()+"/.well-known/openid-configuration"); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("after Close: status %d, want 503", resp.StatusCode)
	}
}

// redirectCases are the host client's redirect rule with the default list
// (the realm's), as a table: exactly the registered URIs, or below the
// /callback/* wildcard, and nothing Keycloak would refuse.
func redirectCases() []struct {
	uri string
	ok  bool
} {
	return []struct {
		uri string
		ok  bool
	}{
		{"http://localhost:18124/callback", true},            // Claude Code
		{"http://127.0.0.1:18124/callback", true},            // Codex, the TypeScript SDK
		{"http://127.0.0.1:18124/callback/abc1", true},       // Codex's per-server segment
		{"http://localhost:18124/callback/a/b?keep=1", true}, // a wildcard ignores the query
		{"http://127.0.0.1:18124/oauth/callback", true},      // Gemini CLI, mcp-remote
		{"http://localhost:18124/oauth/callback", true},
		{"http://127.0.0.1:18124/mcp/oauth/callback", true}, // opencode
		{"http://localhost:18124/mcp/oauth/callback", true},
		{"http://127.0.0.1:40123/callback", false},      // another port
		{"http://127.0.0.1:40123/callback/abc1", false}, // another port under the wildcard
		{"http://localhost/callback", false},            // no port
		{"http://127.0.0.1:18124/", false},              // another path
		{"http://127.0.0.1:18124/callback/", true},      // below the wildcard, as at Keycloak
		{"http://127.0.0.1:18124/callbackx", false},
		{"http://127.0.0.1:18124/oauth/callback/x", false},   // no wildcard there
		{"http://127.0.0.1:18124/oauth/callback?x=1", false}, // an exact entry has no query
		{"http://127.0.0.1:18124/OAuth/callback", false},
		{"http://127.0.0.1:18124/callback/../oauth/x", false},
		{"http://127.0.0.1:18124/callback/%2e%2e/x", false},
		{"https://127.0.0.1:18124/callback", false},
		{"http://[::1]:18124/callback", false},
		{"http://127.0.0.2:18124/callback", false},
		{"https://evil.example/callback", false},
		{"http://localhost:18124@evil.example/callback", false},
		{"http://user@localhost:18124/callback", false},
		{"http://localhost:18124/callback#frag", false},
		{"http://localhost:18124/callback/x#frag", false},
		{"localhost:18124/callback", false},
		{"", false},
	}
}

// TestMatchRedirect tests the rule alone; TestRedirectRules tests it as
// served, where the library's own checks also apply.
func TestMatchRedirect(t *testing.T) {
	for _, c := range redirectCases() {
		if err := matchRedirect(DefaultHostRedirectURIs(), c.uri); (err == nil) != c.ok {
			t.Errorf("matchRedirect(%q) = %v, want ok=%v", c.uri, err, c.ok)
		}
	}
}

func TestHostRedirectURIsConfig(t *testing.T) {
	for _, tc := range []struct {
		list []string
		ok   bool
	}{
		{[]string{"http://127.0.0.1:9000/cb"}, true},
		{[]string{"http://127.0.0.1:9000/cb/*"}, true},
		{[]string{"http://127.0.0.1:9000/*/cb"}, false},
		{[]string{"http://127.0.0.1:9000/cb#x"}, false},
		{[]string{"http://u@127.0.0.1:9000/cb"}, false},
		{[]string{"/cb"}, false},
		{[]string{"http://127.0.0.1:9000/cb?x=1*"}, false},
	} {
		_, err := New(context.Background(), Config{Issuer: "https://127.0.0.1:8443", HostRedirectURIs: tc.list})
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrConfig)) {
			t.Errorf("HostRedirectURIs %q: %v, want ok=%v", tc.list, err, tc.ok)
		}
	}
	// A configured list replaces the default one.
	p, err := New(context.Background(), Config{Issuer: "https://127.0.0.1:8443", HostRedirectURIs: []string{"http://127.0.0.1:9000/cb"}})
	if err != nil {
		t.Fatal(err)
	}
	if matchRedirect(p.host.redirectURIs, "http://127.0.0.1:9000/cb") != nil || matchRedirect(p.host.redirectURIs, "http://127.0.0.1:18124/callback") == nil {
		t.Errorf("configured list %v not applied", p.host.redirectURIs)
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
