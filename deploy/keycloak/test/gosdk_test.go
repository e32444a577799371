//go:build keycloak

package keycloaktest

import (
	"context"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/pdmcp/pdmcp/auth/devidp"
)

// TestGoSDKOAuthClient signs two users in at Keycloak with the go-sdk's own
// OAuth client, configured as docs/hosts.md's "The go-sdk client" says
// (the pre-registered client mcp-host, the redirect on 127.0.0.1:18124):
// from the bare 401 it discovers the metadata and the realm and runs the
// code flow with PKCE; the person at the browser is a script filling
// Keycloak's own login page. Then alice reads the shared document and bob
// is refused it by the key server.
func TestGoSDKOAuthClient(t *testing.T) {
	s := newStack(t)
	connect := func(user string) *mcp.ClientSession {
		jar, _ := cookiejar.New(nil)
		browser := &http.Client{Timeout: 60 * time.Second, Transport: s.hc.Transport, Jar: jar}
		h, err := sdkauth.NewAuthorizationCodeHandler(&sdkauth.AuthorizationCodeHandlerConfig{
			PreregisteredClient: &oauthex.ClientCredentials{ClientID: hostClient, Issuer: s.kc.Issuer},
			RedirectURL:         redirectURL,
			AuthorizationCodeFetcher: func(ctx context.Context, args *sdkauth.AuthorizationArgs) (*sdkauth.AuthorizationResult, error) {
				u, err := url.Parse(args.URL)
				if err != nil {
					return nil, err
				}
				if !strings.HasPrefix(args.URL, s.kc.Issuer+"/") || u.Query().Get("redirect_uri") != redirectURL {
					t.Errorf("the SDK sends the browser to %s://%s%s with redirect %q", u.Scheme, u.Host, u.Path, u.Query().Get("redirect_uri"))
				}
				state := u.Query().Get("state")
				res, err := devidp.AuthorizeResponse(ctx, browser, args.URL, redirectURL, user, password(user), state)
				if err != nil {
					return nil, err
				}
				return &sdkauth.AuthorizationResult{Code: res.Code, State: state, Iss: res.Iss}, nil
			},
			Client: s.hc,
		})
		if err != nil {
			t.Fatal(err)
		}
		c := mcp.NewClient(&mcp.Implementation{Name: "oauth-" + user, Version: "1"}, nil)
		cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: s.mcpURL, HTTPClient: s.hc, OAuthHandler: h}, nil)
		if err != nil {
			t.Fatalf("connect as %s through the go-sdk's OAuth flow at Keycloak: %v", user, err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	m, isErr := read(t, connect("alice"), sharedDocument)
	if isErr || !strings.Contains(str(m["text"]), "Supplier proposal") {
		t.Errorf("alice reads %s: %v", sharedDocument, m)
	}
	m, isErr = read(t, connect("bob"), sharedDocument)
	if !isErr || m["layer"] != "keyserver" || m["code"] != "ACL_DENIED" {
		t.Errorf("bob reads %s: %v, want keyserver ACL_DENIED", sharedDocument, m)
	}
}
