package auth

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/internal/testutil"
)

const (
	testClientID     = "mcp-adapter"
	testClientSecret = "s3cr3t/with+odd=chars"
	testGWAudience   = "gateway-api"
)

// exchangeFixture is the test provider with a token endpoint that checks
// each exchange request and answers with a numbered token.
type exchangeFixture struct {
	p     *testProvider
	clock *testutil.Clock
	x     *Exchanger

	mu       sync.Mutex
	requests []url.Values
	problems []string
	answer   func(n int) (status int, body any)
}

func newExchangeFixture(t *testing.T, authMethods []string) *exchangeFixture {
	t.Helper()
	f := &exchangeFixture{p: newTestProvider(t), clock: newTestClock()}
	f.p.mu.Lock()
	f.p.authMethods = authMethods
	f.p.mu.Unlock()
	f.answer = func(n int) (int, any) {
		return http.StatusOK, map[string]any{
			"access_token":      fmt.Sprintf("gw-token-%d", n),
			"issued_token_type": TokenTypeAccessToken,
			"token_type":        "Bearer",
			"expires_in":        300,
		}
	}
	f.p.setTokenHandler(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		f.requests = append(f.requests, r.PostForm)
		n := len(f.requests)
		f.checkRequest(r)
		answer := f.answer
		f.mu.Unlock()
		status, body := answer(n)
		writeJSON(w, status, body)
	})
	x, err := NewExchanger(ExchangerConfig{
		Provider: f.p.provider(t), ClientID: testClientID, ClientSecret: testClientSecret,
		GatewayAudience: testGWAudience, Now: f.clock.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	f.x = x
	return f
}

// checkRequest records every way a request differs from an RFC 8693
// exchange by a confidential client. Called with f.mu held.
func (f *exchangeFixture) checkRequest(r *http.Request) {
	bad := func(format string, args ...any) { f.problems = append(f.problems, fmt.Sprintf(format, args...)) }
	if ct := r.Header.Get("Content-Type"); ct != "application/x-www-form-urlencoded" {
		bad("content type %q", ct)
	}
	if len(r.URL.Query()) != 0 {
		bad("query parameters %v", r.URL.Query())
	}
	want := map[string]string{
		"grant_type":           GrantTypeTokenExchange,
		"subject_token_type":   TokenTypeAccessToken,
		"requested_token_type": TokenTypeAccessToken,
		"audience":             testGWAudience,
		"scope":                testGWAudience,
	}
	for k, v := range want {
		if got := r.PostForm[k]; len(got) != 1 || got[0] != v {
			bad("%s = %v, want %q", k, got, v)
		}
	}
	if len(r.PostForm["subject_token"]) != 1 {
		bad("subject_token %d times", len(r.PostForm["subject_token"]))
	}
	id, secret, basic := r.BasicAuth()
	post := r.PostForm.Get("client_secret") != ""
	switch {
	case basic && post:
		bad("two client authentication methods")
	case basic:
		id, _ = url.QueryUnescape(id)
		secret, _ = url.QueryUnescape(secret)
		if id != testClientID || secret != testClientSecret {
			bad("basic credentials %q", id)
		}
	case post:
		if r.PostForm.Get("client_id") != testClientID || r.PostForm.Get("client_secret") != testClientSecret {
			bad("posted credentials for %q", r.PostForm.Get("client_id"))
		}
	default:
		bad("no client authentication")
	}
}

// count returns how many exchange requests were made, and fails t for
// every request that was not a proper exchange.
func (f *exchangeFixture) count(t *testing.T) int {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.problems {
		t.Errorf("exchange request: %s", p)
	}
	f.problems = nil
	return len(f.requests)
}

func caller(sub string, expiry time.Time) *Caller {
	return &Caller{Issuer: "https://idp.example", Subject: sub, Expiry: expiry}
}

func TestExchangeCachesPerCallerAndSubjectToken(t *testing.T) {
	for _, methods := range [][]string{nil, {"client_secret_basic", "client_secret_post"}, {"client_secret_post"}} {
		t.Run(fmt.Sprint(methods), func(t *testing.T) {
			f := newExchangeFixture(t, methods)
			ctx := context.Background()
			alice := caller("alice", f.clock.Now().Add(time.Hour))

			tok, err := f.x.Exchange(ctx, alice, "alice-token-1")
			if err != nil {
				t.Fatal(err)
			}
			if tok.AccessToken != "gw-token-1" || tok.TokenType != "Bearer" || !tok.Expiry.Equal(f.clock.Now().Add(300*time.Second)) {
				t.Fatalf("first exchange: %+v %s", tok.AccessToken, tok.Expiry)
			}
			f.mu.Lock()
			sent := f.requests[0].Get("subject_token")
			f.mu.Unlock()
			if sent != "alice-token-1" {
				t.Fatalf("subject_token sent was %q", sent)
			}

			// The same caller and subject token: served from the cache.
			again, err := f.x.Exchange(ctx, alice, "alice-token-1")
			if err != nil || again.AccessToken != "gw-token-1" {
				t.Fatalf("second exchange: %v %v", again.AccessToken, err)
			}
			if n := f.count(t); n != 1 {
				t.Fatalf("%d requests after a cached exchange, want 1", n)
			}

			// A new subject token (the user signed in again) or another
			// caller with the same token: exchanged afresh.
			if tok, _ := f.x.Exchange(ctx, alice, "alice-token-2"); tok.AccessToken != "gw-token-2" {
				t.Fatalf("new subject token got %q", tok.AccessToken)
			}
			if tok, _ := f.x.Exchange(ctx, caller("bob", f.clock.Now().Add(time.Hour)), "alice-token-1"); tok.AccessToken != "gw-token-3" {
				t.Fatalf("another caller got %q", tok.AccessToken)
			}
			if n := f.count(t); n != 3 {
				t.Fatalf("%d requests, want 3", n)
			}
		})
	}
}

func TestExchangeRefreshesBeforeExpiry(t *testing.T) {
	f := newExchangeFixture(t, nil)
	ctx := context.Background()
	alice := caller("alice", f.clock.Now().Add(time.Hour))
	if _, err := f.x.Exchange(ctx, alice, "alice-token"); err != nil {
		t.Fatal(err)
	}
	// 300 s token: reused up to 30 s before its expiry...
	f.clock.Advance(269 * time.Second)
	if tok, _ := f.x.Exchange(ctx, alice, "alice-token"); tok.AccessToken != "gw-token-1" || f.count(t) != 1 {
		t.Fatalf("at 269 s: %q after %d requests", tok.AccessToken, f.count(t))
	}
	// ...and exchanged again from then on.
	f.clock.Advance(time.Second)
	if tok, _ := f.x.Exchange(ctx, alice, "alice-token"); tok.AccessToken != "gw-token-2" || f.count(t) != 2 {
		t.Fatalf("at 270 s: %q after %d requests", tok.AccessToken, f.count(t))
	}
}

func TestExchangeNeverOutlivesTheSubjectToken(t *testing.T) {
	f := newExchangeFixture(t, nil)
	ctx := context.Background()
	// The user's token expires in 100 s; the provider grants 300 s.
	alice := caller("alice", f.clock.Now().Add(100*time.Second))
	tok, err := f.x.Exchange(ctx, alice, "alice-token")
	if err != nil {
		t.Fatal(err)
	}
	if !tok.Expiry.Equal(alice.Expiry) {
		t.Fatalf("expiry %s, want the subject token's %s", tok.Expiry, alice.Expiry)
	}
	f.clock.Advance(71 * time.Second)
	if _, err := f.x.Exchange(ctx, alice, "alice-token"); err != nil || f.count(t) != 2 {
		t.Fatalf("within 30 s of the subject's expiry: %v, %d requests", err, f.count(t))
	}
}

func TestExchangeForget(t *testing.T) {
	f := newExchangeFixture(t, nil)
	ctx := context.Background()
	alice, bob := caller("alice", f.clock.Now().Add(time.Hour)), caller("bob", f.clock.Now().Add(time.Hour))
	_, _ = f.x.Exchange(ctx, alice, "a")
	_, _ = f.x.Exchange(ctx, bob, "b")
	f.x.Forget(alice.ID())
	_, _ = f.x.Exchange(ctx, alice, "a")
	_, _ = f.x.Exchange(ctx, bob, "b")
	if n := f.count(t); n != 3 {
		t.Fatalf("%d requests, want 3 (alice twice, bob once)", n)
	}
}

func TestExchangeRefusalsAndBadAnswers(t *testing.T) {
	tests := []struct {
		name      string
		status    int
		body      any
		code      string
		apiStatus int
		detail    []string
	}{
		{"Keycloak offline-session refusal", 400, map[string]string{"error": "invalid_request", "error_description": "Invalid token"},
			CodeTokenExchangeRefused, 400, []string{"invalid_request: Invalid token", "sign in again"}},
		{"not within the token audience", 403, map[string]string{"error": "access_denied", "error_description": "Client is not within the token audience"},
			CodeTokenExchangeRefused, 403, []string{"access_denied: Client is not within the token audience"}},
		{"bad client credentials, no description", 401, map[string]string{"error": "invalid_client"},
			CodeTokenExchangeRefused, 401, []string{"(invalid_client)"}},
		{"server error without an OAuth body", 502, "upstream down",
			CodeTokenExchangeUnavailable, 503, []string{"could not be reached"}},
		{"an ID token issued", 200, map[string]any{"access_token": "x", "issued_token_type": "urn:ietf:params:oauth:token-type:id_token", "token_type": "N_A"},
			CodeTokenExchangeBadResponse, 502, []string{"not a usable access token"}},
		{"no access_token", 200, map[string]any{"issued_token_type": TokenTypeAccessToken, "token_type": "Bearer"},
			CodeTokenExchangeBadResponse, 502, nil},
		{"no issued_token_type", 200, map[string]any{"access_token": "x", "token_type": "Bearer"},
			CodeTokenExchangeBadResponse, 502, nil},
		{"negative expires_in", 200, map[string]any{"access_token": "x", "issued_token_type": TokenTypeAccessToken, "token_type": "Bearer", "expires_in": -5},
			CodeTokenExchangeBadResponse, 502, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newExchangeFixture(t, nil)
			f.answer = func(int) (int, any) { return tc.status, tc.body }
			_, err := f.x.Exchange(context.Background(), caller("alice", f.clock.Now().Add(time.Hour)), "alice-secret-token")
			var xe *ExchangeError
			if !errors.As(err, &xe) || xe.Code != tc.code {
				t.Fatalf("got %v, want %s", err, tc.code)
			}
			var ae *api.Error
			if !errors.As(err, &ae) {
				t.Fatal("does not convert to *api.Error")
			}
			if ae.Layer != api.LayerAdapter || ae.Code != tc.code || ae.Status != tc.apiStatus {
				t.Errorf("api error %+v", ae)
			}
			for _, d := range tc.detail {
				if !strings.Contains(ae.Detail, d) && !strings.Contains(err.Error(), d) {
					t.Errorf("neither %q nor %q says %q", ae.Detail, err.Error(), d)
				}
			}
			if tc.code == CodeTokenExchangeRefused {
				m := tc.body.(map[string]string)
				if xe.ProviderError != m["error"] || xe.ProviderDescription != m["error_description"] || xe.Status != tc.status {
					t.Errorf("provider's reason not carried: %+v", xe)
				}
			}
			for _, s := range []string{err.Error(), ae.Detail} {
				if strings.Contains(s, "alice-secret-token") || strings.Contains(s, testClientSecret) {
					t.Errorf("error text holds a secret: %s", s)
				}
			}
			// A refusal is not cached: the next call asks again.
			_, _ = f.x.Exchange(context.Background(), caller("alice", f.clock.Now().Add(time.Hour)), "alice-secret-token")
			if n := f.count(t); n != 2 {
				t.Errorf("%d requests after two failed exchanges, want 2", n)
			}
		})
	}
}

func TestExchangeProviderDown(t *testing.T) {
	f := newExchangeFixture(t, nil)
	f.p.srv.Close()
	_, err := f.x.Exchange(context.Background(), caller("alice", f.clock.Now().Add(time.Hour)), "t")
	var xe *ExchangeError
	if !errors.As(err, &xe) || xe.Code != CodeTokenExchangeUnavailable || errors.Unwrap(err) == nil {
		t.Fatalf("got %v", err)
	}
}

func TestExchangedTokenDoesNotPrint(t *testing.T) {
	tok := ExchangedToken{AccessToken: "gw-secret", TokenType: "Bearer", Expiry: time.Now()}
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("x", "token", tok)
	for _, s := range []string{fmt.Sprint(tok), fmt.Sprintf("%v %+v %#v", tok, tok, tok), buf.String()} {
		if strings.Contains(s, "gw-secret") {
			t.Errorf("token printed: %s", s)
		}
	}
}

// TestExchangeAhead: an exchange started ahead of need is joined by the
// call that needs it (one request to the provider), none is started while
// a fresh token is cached, and a call whose exchange ahead failed asks
// itself.
func TestExchangeAhead(t *testing.T) {
	for _, fails := range []bool{false, true} {
		t.Run(fmt.Sprintf("ahead fails %v", fails), func(t *testing.T) {
			f := newExchangeFixture(t, nil)
			ctx := context.Background()
			alice := caller("alice", f.clock.Now().Add(time.Hour))
			ok := f.answer
			arrived, release := make(chan struct{}), make(chan struct{})
			f.answer = func(n int) (int, any) {
				if n == 1 {
					close(arrived)
					<-release
					if fails {
						return http.StatusBadGateway, "upstream down"
					}
				}
				return ok(n)
			}
			f.x.Ahead(alice, "alice-token")
			<-arrived
			// A second one while the first is in flight starts nothing.
			f.x.Ahead(alice, "alice-token")
			got := make(chan ExchangedToken)
			go func() {
				tok, err := f.x.Exchange(ctx, alice, "alice-token")
				if err != nil {
					t.Errorf("exchange: %v", err)
				}
				got <- tok
			}()
			close(release)
			tok := <-got
			want, requests := "gw-token-1", 1
			if fails {
				want, requests = "gw-token-2", 2
			}
			if tok.AccessToken != want {
				t.Errorf("the call got %q, want %q", tok.AccessToken, want)
			}
			// Cached now: no exchange ahead, none for the call.
			f.x.Ahead(alice, "alice-token")
			if again, err := f.x.Exchange(ctx, alice, "alice-token"); err != nil || again.AccessToken != want {
				t.Errorf("cached exchange: %q %v", again.AccessToken, err)
			}
			if n := f.count(t); n != requests {
				t.Errorf("%d requests to the provider, want %d", n, requests)
			}
		})
	}
}

// panicOnce is a transport that panics at its first request and sends
// the others through base.
type panicOnce struct {
	base   http.RoundTripper
	panics atomic.Bool
}

func (p *panicOnce) RoundTrip(r *http.Request) (*http.Response, error) {
	if p.panics.CompareAndSwap(false, true) {
		panic("Bearer secret-subject-token")
	}
	return p.base.RoundTrip(r)
}

// TestExchangeAheadRecoversAPanic (issue 31 item 5): a panic in an
// exchange ahead of need, on the exchanger's own goroutine, no longer
// ends the process: it is told to OnPanic, the exchange ahead fails, and
// the call that joins it asks for itself and gets its token.
func TestExchangeAheadRecoversAPanic(t *testing.T) {
	f := newExchangeFixture(t, nil)
	told := make(chan any, 1)
	f.x.onPanic = func(v any) { told <- v }
	client := *f.x.provider.client
	client.Transport = &panicOnce{base: client.Transport}
	f.x.provider.client = &client
	alice := caller("alice", f.clock.Now().Add(time.Hour))

	f.x.Ahead(alice, "alice-token")
	select {
	case v := <-told:
		if v != "Bearer secret-subject-token" {
			t.Fatalf("OnPanic was told %v", v)
		}
	case <-time.After(time.Minute):
		t.Fatal("the panic ahead of need was not reported")
	}
	tok, err := f.x.Exchange(context.Background(), alice, "alice-token")
	if err != nil || tok.AccessToken != "gw-token-1" {
		t.Fatalf("the call after the panic ahead: %q, %v", tok.AccessToken, err)
	}
	if n := f.count(t); n != 1 {
		t.Errorf("%d exchange requests reached the provider, want 1 (the call's own)", n)
	}
}

// TestExchangeNoAnswer: a token endpoint that closes the connection without
// an answer is worded as one that did not answer, at its URL, and the
// text never holds the token sent.
func TestExchangeNoAnswer(t *testing.T) {
	f := newExchangeFixture(t, nil)
	f.p.setTokenHandler(func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	})
	meta, err := f.p.provider(t).Metadata(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.x.Exchange(t.Context(), caller("alice", f.clock.Now().Add(time.Hour)), "alice-secret-token")
	want := "token exchange failed (TOKEN_EXCHANGE_UNAVAILABLE): the OpenID provider at " + meta.TokenEndpoint + " did not answer: EOF"
	var xe *ExchangeError
	if !errors.As(err, &xe) || xe.Code != CodeTokenExchangeUnavailable || err.Error() != want {
		t.Fatalf("Exchange: %v\nwant %s", err, want)
	}
	if strings.Contains(err.Error(), "alice-secret-token") {
		t.Fatal("the text holds the token")
	}
}
