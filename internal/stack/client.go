package stack

import (
	"context"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/internal/testutil"
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
	return &http.Client{Transport: &testutil.Bearer{Token: token, Base: base}}
}
