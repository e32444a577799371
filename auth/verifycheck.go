package auth

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"slices"
	"strings"

	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/lestrrat-go/jwx/v2/jws"
)

// verify makes every check of Verify, in the order the Verifier's doc
// gives them; the first that fails decides the refusal. It also returns the
// key (id and algorithm) the token verified under, for the cache.
func (v *Verifier) verify(ctx context.Context, token string) (*Caller, verifiedToken, error) {
	hdr, err := v.checkHeader(token)
	if err != nil {
		return nil, verifiedToken{}, err
	}
	used := &signingKey{kid: hdr.KeyID(), alg: hdr.Algorithm().String()}
	payload, set, err := v.checkSignature(ctx, token, used.kid, used.alg)
	if err != nil {
		return nil, verifiedToken{}, err
	}
	claims, err := readClaims(payload)
	if err != nil {
		return nil, verifiedToken{}, err
	}
	if err := v.checkIssuer(claims); err != nil {
		return nil, verifiedToken{}, err
	}
	rfc9068, err := checkAccessTokenShape(hdr.Type(), claims.typ, claims.azp, claims.nonce)
	if err != nil {
		return nil, verifiedToken{}, err
	}
	if rfc9068 {
		if err := checkRFC9068Claims(claims); err != nil {
			return nil, verifiedToken{}, err
		}
	}
	if err := v.checkTimes(claims); err != nil {
		return nil, verifiedToken{}, err
	}
	if err := v.checkAudience(claims); err != nil {
		return nil, verifiedToken{}, err
	}
	if claims.sub == "" {
		return nil, verifiedToken{}, refuse(ClassClaimMissing, ReasonSubjectMissing)
	}
	client, err := v.checkClient(claims)
	if err != nil {
		return nil, verifiedToken{}, err
	}
	scopes, err := v.checkScopes(claims)
	if err != nil {
		return nil, verifiedToken{}, err
	}
	used.set = set
	return &Caller{Issuer: claims.iss, Subject: claims.sub, ClientID: client, Scopes: scopes, Expiry: claims.exp},
		verifiedToken{key: used}, nil
}

// checkHeader checks the token's form and its protected header: a compact
// JWS of one signature, an allowed alg, no critical or b64 parameter, and
// a kid of bounded length. It returns the header.
func (v *Verifier) checkHeader(token string) (jws.Headers, error) {
	if token == "" {
		return nil, refuse(ClassNoToken, ReasonNoToken)
	}
	if len(token) > MaxTokenBytes {
		return nil, refuse(ClassMalformed, ReasonTooLong)
	}
	rawHeader, err := checkCompact(token)
	if err != nil {
		return nil, err
	}
	alg, err := v.checkRawAlg(rawHeader)
	if err != nil {
		return nil, err
	}
	msg, err := jws.Parse([]byte(token), jws.WithCompact())
	if err != nil || len(msg.Signatures()) != 1 {
		return nil, refuse(ClassMalformed, ReasonBadHeader)
	}
	hdr := msg.Signatures()[0].ProtectedHeaders()
	if hdr.Algorithm().String() != alg {
		return nil, refuse(ClassMalformed, ReasonBadHeader)
	}
	if _, ok := hdr.Get(jws.CriticalKey); ok {
		// No JWS extension is understood here (RFC 7515 §4.1.11).
		return nil, refuse(ClassInvalid, ReasonCritHeader)
	}
	if _, ok := hdr.Get("b64"); ok {
		return nil, refuse(ClassInvalid, ReasonCritHeader)
	}
	kid := hdr.KeyID()
	if kid == "" {
		return nil, refuse(ClassUnknownKey, ReasonKeyIDMissing)
	}
	if len(kid) > maxKeyIDBytes {
		return nil, refuse(ClassMalformed, ReasonBadHeader)
	}
	return hdr, nil
}

// checkRawAlg judges the alg from the raw header, before the JWS library
// sees it, so "none" in any spelling is refused as such and never parsed.
// The header is read strictly (see strictObject): a duplicate parameter,
// or one named like alg, kid, typ or crit in another case, is malformed.
func (v *Verifier) checkRawAlg(rawHeader []byte) (string, error) {
	m, err := strictObject(rawHeader, headerNames())
	switch {
	case errors.Is(err, errDuplicate):
		return "", refuse(ClassMalformed, ReasonDuplicateMember)
	case errors.Is(err, errNameCase):
		return "", refuse(ClassMalformed, ReasonMemberNameCase)
	case err != nil:
		return "", refuse(ClassMalformed, ReasonBadHeader)
	}
	var alg string
	if raw, ok := m["alg"]; ok {
		if raw[0] != '"' || json.Unmarshal(raw, &alg) != nil {
			return "", refuse(ClassMalformed, ReasonBadHeader)
		}
	}
	if alg == "" || strings.EqualFold(alg, "none") {
		return "", refuse(ClassInvalid, ReasonAlgNone)
	}
	if !slices.Contains(v.algs, alg) {
		return "", refuse(ClassInvalid, ReasonAlgNotAllowed)
	}
	return alg, nil
}

// checkSignature verifies the token under the provider's key kid (fetched
// if need be) and returns the signed payload.
func (v *Verifier) checkSignature(ctx context.Context, token, kid, alg string) ([]byte, jwk.Set, error) {
	key, set, err := v.keyFor(ctx, kid, alg)
	if err != nil {
		return nil, nil, err
	}
	payload, err := jws.Verify([]byte(token), jws.WithKey(jwa.SignatureAlgorithm(alg), key), jws.WithCompact())
	if err != nil {
		return nil, nil, refuse(ClassBadSignature, ReasonSignatureInvalid)
	}
	return payload, set, nil
}

func (v *Verifier) checkIssuer(claims *tokenClaims) error {
	switch {
	case claims.iss == "":
		return refuse(ClassClaimMissing, ReasonIssuerMissing)
	case claims.iss != v.provider.Issuer():
		return refuse(ClassWrongIssuer, ReasonIssuerMismatch)
	}
	return nil
}

// checkRFC9068Claims requires what RFC 9068 §2.2 requires of a JWT access
// token beyond iss, exp, aud and sub (checked for every token): iat, jti,
// and client_id. azp stands in for client_id when there is none: Keycloak
// names the client in azp only, also with its "use at+jwt" client switch.
func checkRFC9068Claims(claims *tokenClaims) error {
	switch {
	case claims.iat.IsZero():
		return refuse(ClassClaimMissing, ReasonIssuedAtMissing)
	case claims.jti == "":
		return refuse(ClassClaimMissing, ReasonTokenIDMissing)
	case claims.clientID == "" && claims.azp == "":
		return refuse(ClassClaimMissing, ReasonClientIDMissing)
	}
	return nil
}

// checkTimes requires exp, not past, and nbf and iat, when present, not in
// the future; each with the clock skew. The token's lifetime, exp - iat
// (exp - now when it has no iat), must not exceed the maximum.
func (v *Verifier) checkTimes(claims *tokenClaims) error {
	now := v.now()
	exp := claims.exp
	switch {
	case exp.IsZero():
		return refuse(ClassClaimMissing, ReasonExpiryMissing)
	case !now.Before(exp.Add(v.skew)):
		return refuse(ClassExpired, ReasonExpired)
	}
	if nbf := claims.nbf; !nbf.IsZero() && now.Add(v.skew).Before(nbf) {
		return refuse(ClassNotYetValid, ReasonNotYetValid)
	}
	iat := claims.iat
	if !iat.IsZero() && now.Add(v.skew).Before(iat) {
		return refuse(ClassNotYetValid, ReasonIssuedInFuture)
	}
	from := iat
	if from.IsZero() {
		from = now
	}
	if exp.Sub(from) > v.maxLifetime {
		return refuse(ClassInvalid, ReasonLifetimeTooLong)
	}
	return nil
}

// checkAudience requires aud to name the Audience or the advertised
// resource URL (what an RFC 8707 client asks the provider for), each
// compared exactly.
func (v *Verifier) checkAudience(claims *tokenClaims) error {
	aud := claims.aud
	switch {
	case len(aud) == 0:
		return refuse(ClassWrongAudience, ReasonAudienceMissing)
	case slices.Contains(aud, v.audience):
		return nil
	case v.resource != "" && slices.Contains(aud, v.resource):
		return nil
	}
	return refuse(ClassWrongAudience, ReasonAudienceMismatch)
}

// checkClient returns the token's client (client_id, or azp when it has
// none), refused when AllowedClients are set and do not name it.
func (v *Verifier) checkClient(claims *tokenClaims) (string, error) {
	client := claims.clientID
	if client == "" {
		client = claims.azp
	}
	if len(v.clients) > 0 && !slices.Contains(v.clients, client) {
		return "", refuse(ClassClientNotAllowed, ReasonClientNotAllowed)
	}
	return client, nil
}

// checkScopes returns the token's scopes, refused when one required is
// missing.
func (v *Verifier) checkScopes(claims *tokenClaims) ([]string, error) {
	scopes, ok := parseScopes(claims.scope, claims.scp)
	if !ok {
		return nil, refuse(ClassMalformed, ReasonBadClaims)
	}
	for _, s := range v.scopes {
		if !slices.Contains(scopes, s) {
			return nil, refuse(ClassInsufficientScope, ReasonScopeMissing)
		}
	}
	return scopes, nil
}

// checkCompact refuses anything but three base64url segments: no JWS JSON
// serialisation, no padding, no other characters (RFC 8725 §3.3). It
// returns the decoded header.
func checkCompact(token string) ([]byte, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return nil, refuse(ClassMalformed, ReasonNotCompactJWS)
	}
	var header []byte
	for i, p := range parts {
		// An empty signature is left for the alg check (an unsigned
		// token is "invalid", not "malformed") and the signature check.
		if p == "" && i < 2 {
			return nil, refuse(ClassMalformed, ReasonNotCompactJWS)
		}
		for _, c := range []byte(p) {
			if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return nil, refuse(ClassMalformed, ReasonBadEncoding)
			}
		}
		if i == 2 {
			break
		}
		b, err := base64.RawURLEncoding.DecodeString(p)
		if err != nil || !json.Valid(b) || b[0] != '{' {
			return nil, refuse(ClassMalformed, ReasonBadEncoding)
		}
		if i == 0 {
			header = b
		}
	}
	return header, nil
}

// checkAccessTokenShape applies the rule documented on Verifier. It
// reports whether the token is an RFC 9068 access token (typ at+jwt).
func checkAccessTokenShape(headerTyp string, payloadTyp *string, azp string, hasNonce bool) (bool, error) {
	t := strings.ToLower(headerTyp)
	t = strings.TrimPrefix(t, "application/")
	if payloadTyp != nil && strings.EqualFold(*payloadTyp, "ID") {
		return false, refuse(ClassNotAnAccessToken, ReasonIDToken)
	}
	switch t {
	case "at+jwt":
		if payloadTyp != nil && !strings.EqualFold(*payloadTyp, "Bearer") {
			return false, refuse(ClassNotAnAccessToken, ReasonNotAccessTokenType)
		}
	case "jwt", "":
		if payloadTyp == nil {
			return false, refuse(ClassNotAnAccessToken, ReasonIDTokenShape)
		}
		if !strings.EqualFold(*payloadTyp, "Bearer") {
			return false, refuse(ClassNotAnAccessToken, ReasonNotAccessTokenType)
		}
		if azp == "" {
			return false, refuse(ClassNotAnAccessToken, ReasonAuthorizedPartyMiss)
		}
	default:
		return false, refuse(ClassNotAnAccessToken, ReasonNotAccessTokenType)
	}
	if hasNonce {
		return false, refuse(ClassNotAnAccessToken, ReasonNoncePresent)
	}
	return t == "at+jwt", nil
}

// parseScopes reads scope (a space-separated string, RFC 9068 / RFC 8693)
// or, failing that, scp (a list or a string, as some providers emit it).
func parseScopes(scope *string, scp json.RawMessage) ([]string, bool) {
	if scope != nil {
		return strings.Fields(*scope), true
	}
	if len(scp) == 0 || string(scp) == "null" {
		return nil, true
	}
	var list []string
	if err := json.Unmarshal(scp, &list); err == nil {
		return list, true
	}
	var s string
	if err := json.Unmarshal(scp, &s); err == nil {
		return strings.Fields(s), true
	}
	return nil, false
}
