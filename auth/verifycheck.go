package auth

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"slices"
	"strings"

	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/lestrrat-go/jwx/v2/jws"
	"github.com/lestrrat-go/jwx/v2/jwt"
)

// verify makes every check of Verify, in the order the Verifier's doc
// gives them; the first that fails decides the refusal. It also returns the
// key (id and algorithm) the token verified under, for the cache.
func (v *Verifier) verify(ctx context.Context, token string) (*Caller, verifiedToken, error) {
	hdr, err := v.checkHeader(token)
	if err != nil {
		return nil, verifiedToken{}, err
	}
	used := verifiedToken{kid: hdr.KeyID(), alg: hdr.Algorithm().String()}
	payload, err := v.checkSignature(ctx, token, used.kid, used.alg)
	if err != nil {
		return nil, verifiedToken{}, err
	}
	claims, extra, err := readClaims(payload)
	if err != nil {
		return nil, verifiedToken{}, err
	}
	if err := v.checkIssuer(claims); err != nil {
		return nil, verifiedToken{}, err
	}
	if err := checkAccessTokenShape(hdr.Type(), extra.Typ, extra.Azp, extra.Nonce != nil); err != nil {
		return nil, verifiedToken{}, err
	}
	if err := v.checkTimes(claims); err != nil {
		return nil, verifiedToken{}, err
	}
	if err := v.checkAudience(claims); err != nil {
		return nil, verifiedToken{}, err
	}
	sub := claims.Subject()
	if sub == "" {
		return nil, verifiedToken{}, refuse(ClassClaimMissing, ReasonSubjectMissing)
	}
	client, err := v.checkClient(extra)
	if err != nil {
		return nil, verifiedToken{}, err
	}
	scopes, err := v.checkScopes(extra)
	if err != nil {
		return nil, verifiedToken{}, err
	}
	return &Caller{Issuer: claims.Issuer(), Subject: sub, ClientID: client, Scopes: scopes, Expiry: claims.Expiration()},
		used, nil
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
func (v *Verifier) checkRawAlg(rawHeader []byte) (string, error) {
	var h struct {
		Alg *string `json:"alg"`
	}
	if err := json.Unmarshal(rawHeader, &h); err != nil {
		return "", refuse(ClassMalformed, ReasonBadHeader)
	}
	if h.Alg == nil || *h.Alg == "" || strings.EqualFold(*h.Alg, "none") {
		return "", refuse(ClassInvalid, ReasonAlgNone)
	}
	if !slices.Contains(v.algs, *h.Alg) {
		return "", refuse(ClassInvalid, ReasonAlgNotAllowed)
	}
	return *h.Alg, nil
}

// checkSignature verifies the token under the provider's key kid (fetched
// if need be) and returns the signed payload.
func (v *Verifier) checkSignature(ctx context.Context, token, kid, alg string) ([]byte, error) {
	key, err := v.keyFor(ctx, kid, alg)
	if err != nil {
		return nil, err
	}
	payload, err := jws.Verify([]byte(token), jws.WithKey(jwa.SignatureAlgorithm(alg), key), jws.WithCompact())
	if err != nil {
		return nil, refuse(ClassBadSignature, ReasonSignatureInvalid)
	}
	return payload, nil
}

// tokenExtras are the payload's claims the JWT library does not type.
type tokenExtras struct {
	Typ      *string          `json:"typ"`
	Azp      string           `json:"azp"`
	ClientID string           `json:"client_id"`
	Nonce    *json.RawMessage `json:"nonce"`
	Scope    *string          `json:"scope"`
	Scp      json.RawMessage  `json:"scp"`
}

// readClaims reads the verified payload's registered claims and extras.
func readClaims(payload []byte) (jwt.Token, *tokenExtras, error) {
	// RFC 7519 §2: exp, nbf and iat are NumericDates, JSON numbers. The
	// JWT library would also read a string of digits; a provider that
	// signs one is not followed, and the token is refused.
	if err := checkNumericDates(payload); err != nil {
		return nil, nil, err
	}
	claims := jwt.New()
	if err := json.Unmarshal(payload, claims); err != nil {
		return nil, nil, refuse(ClassMalformed, ReasonBadClaims)
	}
	var extra tokenExtras
	if err := json.Unmarshal(payload, &extra); err != nil {
		return nil, nil, refuse(ClassMalformed, ReasonBadClaims)
	}
	return claims, &extra, nil
}

func (v *Verifier) checkIssuer(claims jwt.Token) error {
	switch iss := claims.Issuer(); {
	case iss == "":
		return refuse(ClassClaimMissing, ReasonIssuerMissing)
	case iss != v.provider.Issuer():
		return refuse(ClassWrongIssuer, ReasonIssuerMismatch)
	}
	return nil
}

// checkTimes requires exp, not past, and nbf and iat, when present, not in
// the future; each with the clock skew.
func (v *Verifier) checkTimes(claims jwt.Token) error {
	now := v.now()
	exp := claims.Expiration()
	switch {
	case exp.IsZero():
		return refuse(ClassClaimMissing, ReasonExpiryMissing)
	case !now.Before(exp.Add(v.skew)):
		return refuse(ClassExpired, ReasonExpired)
	}
	if nbf := claims.NotBefore(); !nbf.IsZero() && now.Add(v.skew).Before(nbf) {
		return refuse(ClassNotYetValid, ReasonNotYetValid)
	}
	if iat := claims.IssuedAt(); !iat.IsZero() && now.Add(v.skew).Before(iat) {
		return refuse(ClassNotYetValid, ReasonIssuedInFuture)
	}
	return nil
}

func (v *Verifier) checkAudience(claims jwt.Token) error {
	aud := claims.Audience()
	switch {
	case len(aud) == 0:
		return refuse(ClassWrongAudience, ReasonAudienceMissing)
	case !slices.Contains(aud, v.audience):
		return refuse(ClassWrongAudience, ReasonAudienceMismatch)
	}
	return nil
}

// checkClient returns the token's client (client_id, or azp when it has
// none), refused when AllowedClients are set and do not name it.
func (v *Verifier) checkClient(extra *tokenExtras) (string, error) {
	client := extra.ClientID
	if client == "" {
		client = extra.Azp
	}
	if len(v.clients) > 0 && !slices.Contains(v.clients, client) {
		return "", refuse(ClassClientNotAllowed, ReasonClientNotAllowed)
	}
	return client, nil
}

// checkScopes returns the token's scopes, refused when one required is
// missing.
func (v *Verifier) checkScopes(extra *tokenExtras) ([]string, error) {
	scopes, ok := parseScopes(extra.Scope, extra.Scp)
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

// checkNumericDates refuses a payload whose exp, nbf or iat is present and
// not a JSON number (a string, null, a boolean, an object).
func checkNumericDates(payload []byte) error {
	var dates struct {
		Exp json.RawMessage `json:"exp"`
		Nbf json.RawMessage `json:"nbf"`
		Iat json.RawMessage `json:"iat"`
	}
	if err := json.Unmarshal(payload, &dates); err != nil {
		return refuse(ClassMalformed, ReasonBadClaims)
	}
	for _, raw := range []json.RawMessage{dates.Exp, dates.Nbf, dates.Iat} {
		if raw == nil {
			continue // absent (a null is present, and refused below)
		}
		if c := raw[0]; c != '-' && (c < '0' || c > '9') {
			return refuse(ClassMalformed, ReasonNumericDateNotNumber)
		}
	}
	return nil
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

// checkAccessTokenShape applies the rule documented on Verifier.
func checkAccessTokenShape(headerTyp string, payloadTyp *string, azp string, hasNonce bool) error {
	t := strings.ToLower(headerTyp)
	t = strings.TrimPrefix(t, "application/")
	if payloadTyp != nil && strings.EqualFold(*payloadTyp, "ID") {
		return refuse(ClassNotAnAccessToken, ReasonIDToken)
	}
	switch t {
	case "at+jwt":
		if payloadTyp != nil && !strings.EqualFold(*payloadTyp, "Bearer") {
			return refuse(ClassNotAnAccessToken, ReasonNotAccessTokenType)
		}
	case "jwt", "":
		if payloadTyp == nil {
			return refuse(ClassNotAnAccessToken, ReasonIDTokenShape)
		}
		if !strings.EqualFold(*payloadTyp, "Bearer") {
			return refuse(ClassNotAnAccessToken, ReasonNotAccessTokenType)
		}
		if azp == "" {
			return refuse(ClassNotAnAccessToken, ReasonAuthorizedPartyMiss)
		}
	default:
		return refuse(ClassNotAnAccessToken, ReasonNotAccessTokenType)
	}
	if hasNonce {
		return refuse(ClassNotAnAccessToken, ReasonNoncePresent)
	}
	return nil
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
