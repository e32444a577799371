package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/lestrrat-go/jwx/v2/jws"

	"github.com/pdmcp/pdmcp/internal/testutil"
)

// testProvider is a small OpenID provider over real TLS on 127.0.0.1:
// discovery, a JWKS it can rotate, and a token endpoint whose answer each
// test writes. It counts what it serves.
type testProvider struct {
	t      testing.TB
	srv    *httptest.Server
	caFile string

	mu          sync.Mutex
	published   []jwk.Key
	authMethods []string
	token       http.HandlerFunc

	discoveryFetches atomic.Int64
	jwksFetches      atomic.Int64
	tokenRequests    atomic.Int64
	// jwksDown makes the JWKS answer 503, as a provider in trouble would.
	jwksDown atomic.Bool
}

func newTestProvider(t testing.TB) *testProvider {
	t.Helper()
	p := &testProvider{t: t}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		p.discoveryFetches.Add(1)
		p.mu.Lock()
		methods := p.authMethods
		p.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]any{
			"issuer":                                p.issuer(),
			"jwks_uri":                              p.issuer() + "/jwks",
			"token_endpoint":                        p.issuer() + "/token",
			"token_endpoint_auth_methods_supported": methods,
		})
	})
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, r *http.Request) {
		p.jwksFetches.Add(1)
		if p.jwksDown.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		set := jwk.NewSet()
		p.mu.Lock()
		for _, k := range p.published {
			if err := set.AddKey(k); err != nil {
				p.mu.Unlock()
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		}
		p.mu.Unlock()
		writeJSON(w, http.StatusOK, set)
	})
	mux.HandleFunc("POST /token", func(w http.ResponseWriter, r *http.Request) {
		p.tokenRequests.Add(1)
		p.mu.Lock()
		h := p.token
		p.mu.Unlock()
		if h == nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "unsupported_grant_type"})
			return
		}
		h(w, r)
	})
	p.srv = httptest.NewUnstartedServer(mux)
	p.srv.StartTLS()
	t.Cleanup(p.srv.Close)

	// The provider's CA file: the httptest certificate, and nothing else.
	p.caFile = filepath.Join(t.TempDir(), "idp-ca.pem")
	writePEM(t, p.caFile, "CERTIFICATE", p.srv.Certificate().Raw, 0o644)
	return p
}

func (p *testProvider) issuer() string { return p.srv.URL }

// publish replaces the JWKS with the public halves of keys.
func (p *testProvider) publish(keys ...*testKey) {
	p.t.Helper()
	var pubs []jwk.Key
	for _, k := range keys {
		pub, err := k.key.PublicKey()
		if err != nil {
			p.t.Fatal(err)
		}
		pubs = append(pubs, pub)
	}
	p.mu.Lock()
	p.published = pubs
	p.mu.Unlock()
}

func (p *testProvider) setTokenHandler(h http.HandlerFunc) {
	p.mu.Lock()
	p.token = h
	p.mu.Unlock()
}

func (p *testProvider) provider(t testing.TB) *Provider {
	t.Helper()
	client, err := NewProviderClient(p.caFile, 0)
	if err != nil {
		t.Fatal(err)
	}
	return NewProvider(p.issuer(), client)
}

// testKey is a private signing key with its kid and alg.
type testKey struct {
	key jwk.Key
	alg jwa.SignatureAlgorithm
}

func newRSAKey(t testing.TB, kid string) *testKey {
	t.Helper()
	raw, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return wrapKey(t, raw, kid, jwa.RS256)
}

func newECKey(t testing.TB, kid string) *testKey {
	t.Helper()
	raw, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return wrapKey(t, raw, kid, jwa.ES256)
}

func wrapKey(t testing.TB, raw any, kid string, alg jwa.SignatureAlgorithm) *testKey {
	t.Helper()
	k, err := jwk.FromRaw(raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Set(jwk.KeyIDKey, kid); err != nil {
		t.Fatal(err)
	}
	if err := k.Set(jwk.AlgorithmKey, alg); err != nil {
		t.Fatal(err)
	}
	if err := k.Set(jwk.KeyUsageKey, jwk.ForSignature); err != nil {
		t.Fatal(err)
	}
	return &testKey{key: k, alg: alg}
}

// sign makes a compact JWS over claims with exactly the header fields
// given (plus alg), signed by k with alg.
func sign(t testing.TB, k *testKey, alg jwa.SignatureAlgorithm, header, claims map[string]any) string {
	t.Helper()
	payload, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	h := jws.NewHeaders()
	for name, v := range header {
		if err := h.Set(name, v); err != nil {
			t.Fatal(err)
		}
	}
	// Sign with the raw key so the library adds nothing from the JWK.
	var raw any
	if err := k.key.Raw(&raw); err != nil {
		t.Fatal(err)
	}
	out, err := jws.Sign(payload, jws.WithKey(alg, raw, jws.WithProtectedHeaders(h)))
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// unsigned builds header.payload. with any header, no signature.
func unsigned(t *testing.T, header, claims map[string]any) string {
	t.Helper()
	return b64JSON(t, header) + "." + b64JSON(t, claims) + "."
}

func b64JSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// newTestClock is a clock tests move by hand, at the real time to the
// second.
func newTestClock() *testutil.Clock { return testutil.NewClock(time.Now().Truncate(time.Second)) }

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writePEM(t testing.TB, path, typ string, der []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode); err != nil {
		t.Fatal(err)
	}
}

// TestProviderDiscoveryRefusals: go-oidc's discovery through the provider
// client refuses an oversized document and does not follow a redirect.
func TestProviderDiscoveryRefusals(t *testing.T) {
	cases := []struct {
		name    string
		handler http.HandlerFunc
		want    string
	}{
		{"oversized document", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"issuer":"` + strings.Repeat("x", maxProviderBody+10) + `"}`))
		}, "larger than"},
		{"redirect", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "https://elsewhere.example/.well-known/openid-configuration", http.StatusFound)
		}, "302"},
		{"endpoint not https", func(w http.ResponseWriter, r *http.Request) {
			iss := "https://" + r.Host
			writeJSON(w, http.StatusOK, map[string]any{"issuer": iss, "jwks_uri": "http://" + r.Host + "/jwks", "token_endpoint": iss + "/token"})
		}, "jwks_uri"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewTLSServer(c.handler)
			defer srv.Close()
			caFile := filepath.Join(t.TempDir(), "ca.pem")
			writePEM(t, caFile, "CERTIFICATE", srv.Certificate().Raw, 0o600)
			client, err := NewProviderClient(caFile, 0)
			if err != nil {
				t.Fatal(err)
			}
			_, err = NewProvider(srv.URL, client).Metadata(context.Background())
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error with %q", err, c.want)
			}
		})
	}
}

// TestProviderNoAnswer: a provider that did not answer is worded so, at the
// URL asked, by discovery, the reachability probe and the key fetch; the
// refused request says its token was not checked, not that it was refused.
func TestProviderNoAnswer(t *testing.T) {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	writePEM(t, caFile, "CERTIFICATE", srv.Certificate().Raw, 0o600)
	issuer := srv.URL
	srv.Close() // nothing listens there any more
	client, err := NewProviderClient(caFile, 0)
	if err != nil {
		t.Fatal(err)
	}
	discovery := issuer + "/.well-known/openid-configuration"
	noAnswer := "the OpenID provider at " + discovery + " did not answer: nothing listens at " + strings.TrimPrefix(issuer, "https://") + " (ECONNREFUSED)"

	p := NewProvider(issuer, client)
	if err := p.Reachable(t.Context()); err == nil || err.Error() != noAnswer {
		t.Errorf("Reachable: %v\nwant %s", err, noAnswer)
	}
	if _, err := p.Metadata(t.Context()); err == nil || err.Error() != noAnswer {
		t.Errorf("Metadata: %v\nwant %s", err, noAnswer)
	}
	v := &Verifier{provider: p, now: time.Now}
	err = v.fetch(t.Context())
	want := "token not checked: provider-unavailable (" + ReasonDiscoveryFailed + "): " + noAnswer
	if !errors.Is(err, &TokenError{Class: ClassProviderUnavailable}) || err.Error() != want {
		t.Errorf("fetch: %v\nwant %s", err, want)
	}
}
