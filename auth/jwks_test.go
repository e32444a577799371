package auth

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwa"
)

// TestVerifierWithdrawnKeyGrace: a key the provider withdrew while its key
// set cannot be fetched stays trusted only until the grace after the last
// successful fetch; then every token, a cached one included, is refused
// provider-unavailable, and a request through the middleware is audited
// with that class. Once the key set can be read again (tried at the
// refresh interval, not the maximum age), the published key is accepted
// and the withdrawn one is not.
func TestVerifierWithdrawnKeyGrace(t *testing.T) {
	f := newVerifierFixture(t) // refresh 1 minute, maximum age and grace the defaults
	ctx := context.Background()
	longLived := func(jti string) string {
		return f.token(t, func(c map[string]any) {
			c["jti"] = jti
			c["exp"] = f.clock.Now().Add(3 * time.Hour).Unix()
		})
	}
	cached := longLived("cached")
	fetched := f.clock.Now()
	if _, err := f.v.Verify(ctx, cached); err != nil {
		t.Fatal(err)
	}

	// The provider withdraws rsa-1 and its key set cannot be read.
	rotated := newRSAKey(t, "rsa-2")
	f.p.publish(rotated)
	f.p.jwksDown.Store(true)

	for _, at := range []time.Duration{DefaultJWKSMaxAge + time.Minute, DefaultJWKSGrace - time.Minute} {
		f.clock.Set(fetched.Add(at))
		for _, tok := range []string{cached, longLived("fresh-" + at.String())} {
			if _, err := f.v.Verify(ctx, tok); err != nil {
				t.Fatalf("%s after the last fetch, within the grace: %v", at, err)
			}
		}
	}
	fetches := f.p.jwksFetches.Load()
	if fetches < 2 {
		t.Fatalf("%d JWKS fetches: the stale key set was not tried again", fetches)
	}

	// Past the grace: fail closed.
	f.clock.Advance(2 * time.Minute)
	for _, tok := range []string{cached, longLived("after-grace")} {
		_, err := f.v.Verify(ctx, tok)
		var te *TokenError
		if !errors.As(err, &te) || te.Class != ClassProviderUnavailable || te.Reason != ReasonJWKSTooOld {
			t.Fatalf("past the grace: %v, want provider-unavailable (%s)", err, ReasonJWKSTooOld)
		}
		if strings.Contains(err.Error(), tok) {
			t.Error("the refusal holds the token")
		}
	}

	// Through the middleware on a real TLS server: refused 503 with
	// Retry-After and no challenge (the token is not at fault; a 401 would
	// send the user to sign in again for an outage), audited as
	// provider-unavailable.
	var (
		mu     sync.Mutex
		audits []RefusalRecord
	)
	srv := httptest.NewTLSServer(Middleware(f.v, MiddlewareOptions{
		ResourceMetadataURL: "https://127.0.0.1:8443/.well-known/oauth-protected-resource/mcp",
		Logger:              slog.New(slog.DiscardHandler),
		Audit: func(r RefusalRecord) {
			mu.Lock()
			audits = append(audits, r)
			mu.Unlock()
		},
	})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })))
	t.Cleanup(srv.Close)
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/mcp", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+cached)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "10" ||
		resp.Header.Get("WWW-Authenticate") != "" {
		t.Fatalf("status %d, Retry-After %q, challenge %q; want 503, 10 and none", resp.StatusCode,
			resp.Header.Get("Retry-After"), resp.Header.Get("WWW-Authenticate"))
	}
	mu.Lock()
	if len(audits) != 1 || audits[0].Class != ClassProviderUnavailable || audits[0].Reason != ReasonJWKSTooOld {
		t.Errorf("audits %+v, want one provider-unavailable", audits)
	}
	mu.Unlock()

	// Refused requests do not hammer the provider: at most one attempt
	// per refresh interval.
	before := f.p.jwksFetches.Load()
	for range 20 {
		_, _ = f.v.Verify(ctx, cached)
	}
	if n := f.p.jwksFetches.Load() - before; n > 1 {
		t.Errorf("%d JWKS fetches for 20 refused tokens within one refresh interval", n)
	}

	// The provider answers again: after the refresh interval the key set
	// is read, the published key verifies, the withdrawn one does not.
	f.p.jwksDown.Store(false)
	f.clock.Advance(time.Minute)
	if _, err := f.v.Verify(ctx, sign(t, rotated, jwa.RS256, atHeader("rsa-2"), f.claims())); err != nil {
		t.Fatalf("the published key once the provider answers: %v", err)
	}
	if _, err := f.v.Verify(ctx, cached); !errors.Is(err, &TokenError{Class: ClassUnknownKey}) {
		t.Fatalf("the withdrawn key once the provider answers: %v, want unknown-key", err)
	}
}

// TestVerifierGraceConfigured: a configured grace bounds the held keys;
// one shorter than the maximum age is raised to it.
func TestVerifierGraceConfigured(t *testing.T) {
	f := newVerifierFixture(t)
	ctx := context.Background()
	v, err := NewVerifier(VerifierConfig{Provider: f.v.provider, Audience: testAudience, AllowedAlgs: []string{"RS256"},
		JWKSRefreshMin: time.Minute, JWKSMaxAge: 2 * time.Minute, JWKSGrace: 5 * time.Minute, Now: f.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	tok := f.token(t, nil)
	if _, err := v.Verify(ctx, tok); err != nil {
		t.Fatal(err)
	}
	f.p.jwksDown.Store(true)
	f.clock.Advance(4 * time.Minute)
	if _, err := v.Verify(ctx, tok); err != nil {
		t.Fatalf("within a 5 minute grace: %v", err)
	}
	f.clock.Advance(time.Minute)
	if _, err := v.Verify(ctx, tok); !errors.Is(err, &TokenError{Class: ClassProviderUnavailable, Reason: ReasonJWKSTooOld}) {
		t.Fatalf("past a 5 minute grace: %v", err)
	}

	short, err := NewVerifier(VerifierConfig{Provider: f.v.provider, Audience: testAudience, AllowedAlgs: []string{"RS256"},
		JWKSMaxAge: time.Hour, JWKSGrace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if short.grace != time.Hour {
		t.Errorf("grace %s under a maximum age of an hour, want the hour", short.grace)
	}
}
