// Package auth decides who is calling when pdmcp serves Streamable HTTP as an
// OAuth 2.1 resource server.
//
// It holds the operator's HTTP transport configuration (mcp-http.json) and
// the checks on the server's TLS certificate; the access-token Verifier,
// which validates each request's bearer token against the provider's
// published keys and refuses with one of a fixed set of classes; the HTTP
// Middleware that answers refusals (401/403 with a WWW-Authenticate
// challenge) and hands the verified caller to the go-sdk's streamable
// handler; the RFC 9728 protected-resource metadata; and the Exchanger,
// which trades a user's access token at the provider (RFC 8693) for a token
// issued to the Gateway's audience.
//
// It knows nothing about documents, grants or the Gateway's API. The
// development OpenID provider lives in auth/devidp.
//
// Nothing in this package logs or returns a token, or any claim from inside
// one, in an error message, log line or audit record.
package auth
