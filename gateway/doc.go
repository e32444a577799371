// Package gateway is the only code in pdmcp that speaks the Tricryption REST
// Gateway's HTTP. It signs in as the registered service, mints scoped
// sessions bound to fresh holder keys, and runs the crypto, ACL, key and
// administration routes of package api. It knows nothing about MCP, grants
// or documents.
//
// # The contract as this client speaks it
//
// Every operation is a POST of a JSON body over HTTPS to a route in package
// api. Plain http is used only when the operator allows it and the Gateway is
// on a loopback address. With a trust file, only that CA is trusted.
//
// The service signs in by posting an assertion signed with its login key and
// carrying its certificate; the request's proof is signed with the service's
// separate sender key. The answer is a service session handle, its expiry,
// the service's principal prefix and system id. Sign-in happens lazily, once
// at a time, and again exactly once when a service-session route answers
// SERVICE_SESSION_EXPIRED; the refused request is then sent once more.
//
// Every request after sign-in carries "Authorization: DPoP <handle>" and a
// fresh proof (package proof) signed by the key the session is bound to: the
// sender key for the service session, a per-session P-256 holder key for a
// scoped session. A proof's iat is the Gateway's clock as estimated from the
// Date header of its latest answer, so a Gateway whose clock is off still
// accepts our proofs; a proof refused PROOF_STALE is sent once more with the
// new estimate.
//
// Administration routes take the admin's HTTP Basic credentials instead; the
// principal and identity routes also take the service session.
//
// # Errors
//
// Every failed request ends in an *api.Error: a refusal carries the layer,
// code, status and detail the Gateway answered; a request that got no answer
// is GATEWAY_UNREACHABLE (status 0, the transport error as its Cause); an
// answer that cannot be read is GATEWAY_BAD_RESPONSE.
//
// # Secrets
//
// Session handles, proofs, keys, tokens and document text never leave this
// package except where a caller handed them in: nothing exported returns a
// handle, logs carry only the route, status, code and latency, and
// HandleDigest gives audit a stable name for a session instead.
package gateway
