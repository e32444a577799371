//go:build keycloak

package keycloaktest

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/auth/devidp"
	"github.com/pdmcp/pdmcp/internal/testutil"
)

// TestRedirectParity sends the same authorization request, one redirect
// URI at a time, to Keycloak (the realm in deploy/keycloak) and to `pdmcp
// dev`'s provider (devidp with its defaults), and wants the same verdict
// from both: the sign-in page, or a refusal that redirects nowhere. So a
// host that signs in at pdmcp dev signs in at Keycloak, and a host refused
// at Keycloak is refused at pdmcp dev first.
func TestRedirectParity(t *testing.T) {
	kc := loadInfo(t)
	caPEM, err := os.ReadFile(kc.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	hc := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	dev, err := devidp.New(context.Background(), devidp.Config{Issuer: "https://127.0.0.1:8443",
		Users: []devidp.User{{Username: "u", Password: "p"}}, Logger: slogTo(&testutil.LogBuffer{})})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()

	sum := sha256.Sum256([]byte("a-verifier-of-enough-length-for-pkce-0123456789"))
	query := func(redirect string) string {
		return url.Values{"response_type": {"code"}, "client_id": {hostClient}, "redirect_uri": {redirect},
			"scope": {"openid"}, "state": {"st"}, "code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])},
			"code_challenge_method": {"S256"}}.Encode()
	}
	// atKeycloak: 200 with the login form, or 400 naming redirect_uri.
	atKeycloak := func(t *testing.T, redirect string) bool {
		resp, err := hc.Get(kc.Issuer + "/protocol/openid-connect/auth?" + query(redirect))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			return true
		case http.StatusBadRequest:
			return false
		}
		t.Fatalf("Keycloak answered %d (Location %q)", resp.StatusCode, resp.Header.Get("Location"))
		return false
	}
	// atDev: a redirect to its sign-in form, or 400 without a Location.
	atDev := func(t *testing.T, redirect string) bool {
		rec := httptest.NewRecorder()
		dev.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "https://127.0.0.1:8443/authorize?"+query(redirect), nil))
		loc := rec.Header().Get("Location")
		switch {
		case rec.Code == http.StatusFound && strings.Contains(loc, "/login"):
			return true
		case rec.Code == http.StatusBadRequest && loc == "":
			return false
		}
		t.Fatalf("devidp answered %d (Location %q)", rec.Code, loc)
		return false
	}

	var uris []string
	for _, r := range devidp.DefaultHostRedirectURIs() {
		if base, ok := strings.CutSuffix(r, "*"); ok {
			uris = append(uris, base+"server-1", strings.TrimSuffix(base, "/"))
			continue
		}
		uris = append(uris, r)
	}
	uris = append(uris,
		"http://127.0.0.1:18125/callback",           // another port
		"http://127.0.0.1:40123/oauth/callback",     // Gemini's path, another port
		"http://localhost/callback",                 // no port
		"http://127.0.0.1:18124/",                   // another path
		"http://127.0.0.1:18124/callbackx",          // a prefix is not enough
		"http://127.0.0.1:18124/oauth/callback/x",   // no wildcard there
		"http://127.0.0.1:18124/oauth/callback?x=1", // exact means the query too
		"http://127.0.0.1:18124/OAuth/callback",     // case
		"http://127.0.0.1:18124/mcp/oauth/callbackx",
		"https://127.0.0.1:18124/callback", // scheme
		"http://[::1]:18124/callback",      // not registered
		"http://127.0.0.2:18124/callback",
		"http://localhost:6274/oauth/callback", // the Inspector's web page
		"https://evil.example/callback",
	)
	for _, u := range uris {
		t.Run(u, func(t *testing.T) {
			k, d := atKeycloak(t, u), atDev(t, u)
			if k != d {
				t.Errorf("Keycloak accepts it: %v; pdmcp dev's provider accepts it: %v", k, d)
			}
			t.Logf("accepted: %v", k)
		})
	}
}
