package stack

import (
	"context"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Connect opens an MCP client session named client at url, over hc's
// transport, sending token as the bearer on every request, as a host does
// once signed in. opts may be nil.
func Connect(ctx context.Context, hc *http.Client, url, token, client string, opts *mcp.ClientSessionOptions) (*mcp.ClientSession, error) {
	c := mcp.NewClient(&mcp.Implementation{Name: client, Version: "1"}, nil)
	return c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: BearerClient(token, hc.Transport)}, opts)
}

// BearerClient is an HTTP client that sends token as the bearer on every
// request, through base.
func BearerClient(token string, base http.RoundTripper) *http.Client {
	return &http.Client{Transport: &bearer{token: token, base: base}}
}

// bearer adds the access token to each request.
type bearer struct {
	token string
	base  http.RoundTripper
}

func (b *bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}
