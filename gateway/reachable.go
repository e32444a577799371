package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/pdmcp/pdmcp/internal/noanswer"
)

// Reachable sends one unauthenticated GET to the Gateway's base URL, over
// the client's trust, and reports whether any HTTP answer came back (its
// status does not matter: a 404 proves the Gateway answers). It carries no
// session, token or proof. The client's per-request timeout bounds it.
func (c *Client) Reachable(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	u := c.base + "/"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("gateway reachability: %w", err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return &noanswer.Error{Peer: "the Gateway", URL: u, Err: err}
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	return nil
}
