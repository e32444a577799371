package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"golang.org/x/oauth2"

	"github.com/pdmcp/pdmcp/auth/devidp"
	"github.com/pdmcp/pdmcp/internal/testutil"
)

// tokenCalls counts what a host asks of the provider's token endpoint.
type tokenCalls struct {
	base      http.RoundTripper
	codes     atomic.Int32
	refreshes atomic.Int32
}

func (c *tokenCalls) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/oauth/token") && r.Body != nil {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, err
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
		switch f, _ := url.ParseQuery(string(b)); f.Get("grant_type") {
		case "authorization_code":
			c.codes.Add(1)
		case "refresh_token":
			c.refreshes.Add(1)
		}
	}
	return c.base.RoundTrip(r)
}

// TestDevSignInOutlivesTokensAndRestarts is a host signed in through OAuth
// (the go-sdk's own client, the sign-in form filled by a script) against
// `pdmcp dev`: after `pdmcp dev` restarts on the same state, the access
// token it had still works, and its refresh token still gets new tokens
// without a new sign-in; with access tokens shorter than the client's
// expiry margin, every call refreshes (and rotates) and keeps working.
func TestDevSignInOutlivesTokensAndRestarts(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	d := startDev(t, state)
	mcpURL, issuer := d.info["mcpUrl"].(string), d.info["issuer"].(string)
	caPEM, err := os.ReadFile(d.info["caFile"].(string))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	calls := &tokenCalls{base: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	hc := &http.Client{Transport: calls}
	const redirect = "http://127.0.0.1:18124/callback"
	signIns := 0
	handler := func(initial oauth2.TokenSource) *auth.AuthorizationCodeHandler {
		h, err := auth.NewAuthorizationCodeHandler(&auth.AuthorizationCodeHandlerConfig{
			PreregisteredClient: &oauthex.ClientCredentials{ClientID: devidp.DefaultHostClientID, Issuer: issuer},
			RedirectURL:         redirect,
			AuthorizationCodeFetcher: func(ctx context.Context, args *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
				signIns++
				u, err := url.Parse(args.URL)
				if err != nil {
					return nil, err
				}
				state := u.Query().Get("state")
				res, err := devidp.AuthorizeResponse(ctx, hc, args.URL, redirect, "alice", "alice-dev-password", state)
				if err != nil {
					return nil, err
				}
				return &auth.AuthorizationResult{Code: res.Code, State: state, Iss: res.Iss}, nil
			},
			Client:             hc,
			InitialTokenSource: initial,
		})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	connect := func(h auth.OAuthHandler, token string) *mcp.ClientSession {
		t.Helper()
		tr := &mcp.StreamableClientTransport{Endpoint: mcpURL, HTTPClient: hc, OAuthHandler: h}
		if token != "" {
			tr = &mcp.StreamableClientTransport{Endpoint: mcpURL,
				HTTPClient: &http.Client{Transport: &testutil.Bearer{Token: token, Base: calls}}}
		}
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "signin-test", Version: "1"}, nil).Connect(t.Context(), tr, nil)
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	read := func(cs *mcp.ClientSession, when string) {
		t.Helper()
		m, isErr := call(t, cs, "read_protected_document", map[string]any{"documentId": "evaluation-criteria"})
		if isErr || !strings.HasPrefix(m["text"].(string), "Evaluation criteria") {
			t.Fatalf("read %s: %v", when, m)
		}
	}

	// Signed in once, with the default (15-minute) access tokens.
	h := handler(nil)
	read(connect(h, ""), "after the sign-in")
	ts, err := h.TokenSource(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	before, err := ts.Token()
	if err != nil || before.RefreshToken == "" {
		t.Fatalf("the host holds no refresh token: %v", err)
	}
	if signIns != 1 || calls.codes.Load() != 1 {
		t.Fatalf("%d sign-ins and %d code redemptions, want 1 each", signIns, calls.codes.Load())
	}

	// pdmcp dev stops and starts again on the same state, now with access
	// tokens of 10 s: at most the oauth2 client's expiry margin, so it
	// refreshes before every request.
	d.stop(t)
	d = startDev(t, state, "--access-token-lifetime", "10s")
	if d.info["issuer"] != issuer || d.info["mcpUrl"] != mcpURL {
		t.Fatalf("the restarted stack moved: %v %v", d.info["issuer"], d.info["mcpUrl"])
	}
	read(connect(nil, before.AccessToken), "with the access token issued before the restart")

	stale := *before
	stale.Expiry = time.Now().Add(-time.Second) // as the host sees it once it is old
	cfg := &oauth2.Config{ClientID: devidp.DefaultHostClientID,
		Endpoint: oauth2.Endpoint{TokenURL: issuer + "/oauth/token", AuthStyle: oauth2.AuthStyleInParams}}
	initial := cfg.TokenSource(context.WithValue(context.Background(), oauth2.HTTPClient, hc), &stale)
	cs := connect(handler(initial), "")
	for range 3 {
		read(cs, "after the restart, refreshing")
	}
	if signIns != 1 {
		t.Errorf("%d sign-ins: the restart or the short tokens made the user sign in again", signIns)
	}
	if n := calls.refreshes.Load(); n < 2 {
		t.Errorf("%d refreshes; want one with the pre-restart refresh token and more with the rotated ones", n)
	}
}
