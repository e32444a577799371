// Package api holds the Gateway contract that pdmcp assumes: routes, request
// and response bodies, refusal codes and the error body. The client (package
// gateway) and the reference Gateway (package gateway/reference) are both
// written against these types, so adapting to the real contract is a change
// here and in those two packages only.
package api

import (
	"encoding/json"
	"fmt"
	"time"
)

// Routes. Every operation is a POST with a JSON body.
const (
	RouteServiceLogin = "/api/v1/auth/service"
	RouteScoped       = "/api/v1/auth/scoped"
	RouteWiden        = "/api/v1/auth/widen"
	RouteRevoke       = "/api/v1/auth/revoke"

	RouteEncrypt = "/api/v1/crypto/encrypt"
	RouteDecrypt = "/api/v1/crypto/decrypt"

	RouteACLGet    = "/api/v1/keys/acl/get"
	RouteACLGrant  = "/api/v1/keys/acl/grant"
	RouteACLUpdate = "/api/v1/keys/acl/update"
	RouteACLRevoke = "/api/v1/keys/acl/revoke"
	RouteKeyExpire = "/api/v1/keys/expire"
	RouteKeyRemove = "/api/v1/keys/remove"

	RouteAdminRegisterService = "/api/v1/admin/services/register"
	RouteAdminCreatePrincipal = "/api/v1/admin/principals/create"
	RouteAdminDeletePrincipal = "/api/v1/admin/principals/delete"
	RouteAdminGetPrincipal    = "/api/v1/admin/principals/get"
	RouteAdminBindProvider    = "/api/v1/admin/providers/bind"
	RouteAdminMapIdentity     = "/api/v1/admin/identities/map"
	RouteAdminUnmapIdentity   = "/api/v1/admin/identities/unmap"
	RouteAdminRevokeSessions  = "/api/v1/admin/sessions/revoke"

	// Test controls of the reference Gateway (package gateway/reference),
	// for tests that run it as another process. Admin Basic credentials.
	RouteAdminTestFaults              = "/api/v1/admin/test/faults"
	RouteAdminTestCounts              = "/api/v1/admin/test/counts"
	RouteAdminTestDropServiceSessions = "/api/v1/admin/test/drop-service-sessions"
)

// Limits of the contract.
const (
	// MaxObjects is the most t-Tags one scoped session may cover.
	MaxObjects = 64
	// MaxScopedTTL is the longest a scoped session lives.
	MaxScopedTTL = 300 * time.Second
	// MaxDataBytes is the largest plaintext (encrypt) or decrypted text
	// (decrypt) the key server takes: 16 MiB less one byte.
	MaxDataBytes = 16*1024*1024 - 1
	// ProofWindow is how far a proof's iat may be from the Gateway's clock.
	ProofWindow = 60 * time.Second
	// IVBytes is the length of an initialisation vector.
	IVBytes = 16
)

// Layers that refuse.
const (
	LayerAdapter   = "adapter"
	LayerGateway   = "gateway"
	LayerKeyServer = "keyserver"
)

// Refusal codes of the Gateway and the key server.
const (
	CodeProofMissing     = "PROOF_MISSING"
	CodeProofInvalid     = "PROOF_INVALID"
	CodeProofStale       = "PROOF_STALE"
	CodeProofReplayed    = "PROOF_REPLAYED"
	CodeProofKeyMismatch = "PROOF_KEY_MISMATCH"

	CodeSessionMissing        = "SESSION_MISSING"
	CodeSessionRevoked        = "SESSION_REVOKED"
	CodeSessionExpired        = "SESSION_EXPIRED"
	CodeServiceSessionExpired = "SERVICE_SESSION_EXPIRED"
	CodeServiceLoginRefused   = "SERVICE_LOGIN_REFUSED"
	CodeAdminAuthRequired     = "ADMIN_AUTH_REQUIRED"

	CodeScopedNotAllowed  = "SCOPED_NOT_ALLOWED"
	CodeScopeTooWide      = "SCOPE_TOO_WIDE"
	CodeActingAsRefused   = "ACTING_AS_REFUSED"
	CodeIdentityNotMapped = "IDENTITY_NOT_MAPPED"
	CodeSubjectRefused    = "SUBJECT_TOKEN_REFUSED"
	CodeIdPUnavailable    = "IDP_UNAVAILABLE"

	CodeObjectNotInScope = "OBJECT_NOT_IN_CREDENTIAL_SCOPE"
	CodeBadRequest       = "BAD_REQUEST"
	CodeNotFound         = "NOT_FOUND"
	CodeConflict         = "CONFLICT"
	CodeInternal         = "INTERNAL"
	CodeInjectedFault    = "INJECTED_FAULT"

	CodeKeyNotFound  = "KEY_NOT_FOUND"
	CodeKeyExpired   = "KEY_EXPIRED"
	CodeAccessDenied = "ACCESS_DENIED"
	CodeACLDenied    = "ACL_DENIED"

	// Codes the client itself produces for failures that never got an
	// answer from the Gateway.
	CodeUnreachable = "GATEWAY_UNREACHABLE"
	CodeBadResponse = "GATEWAY_BAD_RESPONSE"

	// CodeSessionIdentityMismatch (adapter): a minted scoped session acts
	// as a principal outside the service's prefix, or not as the one asked
	// for; it was revoked at once and never used.
	CodeSessionIdentityMismatch = "SESSION_IDENTITY_MISMATCH"
	// CodeSessionsBusy (adapter): every one of the session pool's places
	// is held by a call in flight; retry after RetryAfter.
	CodeSessionsBusy = "SESSIONS_BUSY"
)

// Rights on a key's access control list.
const (
	RightRead  = "READ"
	RightWrite = "WRITE"
	RightOwner = "OWNER"
)

// Roles a principal may hold at the key server.
const (
	RoleEncrypt = "ENCRYPT"
	RoleDecrypt = "DECRYPT"
	RoleACL     = "ACL"
)

// DefaultRoles are what a principal gets when its creator names none.
var DefaultRoles = []string{RoleEncrypt, RoleDecrypt, RoleACL}

// Error is a refusal: which layer said no, its code, the HTTP status and one
// sentence on what to do. RetryAfter is set from a Retry-After header. Cause
// is the local failure behind a refusal the client made up itself (for
// example the transport error behind GATEWAY_UNREACHABLE); it is never sent.
type Error struct {
	Layer      string        `json:"layer"`
	Code       string        `json:"code"`
	Status     int           `json:"status"`
	Detail     string        `json:"detail"`
	RetryAfter time.Duration `json:"-"`
	Cause      error         `json:"-"`
	// URL is where a request that got no answer (GATEWAY_UNREACHABLE) or
	// an unreadable one (GATEWAY_BAD_RESPONSE) went, for the operator's
	// text; never sent, and not in Detail, which the model reads.
	URL string `json:"-"`
}

// Error is the operator's text. A Gateway that did not answer, or whose
// answer could not be read, refused nothing: it is named at its URL, in
// the words every peer that did not answer gets (internal/noanswer).
func (e *Error) Error() string {
	at := ""
	if e.URL != "" {
		at = " at " + e.URL
	}
	switch e.Code {
	case CodeUnreachable:
		if e.Cause != nil && e.URL != "" {
			return fmt.Sprintf("%v (%s)", e.Cause, e.Code)
		}
		return fmt.Sprintf("the Gateway%s did not answer: %s (%s)", at, e.Detail, e.Code)
	case CodeBadResponse:
		why := e.Detail
		if e.Cause != nil {
			why = e.Cause.Error()
		}
		return fmt.Sprintf("the Gateway%s answered HTTP %d in a form this client cannot read: %s (%s)", at, e.Status, why, e.Code)
	}
	return fmt.Sprintf("%s refused %s (%d): %s", e.Layer, e.Code, e.Status, e.Detail)
}

// Unwrap exposes Cause, so errors.Is(err, context.DeadlineExceeded) works on
// a GATEWAY_UNREACHABLE refusal.
func (e *Error) Unwrap() error { return e.Cause }

// Is lets errors.Is match two refusals by layer and code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && (t.Layer == "" || t.Layer == e.Layer)
}

// ErrorBody is every refusal's JSON body.
type ErrorBody struct {
	Error Error `json:"error"`
}

// Service sign-in.

// ServiceLoginRequest carries a JWS assertion signed by the service's login
// key, with the service's certificate in its x5c header. The request's proof
// is signed by the service's sender key.
type ServiceLoginRequest struct {
	Assertion string `json:"assertion"`
}

// ServiceLoginResponse is a service session.
type ServiceLoginResponse struct {
	Handle    string    `json:"handle"`
	ExpiresAt time.Time `json:"expiresAt"`
	Prefix    string    `json:"prefix"`
	SystemID  int64     `json:"systemId"`
	ServiceID string    `json:"serviceId"`
}

// ScopedRequest mints a scoped session bound to HolderJWK. Exactly one of
// ActingAs (stdio: a principal inside the service's prefix) and SubjectToken
// (HTTP: a token the provider issued to the Gateway's audience) is set.
type ScopedRequest struct {
	Objects      []string        `json:"objects"`
	HolderJWK    json.RawMessage `json:"holderJwk"`
	TTLSeconds   int             `json:"ttlSeconds"`
	ActingAs     string          `json:"actingAs,omitempty"`
	SubjectToken string          `json:"subjectToken,omitempty"`
}

// ScopedResponse is a scoped session.
type ScopedResponse struct {
	Handle      string    `json:"handle"`
	ActingAs    string    `json:"actingAs"`
	SystemID    int64     `json:"systemId"`
	PrincipalID string    `json:"principalId"`
	JKT         string    `json:"jkt"`
	ExpiresAt   time.Time `json:"expiresAt"`
	Objects     []string  `json:"objects"`
}

// WidenRequest adds objects to the calling scoped session. The answer is a
// ScopedResponse without the handle, listing every object the session covers.
type WidenRequest struct {
	Objects []string `json:"objects"`
}

// RevokeResponse answers a revoke.
type RevokeResponse struct {
	Revoked bool `json:"revoked"`
}

// Crypto.

// EncryptRequest: no TTag mints a key owned by the acting principal; no IV
// makes the encryption deterministic. Plaintext and IV are base64 (std).
type EncryptRequest struct {
	TTag      string `json:"ttag,omitempty"`
	IV        string `json:"iv,omitempty"`
	Plaintext string `json:"plaintext"`
}

// EncryptResponse answers an encrypt.
type EncryptResponse struct {
	TTag       string `json:"ttag"`
	IV         string `json:"iv"`
	Ciphertext string `json:"ciphertext"`
	Minted     bool   `json:"minted"`
	Link       string `json:"link"`
}

// DecryptRequest names the key, the IV and the ciphertext (base64).
type DecryptRequest struct {
	TTag       string `json:"ttag"`
	IV         string `json:"iv"`
	Ciphertext string `json:"ciphertext"`
}

// DecryptResponse carries the plaintext (base64).
type DecryptResponse struct {
	Plaintext string `json:"plaintext"`
	Link      string `json:"link"`
}

// ACL and keys.

// TTagRequest names one key.
type TTagRequest struct {
	TTag string `json:"ttag"`
}

// ACLEntry is one entry of a key's access control list. Uses nil means
// unlimited; otherwise it is how many uses remain.
type ACLEntry struct {
	SystemID    int64      `json:"systemId"`
	PrincipalID string     `json:"principalId"`
	Principal   string     `json:"principal"`
	Rights      []string   `json:"rights"`
	EndTime     *time.Time `json:"endTime,omitempty"`
	Uses        *int       `json:"uses,omitempty"`
}

// ACLGetResponse lists a key's entries.
type ACLGetResponse struct {
	TTag    string     `json:"ttag"`
	Entries []ACLEntry `json:"entries"`
}

// ACLGrantRequest adds (grant) or replaces (update) one entry.
type ACLGrantRequest struct {
	TTag        string     `json:"ttag"`
	SystemID    int64      `json:"systemId"`
	PrincipalID string     `json:"principalId"`
	Rights      []string   `json:"rights"`
	EndTime     *time.Time `json:"endTime,omitempty"`
	Uses        *int       `json:"uses,omitempty"`
}

// ACLRevokeRequest removes one entry.
type ACLRevokeRequest struct {
	TTag        string `json:"ttag"`
	SystemID    int64  `json:"systemId"`
	PrincipalID string `json:"principalId"`
}

// OKResponse answers an operation that returns nothing else.
type OKResponse struct {
	OK bool `json:"ok"`
}

// Administration. Admin routes take the admin's HTTP Basic credentials;
// the principal and identity routes also take a service session, limited to
// that service's prefix.

// RegisterServiceRequest registers a service. Certificate and
// DelegatorCertificate are PEM; SenderJWK is the public sender key.
type RegisterServiceRequest struct {
	Name                 string          `json:"name"`
	Certificate          string          `json:"certificate"`
	SenderJWK            json.RawMessage `json:"senderJwk"`
	DelegatorCertificate string          `json:"delegatorCertificate,omitempty"`
	AllowScoped          bool            `json:"allowScoped"`
	Prefix               string          `json:"prefix,omitempty"`
}

// RegisterServiceResponse names the registered service.
type RegisterServiceResponse struct {
	ServiceID string `json:"serviceId"`
	SystemID  int64  `json:"systemId"`
	Prefix    string `json:"prefix"`
}

// PrincipalRequest creates, reads or deletes a principal by name.
type PrincipalRequest struct {
	Name     string   `json:"name"`
	Roles    []string `json:"roles,omitempty"`
	Disabled bool     `json:"disabled,omitempty"`
}

// Principal is a user of the key server.
type Principal struct {
	Name        string   `json:"name"`
	SystemID    int64    `json:"systemId"`
	PrincipalID string   `json:"principalId"`
	Roles       []string `json:"roles"`
	Disabled    bool     `json:"disabled"`
}

// BindProviderRequest binds an OpenID provider to a service: tokens from
// Issuer, for Audience, whose authorised party is AllowedClient. CAPEM is the
// trust for fetching the provider's keys.
type BindProviderRequest struct {
	ServiceID     string `json:"serviceId"`
	Issuer        string `json:"issuer"`
	Audience      string `json:"audience"`
	AllowedClient string `json:"allowedClient"`
	CAPEM         string `json:"caPem,omitempty"`
}

// MapIdentityRequest maps (Issuer, Subject) to a principal inside the
// service's prefix.
type MapIdentityRequest struct {
	ServiceID string `json:"serviceId,omitempty"`
	Issuer    string `json:"issuer"`
	Subject   string `json:"subject"`
	Principal string `json:"principal"`
	Disabled  bool   `json:"disabled,omitempty"`
}

// RevokeSessionsRequest (admin) revokes every live scoped session acting as
// Principal, or every live scoped session when Principal is empty.
type RevokeSessionsRequest struct {
	Principal string `json:"principal,omitempty"`
}

// RevokeSessionsResponse says how many scoped sessions were revoked.
type RevokeSessionsResponse struct {
	Revoked int `json:"revoked"`
}
