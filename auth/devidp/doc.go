// Package devidp is a development OpenID provider for tests and for
// `pdmcp dev`. It is NOT an identity provider for real use: its users and
// passwords live in memory as given in Config, and sign-in requests and
// issued tokens are remembered until they expire, in memory, or, with
// Config.StateDir, also in one private file there (with the signing key), so
// that a provider started again on the same folder keeps every token and
// sign-in valid. Point a real deployment at a real provider.
//
// It is built on github.com/zitadel/oidc/v3's pkg/op and serves the shape of
// provider the MCP server's HTTP transport is configured against:
//
//   - discovery at /.well-known/openid-configuration and RFC 8414
//     authorization-server metadata at /.well-known/oauth-authorization-server
//     (with the issuer path inserted, when the issuer has one), advertising
//     S256 as the only PKCE method, no offline_access, and RFC 9207 iss
//     support;
//   - a JWKS at /keys;
//   - the authorization code flow with PKCE S256 required, for one
//     pre-registered public host client with the redirect URIs of the realm
//     in deploy/keycloak (DefaultHostRedirectURIs: port 18124 on localhost
//     and 127.0.0.1, at the paths the hosts use), compared exactly as
//     Keycloak compares them, whose every authorization response carries iss
//     (RFC 9207);
//   - an HTML sign-in form at /login that a person or a script can fill;
//   - JWT access tokens (typ at+jwt, RFC 9068) whose aud is the adapter's
//     client id, and ID tokens (typ JWT, aud the host client) when openid is
//     asked for;
//   - RFC 8693 token exchange for the adapter's confidential client, from a
//     user's access token to one for the Gateway API audience;
//   - rotating refresh tokens for the host client, issued with every code
//     without offline_access (see refresh.go), so a host stays signed in
//     past its access token's life (DefaultAccessTokenLifetime, 10 minutes,
//     the realm's; refresh tokens last the realm's idle and maximum session
//     times).
//
// The library does the protocol work: request parsing, client
// authentication, codes, PKCE verification, the token exchange grant and the
// JWT claims. Where it falls short of what the MCP server is tested against,
// the provider steps in, and says why where it does: access tokens are
// re-signed with typ at+jwt (the library hard-codes JWT) and the ID token's
// aud and at_hash are set to match; the host client's redirect URIs are
// checked here because the library cannot match Keycloak's wildcards; PKCE S256 is required here because
// the library also accepts plain or none; and token exchange accepts only
// access tokens this provider issued for the adapter, because the library
// would also take an ID token or a Gateway token as the subject. The library
// issues refresh tokens only with offline_access and has no hook for iss on
// authorization responses; the provider adds both.
//
// Login does the code flow as a script would, without a callback listener,
// for tests and for `pdmcp dev token USER`.
package devidp
