package mcptest

import (
	"context"
	"net/http"
	"net/url"
	"testing"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/pdmcp/pdmcp/auth/devidp"
)

// SignIn is how the go-sdk's own OAuth client signs a user in: as the
// pre-registered host client at Issuer, the provider's login form filled by
// a script (devidp.AuthorizeResponse) as the person at the browser would.
type SignIn struct {
	Issuer, ClientID, RedirectURL string
	User, Password                string
	// HC trusts the provider and the server; Browser, when set, is the
	// browser's client (with its cookies), HC otherwise.
	HC, Browser *http.Client
	// Check, when set, sees each authorization URL the SDK opens.
	Check func(*url.URL)
}

// ConnectOAuth connects a go-sdk client named oauth-<user> to mcpURL
// through the SDK's OAuth flow from the bare 401; the session is closed
// when the test ends.
func ConnectOAuth(t *testing.T, mcpURL string, s SignIn) *mcp.ClientSession {
	t.Helper()
	browser := s.Browser
	if browser == nil {
		browser = s.HC
	}
	h, err := sdkauth.NewAuthorizationCodeHandler(&sdkauth.AuthorizationCodeHandlerConfig{
		PreregisteredClient: &oauthex.ClientCredentials{ClientID: s.ClientID, Issuer: s.Issuer},
		RedirectURL:         s.RedirectURL,
		AuthorizationCodeFetcher: func(ctx context.Context, args *sdkauth.AuthorizationArgs) (*sdkauth.AuthorizationResult, error) {
			u, err := url.Parse(args.URL)
			if err != nil {
				return nil, err
			}
			if s.Check != nil {
				s.Check(u)
			}
			state := u.Query().Get("state")
			res, err := devidp.AuthorizeResponse(ctx, browser, args.URL, s.RedirectURL, s.User, s.Password, state)
			if err != nil {
				return nil, err
			}
			// A provider that advertises RFC 9207 iss has the SDK require it.
			return &sdkauth.AuthorizationResult{Code: res.Code, State: state, Iss: res.Iss}, nil
		},
		Client: s.HC,
	})
	if err != nil {
		t.Fatal(err)
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "oauth-" + s.User, Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: mcpURL, HTTPClient: s.HC, OAuthHandler: h}, nil)
	if err != nil {
		t.Fatalf("connect as %s through the go-sdk's OAuth flow: %v", s.User, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}
