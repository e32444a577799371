package devidp

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"github.com/pdmcp/pdmcp/internal/testutil"
)

// refresh redeems a refresh token as the host client (a public client: its
// id in the form, no secret).
func (e *env) refresh(t *testing.T, refreshToken string, edit func(url.Values)) (*http.Response, map[string]any) {
	t.Helper()
	f := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {refreshToken}, "client_id": {e.p.HostClientID()}}
	if edit != nil {
		edit(f)
	}
	resp := e.postForm(t, e.p.TokenEndpoint(), f, "", "")
	return resp, decodeJSON(t, resp)
}

// TestIssOnEveryAuthorizationResponse: the code redirect and every error
// redirect carry iss = the issuer (RFC 9207), in the query.
func TestIssOnEveryAuthorizationResponse(t *testing.T) {
	e := startEnv(t, "/realms/dev", nil)
	verifier := oauth2.GenerateVerifier()

	loc := e.signIn(t, e.authorizeQuery(verifier), "alice", alicePassword)
	if loc.Query().Get("code") == "" || loc.Query().Get("iss") != e.p.Issuer() {
		t.Errorf("code redirect %s: want a code and iss=%s", loc.Redacted(), e.p.Issuer())
	}

	for name, edit := range map[string]func(url.Values){
		"offline_access":         func(q url.Values) { q.Set("scope", "openid offline_access") },
		"plain PKCE":             func(q url.Values) { q.Set("code_challenge_method", "plain") },
		"prompt=none":            func(q url.Values) { q.Set("prompt", "none") },
		"response_mode fragment": func(q url.Values) { q.Set("response_mode", "fragment") },
		"response_mode form":     func(q url.Values) { q.Set("response_mode", "form_post") },
	} {
		t.Run(name, func(t *testing.T) {
			q := e.authorizeQuery(verifier)
			edit(q)
			resp := e.get(t, e.p.Issuer()+"/authorize?"+q.Encode())
			loc, err := resp.Location()
			if resp.StatusCode != http.StatusFound || err != nil {
				t.Fatalf("status %d, Location %v: want an error redirect", resp.StatusCode, err)
			}
			if !strings.HasPrefix(loc.String(), hostRedirect+"?") || loc.Fragment != "" {
				t.Fatalf("redirect %s: want the client's redirect URI with a query", loc)
			}
			if got := loc.Query(); got.Get("error") == "" || got.Get("state") != "st-1" || got.Get("iss") != e.p.Issuer() {
				t.Errorf("error redirect %s: want error, state and iss=%s", loc, e.p.Issuer())
			}
		})
	}
	// Redirects within the provider (to its sign-in page) carry no iss.
	resp := e.get(t, e.p.Issuer()+"/authorize?"+e.authorizeQuery(verifier).Encode())
	if loc, _ := resp.Location(); loc == nil || loc.Query().Has("iss") {
		t.Errorf("redirect to the sign-in page: %v", loc)
	}
}

// TestRefreshTokensRotate: the host client's refresh token gets a new
// access token (and ID token) after the first expired, and a new refresh
// token; the spent one is refused; the new access token exchanges.
func TestRefreshTokensRotate(t *testing.T) {
	e := startEnv(t, "", func(c *Config) { c.AccessTokenLifetime = time.Minute })
	first := e.login(t, "alice", alicePassword, "openid", "email")
	if first.RefreshToken == "" {
		t.Fatal("no refresh token")
	}
	e.clock.Advance(2 * time.Minute)
	if resp := e.exchange(t, first.AccessToken, nil); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("an expired access token still exchanges: %d", resp.StatusCode)
	}

	resp, body := e.refresh(t, first.RefreshToken, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("refresh: %d %v", resp.StatusCode, body)
	}
	at, _ := body["access_token"].(string)
	next, _ := body["refresh_token"].(string)
	if at == "" || next == "" || next == first.RefreshToken || body["expires_in"] != float64(60) || body["token_type"] != "Bearer" {
		t.Fatalf("refresh response %v", redactTokens(body))
	}
	h, claims := e.verified(t, at)
	if h.Type() != "at+jwt" || claims["sub"] != "sub-alice" || claims["scope"] != "openid email" ||
		claims["azp"] != "mcp-host" || claimStrings(claims["aud"])[0] != "mcp-adapter" || claims["iat"] != float64(e.clock.Now().Unix()) {
		t.Errorf("refreshed access token %v %v", h.Type(), claims)
	}
	idt, _ := body["id_token"].(string)
	if idt == "" {
		t.Fatal("no ID token on refresh though openid was granted")
	}
	if _, id := e.verified(t, idt); id["sub"] != "sub-alice" || id["at_hash"] != atHash(at) || claimStrings(id["aud"])[0] != "mcp-host" {
		t.Errorf("refreshed ID token %v", id)
	}
	if resp := e.exchange(t, at, nil); resp.StatusCode != http.StatusOK {
		t.Errorf("the refreshed access token does not exchange: %d", resp.StatusCode)
	}

	// The spent token is refused; the new one works once.
	if resp, body := e.refresh(t, first.RefreshToken, nil); resp.StatusCode != http.StatusBadRequest || body["error"] != "invalid_grant" {
		t.Errorf("reused refresh token: %d %v", resp.StatusCode, redactTokens(body))
	}
	if resp, body := e.refresh(t, next, func(f url.Values) { f.Set("scope", "openid profile") }); resp.StatusCode != http.StatusBadRequest || body["error"] != "invalid_scope" {
		t.Errorf("refresh asking for more scope: %d %v", resp.StatusCode, redactTokens(body))
	}
	resp, body = e.refresh(t, next, func(f url.Values) { f.Set("scope", "openid") })
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("second refresh (narrower scope): %d %v", resp.StatusCode, redactTokens(body))
	}
	if _, c := e.verified(t, body["access_token"].(string)); c["scope"] != "openid" {
		t.Errorf("narrowed refresh scope %v", c["scope"])
	}

	// Only the host client redeems refresh tokens; an unknown one is refused.
	third := body["refresh_token"].(string)
	f := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {third}}
	if resp := e.postForm(t, e.p.TokenEndpoint(), f, e.p.AdapterClientID(), e.p.AdapterClientSecret()); resp.StatusCode < 400 {
		t.Errorf("the adapter client redeemed a refresh token: %d", resp.StatusCode)
	}
	if resp, _ := e.refresh(t, "not-a-token", nil); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("unknown refresh token: %d", resp.StatusCode)
	}
	if strings.Contains(e.logs.String(), third) || strings.Contains(e.logs.String(), first.RefreshToken) {
		t.Error("a refresh token reached the log")
	}
}

// TestRefreshThroughOAuth2Client: x/oauth2's token source, as a host uses
// it, refreshes an expired token by itself, again and again.
func TestRefreshThroughOAuth2Client(t *testing.T) {
	e := startEnv(t, "", func(c *Config) { c.AccessTokenLifetime = time.Minute })
	tok := e.login(t, "bob", "bob-password")
	cfg := &oauth2.Config{ClientID: e.p.HostClientID(), Scopes: []string{"openid"},
		Endpoint: oauth2.Endpoint{TokenURL: e.p.TokenEndpoint(), AuthStyle: oauth2.AuthStyleInParams}}
	ctx := context.WithValue(t.Context(), oauth2.HTTPClient, e.client)
	seen := map[string]bool{tok.AccessToken: true}
	for i := range 3 {
		tok.Expiry = time.Now().Add(-time.Second) // as a host sees it after a while
		fresh, err := cfg.TokenSource(ctx, tok).Token()
		if err != nil {
			t.Fatalf("refresh %d: %v", i, err)
		}
		if seen[fresh.AccessToken] || fresh.RefreshToken == tok.RefreshToken {
			t.Fatalf("refresh %d gave no new tokens", i)
		}
		seen[fresh.AccessToken] = true
		tok = fresh
	}
}

// TestRefreshTokenLifetimes: an unused refresh token expires after
// RefreshTokenLifetime, and refreshing cannot keep a sign-in alive past
// SignInLifetime.
func TestRefreshTokenLifetimes(t *testing.T) {
	e := startEnv(t, "", func(c *Config) {
		c.AccessTokenLifetime = time.Minute
		c.RefreshTokenLifetime = time.Hour
		c.SignInLifetime = 90 * time.Minute
	})
	idle := e.login(t, "alice", alicePassword)
	tok := e.login(t, "bob", "bob-password")
	e.clock.Advance(50 * time.Minute)
	_, body := e.refresh(t, tok.RefreshToken, nil)
	rt, _ := body["refresh_token"].(string)
	if rt == "" {
		t.Fatalf("refresh within its life: %v", redactTokens(body))
	}
	e.clock.Advance(11 * time.Minute)
	if resp, body := e.refresh(t, idle.RefreshToken, nil); resp.StatusCode != http.StatusBadRequest || body["error"] != "invalid_grant" {
		t.Errorf("refresh token unused for 61 minutes: %d %v", resp.StatusCode, redactTokens(body))
	}
	e.clock.Advance(30 * time.Minute) // 91 minutes after bob signed in
	if resp, body := e.refresh(t, rt, nil); resp.StatusCode != http.StatusBadRequest || body["error"] != "invalid_grant" {
		t.Errorf("refresh past the sign-in's life: %d %v", resp.StatusCode, redactTokens(body))
	}
}

func redactTokens(m map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		if strings.HasSuffix(k, "_token") {
			v = "<redacted>"
		}
		out[k] = v
	}
	return out
}

// restartable is a provider served at one fixed URL that can be stopped
// and started again on the same state folder, as `pdmcp dev` is.
type restartable struct {
	*env
	cfg     Config
	current atomic.Pointer[Provider]
}

func startRestartable(t *testing.T) *restartable {
	t.Helper()
	r := &restartable{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.current.Load().ServeHTTP(w, req)
	}))
	clock := newTestClock()
	logs := &testutil.LogBuffer{}
	r.cfg = Config{Issuer: "https://" + srv.Listener.Addr().String(), Users: testUsers(), AdapterClientSecret: "adapter-secret",
		Now: clock.Now, StateDir: filepath.Join(t.TempDir(), "idp"),
		Logger: slog.New(slog.NewTextHandler(io.MultiWriter(logs, t.Output()), nil))}
	p, err := New(context.Background(), r.cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.current.Store(p)
	srv.StartTLS()
	t.Cleanup(func() { srv.Close(); r.current.Load().Close() })
	nf := *srv.Client()
	nf.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	r.env = &env{p: p, srv: srv, clock: clock, client: srv.Client(), noFollow: &nf, logs: logs}
	return r
}

// restart stops the provider (Close forgets everything in memory) and
// starts a new one on the same folder.
func (r *restartable) restart(t *testing.T) {
	t.Helper()
	if err := r.current.Load().Close(); err != nil {
		t.Fatal(err)
	}
	p, err := New(context.Background(), r.cfg)
	if err != nil {
		t.Fatalf("start again on the same state: %v", err)
	}
	r.current.Store(p)
	r.env.p = p
}

// TestRestartKeepsTokensAndSignIns: a provider started again on its state
// folder has the same signing key, accepts the access token issued before
// for exchange, redeems the refresh token issued before (once), and
// redeems a code issued before. The state file is private and holds no
// refresh token in the clear.
func TestRestartKeepsTokensAndSignIns(t *testing.T) {
	r := startRestartable(t)
	kid := r.p.KeyID()
	tok := r.login(t, "alice", alicePassword)
	verifier := oauth2.GenerateVerifier()
	loc := r.signIn(t, r.authorizeQuery(verifier), "bob", "bob-password")
	code := loc.Query().Get("code")

	r.restart(t)
	if r.p.KeyID() != kid {
		t.Fatalf("signing key changed across the restart: %s -> %s", kid, r.p.KeyID())
	}
	r.verified(t, tok.AccessToken) // the old token verifies against the new JWKS
	if resp := r.exchange(t, tok.AccessToken, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("the access token issued before the restart does not exchange: %d %s", resp.StatusCode, readBody(t, resp))
	}
	resp, body := r.refresh(t, tok.RefreshToken, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the refresh token issued before the restart: %d %v", resp.StatusCode, redactTokens(body))
	}
	next := body["refresh_token"].(string)
	f := url.Values{"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {hostRedirect},
		"client_id": {r.p.HostClientID()}, "code_verifier": {verifier}}
	if resp := r.postForm(t, r.p.TokenEndpoint(), f, "", ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("a code issued before the restart: %d %s", resp.StatusCode, readBody(t, resp))
	}

	// The rotation survives a second restart: the spent token stays spent.
	r.restart(t)
	if resp, _ := r.refresh(t, tok.RefreshToken, nil); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a refresh token spent before the restart was redeemed again: %d", resp.StatusCode)
	}
	if resp, body := r.refresh(t, next, nil); resp.StatusCode != http.StatusOK {
		t.Errorf("the rotated refresh token after a second restart: %d %v", resp.StatusCode, redactTokens(body))
	}

	path := filepath.Join(r.cfg.StateDir, stateFileName)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("state file mode %04o, want 0600", fi.Mode().Perm())
	}
	if di, _ := os.Stat(r.cfg.StateDir); di.Mode().Perm() != 0o700 {
		t.Errorf("state folder mode %04o, want 0700", di.Mode().Perm())
	}
	b, _ := os.ReadFile(path)
	if strings.Contains(string(b), next) || strings.Contains(string(b), tok.RefreshToken) || strings.Contains(string(b), tok.AccessToken) {
		t.Error("the state file holds a token in the clear")
	}

	// A state file others may read is refused, not used.
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	want := "devidp: state file: " + path + " has mode 0644: group and others must have no access (chmod 600)"
	if _, err := New(context.Background(), r.cfg); err == nil || err.Error() != want {
		t.Errorf("a world-readable state file: %v\nwant %s", err, want)
	}
	// A signing key and a state folder together are refused.
	cfg := r.cfg
	cfg.SigningKey = r.p.keys.signing().priv
	if _, err := New(context.Background(), cfg); !errors.Is(err, ErrConfig) {
		t.Errorf("SigningKey with StateDir: %v", err)
	}
}
