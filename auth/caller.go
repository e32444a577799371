package auth

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
)

// Caller is who a verified access token says is calling.
//
// ID is Issuer + "|" + Subject. The Verifier accepts one issuer only, so
// the subject alone would be unique today; naming the issuer as well keeps
// the identity unambiguous in audit lines and caches if that ever changes,
// and it is the pair the Gateway maps to a principal.
type Caller struct {
	Issuer  string
	Subject string
	// ClientID is the OAuth client the token was issued to (client_id, or
	// Keycloak's azp), when the token names one.
	ClientID string
	Scopes   []string
	// Expiry is the access token's exp.
	Expiry time.Time
}

// ID is the caller's identity: issuer and subject joined by "|". It is what
// the go-sdk records as TokenInfo.UserID, so a session started by one user
// cannot be continued with another user's token.
func (c *Caller) ID() string { return c.Issuer + "|" + c.Subject }

// LogValue keeps a Caller out of logs except for its client id: the
// subject is personal data and belongs in the audit file, written on purpose.
func (c *Caller) LogValue() slog.Value {
	return slog.GroupValue(slog.String("client", c.ClientID))
}

// verifiedKey is the context key of a request's verifiedRequest.
type verifiedKey struct{}

// verifiedRequest is what an accepted request carries in its context: one
// value, so each of the readers below finds it in one walk of the chain.
type verifiedRequest struct {
	caller *Caller
	token  string
	// info is the go-sdk's TokenInfo the Middleware made for the request,
	// handed to the SDK's own check; nil when made by ContextWithCaller.
	info *sdkauth.TokenInfo
	// header is the request's own header, while the SDK's check is shown
	// a stand-in (see Middleware).
	header http.Header
}

// ContextWithCaller returns ctx carrying a verified caller and the raw
// access token it was verified from. The Middleware does this for every
// accepted request; tests of code behind it may do it directly.
func ContextWithCaller(ctx context.Context, c *Caller, accessToken string) context.Context {
	return context.WithValue(ctx, verifiedKey{}, &verifiedRequest{caller: c, token: accessToken})
}

func verifiedFromContext(ctx context.Context) *verifiedRequest {
	v, _ := ctx.Value(verifiedKey{}).(*verifiedRequest)
	return v
}

// CallerFromContext returns the verified caller of the request, if any.
func CallerFromContext(ctx context.Context) (*Caller, bool) {
	v := verifiedFromContext(ctx)
	if v == nil || v.caller == nil {
		return nil, false
	}
	return v.caller, true
}

// CallerIDFromContext is CallerFromContext's caller's ID, made once per
// request by the Middleware (the TokenInfo's UserID) rather than again by
// each reader.
func CallerIDFromContext(ctx context.Context) (string, bool) {
	v := verifiedFromContext(ctx)
	switch {
	case v == nil || v.caller == nil:
		return "", false
	case v.info != nil:
		return v.info.UserID, true
	}
	return v.caller.ID(), true
}

// AccessTokenFromContext returns the caller's raw access token, for the
// token exchange only. Never log it or send it anywhere but the provider's
// token endpoint.
func AccessTokenFromContext(ctx context.Context) (string, bool) {
	v := verifiedFromContext(ctx)
	if v == nil {
		return "", false
	}
	return v.token, v.token != ""
}

// tokenInfoKey is where the Middleware puts the Credential in the go-sdk's
// TokenInfo.Extra, so a tool handler (which sees TokenInfo, not the HTTP
// request's context) can exchange the caller's token.
const tokenInfoKey = "pdmcp.credential"

// Credential is a verified caller with the access token it was verified
// from. It prints as redacted: the token leaves it only through
// AccessToken, for the exchange.
type Credential struct {
	Caller *Caller
	token  string
}

// AccessToken is the raw access token, for the token exchange only.
func (c Credential) AccessToken() string { return c.token }

// String keeps the token out of any %v.
func (c Credential) String() string { return "credential(redacted)" }

// GoString keeps the token out of %#v.
func (c Credential) GoString() string { return c.String() }

// LogValue keeps the token out of slog.
func (c Credential) LogValue() slog.Value { return slog.StringValue(c.String()) }

// CredentialFromExtra returns the Credential the Middleware stored in a
// go-sdk TokenInfo's Extra map.
func CredentialFromExtra(extra map[string]any) (Credential, bool) {
	c, ok := extra[tokenInfoKey].(Credential)
	return c, ok && c.Caller != nil && c.token != ""
}
