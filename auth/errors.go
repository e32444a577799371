package auth

import (
	"fmt"
	"net/http"
	"time"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
)

// Class is the kind of a refused request, as it appears in the challenge's
// error_description and in the audit line. The set is closed.
type Class string

// The refusal classes.
const (
	ClassNoToken             Class = "no-token"
	ClassExpired             Class = "expired"
	ClassNotYetValid         Class = "not-yet-valid"
	ClassWrongAudience       Class = "wrong-audience"
	ClassWrongIssuer         Class = "wrong-issuer"
	ClassBadSignature        Class = "bad-signature"
	ClassUnknownKey          Class = "unknown-key"
	ClassNotAnAccessToken    Class = "not-an-access-token"
	ClassMalformed           Class = "malformed"
	ClassClaimMissing        Class = "claim-missing"
	ClassInvalid             Class = "invalid"
	ClassProviderUnavailable Class = "provider-unavailable"
	ClassInsufficientScope   Class = "insufficient-scope"
	// ClassSessionMismatch: a valid token, on a request naming an MCP
	// session another user opened.
	ClassSessionMismatch Class = "session-user-mismatch"
	// ClassClientNotAllowed: a valid token issued to a client that
	// mcp-http.json's allowedClients does not name.
	ClassClientNotAllowed Class = "client-not-allowed"
)

// Reasons: the server's own code for a refusal, finer than its class. Like
// the class, a reason is a constant and never carries anything from the
// token.
const (
	ReasonNoToken             = "NO_TOKEN"
	ReasonMultipleAuthHeaders = "MULTIPLE_AUTHORIZATION_HEADERS"
	ReasonTokenInQuery        = "TOKEN_IN_QUERY"
	ReasonBadAuthHeader       = "BAD_AUTHORIZATION_HEADER"
	ReasonTooLong             = "TOKEN_TOO_LONG"
	ReasonNotCompactJWS       = "NOT_A_COMPACT_JWS"
	ReasonBadEncoding         = "BAD_ENCODING"
	ReasonBadHeader           = "BAD_HEADER"
	ReasonBadClaims           = "BAD_CLAIMS"
	// ReasonDuplicateMember: the header or the claims name a member twice.
	ReasonDuplicateMember = "DUPLICATE_MEMBER"
	// ReasonMemberNameCase: a member's name differs only in case from one
	// this server reads (CLIENT_ID beside or instead of client_id).
	ReasonMemberNameCase = "MEMBER_NAME_CASE_VARIANT"
	// ReasonNumericDateRange: exp, nbf or iat is below 0 or past year 9999.
	ReasonNumericDateRange = "NUMERIC_DATE_OUT_OF_RANGE"
	// ReasonIssuedAtMissing, ReasonTokenIDMissing, ReasonClientIDMissing:
	// an at+jwt access token without iat, jti, or client_id (nor azp);
	// RFC 9068 §2.2 requires them.
	ReasonIssuedAtMissing = "ISSUED_AT_MISSING"
	ReasonTokenIDMissing  = "TOKEN_ID_MISSING"
	ReasonClientIDMissing = "CLIENT_ID_MISSING"
	// ReasonLifetimeTooLong: exp is further from iat (or, without iat, from
	// now) than the configured maximum token lifetime.
	ReasonLifetimeTooLong = "LIFETIME_TOO_LONG"
	// ReasonJWKSTooOld: the provider's keys were last read longer ago than
	// the grace allows and cannot be read now; nothing is accepted.
	ReasonJWKSTooOld = "JWKS_TOO_OLD"
	// ReasonNumericDateNotNumber: exp, nbf or iat is not a JSON number.
	ReasonNumericDateNotNumber = "NUMERIC_DATE_NOT_A_NUMBER"
	ReasonAlgNone              = "ALG_NONE"
	ReasonAlgNotAllowed        = "ALG_NOT_ALLOWED"
	ReasonCritHeader           = "UNSUPPORTED_CRITICAL_HEADER"
	ReasonKeyIDMissing         = "KEY_ID_MISSING"
	ReasonKeyUnknown           = "KEY_UNKNOWN"
	ReasonKeyAlgMismatch       = "KEY_ALG_MISMATCH"
	ReasonSignatureInvalid     = "SIGNATURE_INVALID"
	ReasonIssuerMissing        = "ISSUER_MISSING"
	ReasonIssuerMismatch       = "ISSUER_MISMATCH"
	ReasonIDToken              = "ID_TOKEN"
	ReasonNotAccessTokenType   = "NOT_ACCESS_TOKEN_TYPE"
	ReasonIDTokenShape         = "ID_TOKEN_SHAPE"
	ReasonNoncePresent         = "NONCE_PRESENT"
	ReasonAuthorizedPartyMiss  = "AUTHORIZED_PARTY_MISSING"
	ReasonExpiryMissing        = "EXPIRY_MISSING"
	ReasonExpired              = "TOKEN_EXPIRED"
	ReasonNotYetValid          = "TOKEN_NOT_YET_VALID"
	ReasonIssuedInFuture       = "ISSUED_IN_FUTURE"
	ReasonAudienceMissing      = "AUDIENCE_MISSING"
	ReasonAudienceMismatch     = "AUDIENCE_MISMATCH"
	ReasonSubjectMissing       = "SUBJECT_MISSING"
	ReasonDiscoveryFailed      = "DISCOVERY_FAILED"
	ReasonJWKSUnavailable      = "JWKS_UNAVAILABLE"
	ReasonScopeMissing         = "SCOPE_MISSING"
	ReasonSessionUserMismatch  = "SESSION_USER_MISMATCH"
	ReasonClientNotAllowed     = "CLIENT_NOT_ALLOWED"
	// ReasonVerifierFailed: a verifier returned an error that is not a
	// refusal; treated as one, without its text.
	ReasonVerifierFailed = "VERIFIER_FAILED"
)

// ProviderRetryAfter is the Retry-After of a request refused
// provider-unavailable (503): long enough for a provider's restart, short
// enough that a host retries soon; the keys are fetched again at most once
// per the verifier's JWKSRefreshMin (5 s by default) meanwhile.
const ProviderRetryAfter = 10 * time.Second

// TokenError is a refused request: its class, the server's reason code, and
// the HTTP status it is answered with. Its text names only the class and
// reason. For provider-unavailable it wraps the failure that made the
// provider unreachable (which names the provider's URL, never the token).
type TokenError struct {
	Class  Class
	Reason string
	cause  error
}

func refuse(class Class, reason string) *TokenError {
	return &TokenError{Class: class, Reason: reason}
}

func (e *TokenError) Error() string {
	if e.Class == ClassProviderUnavailable && e.cause != nil {
		// The provider did not answer (or its keys are too old): the
		// token was not judged, so the text does not say it was refused.
		return fmt.Sprintf("token not checked: %s (%s): %v", e.Class, e.Reason, e.cause)
	}
	if e.cause != nil {
		return fmt.Sprintf("token refused: %s (%s): %v", e.Class, e.Reason, e.cause)
	}
	return fmt.Sprintf("token refused: %s (%s)", e.Class, e.Reason)
}

// Unwrap returns the provider failure behind a provider-unavailable refusal.
func (e *TokenError) Unwrap() error { return e.cause }

// Is lets errors.Is match the go-sdk's ErrInvalidToken for every class
// answered 401, so the Verifier also works behind the SDK's own middleware;
// and a *TokenError target of the same class (and reason, when the target
// names one), e.g. errors.Is(err, &TokenError{Class: ClassExpired}).
func (e *TokenError) Is(target error) bool {
	if target == sdkauth.ErrInvalidToken {
		return e.Status() == http.StatusUnauthorized
	}
	t, ok := target.(*TokenError)
	return ok && t.Class == e.Class && (t.Reason == "" || t.Reason == e.Reason)
}

// Status is the HTTP status a refusal of this kind is answered with: 403 for
// a scope shortfall, 400 for a request that carries its token in a way this
// server never accepts, 503 when the provider cannot be reached (the token
// may well be good: a 401 would send the user to sign in again for a
// server's outage), 401 otherwise.
func (e *TokenError) Status() int {
	switch {
	case e.Class == ClassProviderUnavailable:
		return http.StatusServiceUnavailable
	case e.Class == ClassInsufficientScope:
		return http.StatusForbidden
	case e.Reason == ReasonMultipleAuthHeaders || e.Reason == ReasonTokenInQuery:
		return http.StatusBadRequest
	default:
		return http.StatusUnauthorized
	}
}

// oauthError is the RFC 6750 error code of the challenge, empty for a
// request that carried no token at all (RFC 6750 §3.1).
func (e *TokenError) oauthError() string {
	switch {
	case e.Class == ClassNoToken, e.Class == ClassProviderUnavailable:
		return ""
	case e.Class == ClassInsufficientScope:
		return "insufficient_scope"
	case e.Status() == http.StatusBadRequest:
		return "invalid_request"
	default:
		return "invalid_token"
	}
}
