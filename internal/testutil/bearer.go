package testutil

import "net/http"

// Bearer is an http.RoundTripper that sends each request with the header
// "Authorization: Bearer <Token>" through Base, as an MCP host does once
// signed in. It changes a clone, never the caller's request.
type Bearer struct {
	Token string
	Base  http.RoundTripper
}

// RoundTrip sends a clone of r with the bearer token set.
func (b *Bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.Token)
	return b.Base.RoundTrip(r)
}
