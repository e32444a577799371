package devidp

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/lestrrat-go/jwx/v2/jws"
	"github.com/lestrrat-go/jwx/v2/jwt"
	"golang.org/x/oauth2"

	"github.com/pdmcp/pdmcp/internal/testutil"
)

const (
	hostRedirect  = "http://localhost:18124/callback"
	alicePassword = "alice-password"
)

// newTestClock is a clock tests move by hand. It starts at the real time
// because the op library checks a subject token's expiry against the real
// clock too.
func newTestClock() *testutil.Clock { return testutil.NewClock(time.Now().Truncate(time.Second)) }

// env is a provider served over TLS on 127.0.0.1.
type env struct {
	p        *Provider
	srv      *httptest.Server
	clock    *testutil.Clock
	client   *http.Client // trusts the server, follows redirects
	noFollow *http.Client
	logs     *testutil.LogBuffer
}

func testUsers() []User {
	return []User{
		{Username: "alice", Password: alicePassword, Subject: "sub-alice", Email: "alice@example.test", Name: "Alice A"},
		{Username: "bob", Password: "bob-password"},
	}
}

// startEnv starts a provider at https://127.0.0.1:<port><path>.
func startEnv(t *testing.T, path string, mutate func(*Config)) *env {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	clock := newTestClock()
	logs := &testutil.LogBuffer{}
	cfg := Config{
		Issuer:              "https://" + srv.Listener.Addr().String() + path,
		Users:               testUsers(),
		AdapterClientSecret: "adapter-secret",
		Now:                 clock.Now,
		Logger:              slog.New(slog.NewTextHandler(io.MultiWriter(logs, t.Output()), nil)),
	}
	if mutate != nil {
		mutate(&cfg)
	}
	p, err := New(context.Background(), cfg)
	if err != nil {
		srv.Close()
		t.Fatalf("New: %v", err)
	}
	srv.Config.Handler = p
	srv.StartTLS()
	t.Cleanup(func() {
		srv.Close()
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		// Tokens are secrets: none may reach the provider's log.
		if strings.Contains(logs.String(), "eyJ") {
			t.Errorf("a token reached the log:\n%s", logs.String())
		}
	})
	hc := srv.Client()
	nf := *hc
	nf.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &env{p: p, srv: srv, clock: clock, client: hc, noFollow: &nf, logs: logs}
}

func (e *env) login(t *testing.T, username, password string, scopes ...string) *oauth2.Token {
	t.Helper()
	tok, err := Login(t.Context(), e.client, LoginParams{
		Issuer: e.p.Issuer(), ClientID: e.p.HostClientID(), RedirectURL: hostRedirect,
		Username: username, Password: password, Scopes: scopes,
	})
	if err != nil {
		t.Fatalf("Login(%s): %v", username, err)
	}
	return tok
}

// get fetches u with the no-redirect client.
func (e *env) get(t *testing.T, u string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := e.noFollow.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// postForm posts form to u with the no-redirect client; user and pass set
// HTTP Basic when user is not empty.
func (e *env) postForm(t *testing.T, u string, form url.Values, user, pass string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, u, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	resp, err := e.noFollow.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", u, err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// authorizeQuery is a valid authorization request for the host client.
func (e *env) authorizeQuery(verifier string) url.Values {
	return url.Values{
		"response_type":         {"code"},
		"client_id":             {e.p.HostClientID()},
		"redirect_uri":          {hostRedirect},
		"scope":                 {"openid"},
		"state":                 {"st-1"},
		"code_challenge":        {oauth2.S256ChallengeFromVerifier(verifier)},
		"code_challenge_method": {"S256"},
	}
}

// signIn runs an authorization request and the sign-in form by hand and
// returns the redirect to the loopback URI.
func (e *env) signIn(t *testing.T, q url.Values, username, password string) *url.URL {
	t.Helper()
	resp := e.get(t, e.p.Issuer()+"/authorize?"+q.Encode())
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("authorize: status %d: %s", resp.StatusCode, readBody(t, resp))
	}
	loginURL, err := resp.Location()
	if err != nil {
		t.Fatal(err)
	}
	page := e.get(t, loginURL.String())
	if page.StatusCode != http.StatusOK {
		t.Fatalf("login page: status %d", page.StatusCode)
	}
	form, err := parseLoginForm(readBody(t, page), loginURL)
	if err != nil {
		t.Fatal(err)
	}
	form.values.Set("username", username)
	form.values.Set("password", password)
	resp = e.postForm(t, form.action.String(), form.values, "", "")
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("login post: status %d: %s", resp.StatusCode, readBody(t, resp))
	}
	cb, err := resp.Location()
	if err != nil {
		t.Fatal(err)
	}
	// The library's callback issues the code.
	resp = e.get(t, cb.String())
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("callback: status %d: %s", resp.StatusCode, readBody(t, resp))
	}
	loc, err := resp.Location()
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func readBody(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func decodeJSON(t *testing.T, resp *http.Response) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatalf("decode JSON (status %d): %v", resp.StatusCode, err)
	}
	return m
}

// fetchJWKS reads the provider's published key set over HTTPS.
func (e *env) fetchJWKS(t *testing.T) jwk.Set {
	t.Helper()
	set, err := jwk.Fetch(t.Context(), e.p.JWKSURL(), jwk.WithHTTPClient(e.client))
	if err != nil {
		t.Fatalf("fetch JWKS: %v", err)
	}
	return set
}

// verified checks token's signature against the published JWKS and returns
// its protected header and claims. Times are checked against the test clock.
func (e *env) verified(t *testing.T, token string) (jws.Headers, map[string]any) {
	t.Helper()
	set := e.fetchJWKS(t)
	if _, err := jws.Verify([]byte(token), jws.WithKeySet(set, jws.WithRequireKid(true))); err != nil {
		t.Fatalf("signature does not verify against the JWKS: %v", err)
	}
	msg, err := jws.Parse([]byte(token))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jwt.Parse([]byte(token), jwt.WithKeySet(set), jwt.WithClock(jwt.ClockFunc(e.clock.Now))); err != nil {
		t.Fatalf("jwt validation: %v", err)
	}
	var claims map[string]any
	if err := json.Unmarshal(msg.Payload(), &claims); err != nil {
		t.Fatal(err)
	}
	return msg.Signatures()[0].ProtectedHeaders(), claims
}

// claimStrings reads a string or string-array claim as a slice.
func claimStrings(v any) []string {
	switch x := v.(type) {
	case string:
		return []string{x}
	case []any:
		out := make([]string, 0, len(x))
		for _, e := range x {
			s, _ := e.(string)
			out = append(out, s)
		}
		return out
	}
	return nil
}

func atHash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return base64.RawURLEncoding.EncodeToString(sum[:len(sum)/2])
}
