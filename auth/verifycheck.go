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

// verify makes every check of Verify. It also returns the key (id and
// algorithm) the token verified under, for the cache.
func (v *Verifier) verify(ctx context.Context, token string) (*Caller, verifiedToken, error) {
	var key verifiedToken
	c, err := v.check(ctx, token, &key)
	if err != nil {
		return nil, verifiedToken{}, err
	}
	return c, key, nil
}

// check makes every check of Verify, and names the verifying key in key.
func (v *Verifier) check(ctx context.Context, token string, used *verifiedToken) (*Caller, error) {
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
	// The alg is judged from the raw header, before the JWS library sees
	// it, so "none" in any spelling is refused as such and never parsed.
	var h struct {
		Alg *string `json:"alg"`
	}
	if err := json.Unmarshal(rawHeader, &h); err != nil {
		return nil, refuse(ClassMalformed, ReasonBadHeader)
	}
	if h.Alg == nil || *h.Alg == "" || strings.EqualFold(*h.Alg, "none") {
		return nil, refuse(ClassInvalid, ReasonAlgNone)
	}
	alg := *h.Alg
	if !slices.Contains(v.algs, alg) {
		return nil, refuse(ClassInvalid, ReasonAlgNotAllowed)
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

	key, err := v.keyFor(ctx, kid, alg)
	if err != nil {
		return nil, err
	}
	payload, err := jws.Verify([]byte(token), jws.WithKey(jwa.SignatureAlgorithm(alg), key), jws.WithCompact())
	if err != nil {
		return nil, refuse(ClassBadSignature, ReasonSignatureInvalid)
	}
	used.kid, used.alg = kid, alg

	// RFC 7519 §2: exp, nbf and iat are NumericDates, JSON numbers. The
	// JWT library would also read a string of digits; a provider that
	// signs one is not followed, and the token is refused.
	if err := checkNumericDates(payload); err != nil {
		return nil, err
	}

	claims := jwt.New()
	if err := json.Unmarshal(payload, claims); err != nil {
		return nil, refuse(ClassMalformed, ReasonBadClaims)
	}
	var extra struct {
		Typ      *string          `json:"typ"`
		Azp      string           `json:"azp"`
		ClientID string           `json:"client_id"`
		Nonce    *json.RawMessage `json:"nonce"`
		Scope    *string          `json:"scope"`
		Scp      json.RawMessage  `json:"scp"`
	}
	if err := json.Unmarshal(payload, &extra); err != nil {
		return nil, refuse(ClassMalformed, ReasonBadClaims)
	}

	switch iss := claims.Issuer(); {
	case iss == "":
		return nil, refuse(ClassClaimMissing, ReasonIssuerMissing)
	case iss != v.provider.Issuer():
		return nil, refuse(ClassWrongIssuer, ReasonIssuerMismatch)
	}

	if err := checkAccessTokenShape(hdr.Type(), extra.Typ, extra.Azp, extra.Nonce != nil); err != nil {
		return nil, err
	}

	now := v.now()
	exp := claims.Expiration()
	switch {
	case exp.IsZero():
		return nil, refuse(ClassClaimMissing, ReasonExpiryMissing)
	case !now.Before(exp.Add(v.skew)):
		return nil, refuse(ClassExpired, ReasonExpired)
	}
	if nbf := claims.NotBefore(); !nbf.IsZero() && now.Add(v.skew).Before(nbf) {
		return nil, refuse(ClassNotYetValid, ReasonNotYetValid)
	}
	if iat := claims.IssuedAt(); !iat.IsZero() && now.Add(v.skew).Before(iat) {
		return nil, refuse(ClassNotYetValid, ReasonIssuedInFuture)
	}

	aud := claims.Audience()
	switch {
	case len(aud) == 0:
		return nil, refuse(ClassWrongAudience, ReasonAudienceMissing)
	case !slices.Contains(aud, v.audience):
		return nil, refuse(ClassWrongAudience, ReasonAudienceMismatch)
	}

	sub := claims.Subject()
	if sub == "" {
		return nil, refuse(ClassClaimMissing, ReasonSubjectMissing)
	}

	client := extra.ClientID
	if client == "" {
		client = extra.Azp
	}
	if len(v.clients) > 0 && !slices.Contains(v.clients, client) {
		return nil, refuse(ClassClientNotAllowed, ReasonClientNotAllowed)
	}

	scopes, ok := parseScopes(extra.Scope, extra.Scp)
	if !ok {
		return nil, refuse(ClassMalformed, ReasonBadClaims)
	}
	for _, s := range v.scopes {
		if !slices.Contains(scopes, s) {
			return nil, refuse(ClassInsufficientScope, ReasonScopeMissing)
		}
	}

	return &Caller{Issuer: claims.Issuer(), Subject: sub, ClientID: client, Scopes: scopes, Expiry: exp}, nil
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
