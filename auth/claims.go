package auth

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// JSON member names are case-sensitive (RFC 7159 §4, RFC 7519 §4), but
// encoding/json matches a struct field's name case-insensitively, and a
// later member overwrites an earlier one: {"client_id":"mcp-host",
// "CLIENT_ID":"rogue"} decodes as client rogue. The token's header and
// claims are therefore read with strictObject, which refuses a duplicate
// member and a member whose name differs only in case (Unicode simple
// folding, as encoding/json and strings.EqualFold fold: "ſcope" too) from a
// name this package reads; the checks then read the members by their exact
// names only.

// claimNames are the claims the Verifier reads.
func claimNames() []string {
	return []string{"iss", "sub", "aud", "exp", "nbf", "iat", "jti", "typ", "azp", "client_id", "nonce", "scope", "scp"}
}

// headerNames are the JOSE header parameters the Verifier reads, or whose
// presence it judges (RFC 7515 §4.1).
func headerNames() []string {
	return []string{"alg", "kid", "typ", "cty", "crit", "b64", "jwk", "jku", "x5u", "x5c", "x5t", "x5t#S256"}
}

// errDuplicate and errNameCase say why strictObject refused an object.
var (
	errDuplicate = errors.New("duplicate member")
	errNameCase  = errors.New("member name differs only in case from a known one")
	errNotObject = errors.New("not a JSON object")
)

// strictObject reads data, a JSON object, into its members by exact name.
// It refuses a duplicate member name, and a name that is not in known but
// folds to one that is.
func strictObject(data []byte, known []string) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, errNotObject
	}
	members := make(map[string]json.RawMessage)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		name, ok := tok.(string)
		if !ok {
			return nil, errNotObject
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		if _, dup := members[name]; dup {
			return nil, errDuplicate
		}
		if caseVariant(name, known) {
			return nil, errNameCase
		}
		members[name] = v
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return nil, errNotObject
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errNotObject // data after the object, well-formed or not
	}
	return members, nil
}

// caseVariant reports whether name is not one of known but equals one of
// them under case folding.
func caseVariant(name string, known []string) bool {
	for _, k := range known {
		if name == k {
			return false
		}
	}
	for _, k := range known {
		if strings.EqualFold(name, k) {
			return true
		}
	}
	return false
}

// maxNumericDate is 9999-12-31T23:59:59Z: a NumericDate beyond it (or below
// zero) is not a time any provider means, and would not fit time.Time's
// Unix conversion exactly.
const maxNumericDate = 253402300799

// tokenClaims is the strict view of a verified payload: every claim the
// checks read, taken from the member of exactly that name.
type tokenClaims struct {
	iss, sub      string
	aud           []string
	exp, nbf, iat time.Time // zero when absent
	jti           string
	typ           *string // the payload typ (Keycloak's "Bearer", "ID", ...)
	azp, clientID string
	nonce         bool // present, whatever its value
	scope         *string
	scp           json.RawMessage
}

// readClaims reads the verified payload's claims through strictObject.
// A claim of the wrong JSON type (null included) is malformed; exp, nbf and
// iat must be JSON numbers (RFC 7519 §2 NumericDate: a string of digits is
// refused) within 0 and maxNumericDate.
func readClaims(payload []byte) (*tokenClaims, error) {
	m, err := strictObject(payload, claimNames())
	switch {
	case errors.Is(err, errDuplicate):
		return nil, refuse(ClassMalformed, ReasonDuplicateMember)
	case errors.Is(err, errNameCase):
		return nil, refuse(ClassMalformed, ReasonMemberNameCase)
	case err != nil:
		return nil, refuse(ClassMalformed, ReasonBadClaims)
	}
	var c tokenClaims
	for _, d := range []struct {
		name string
		to   *time.Time
	}{{"exp", &c.exp}, {"nbf", &c.nbf}, {"iat", &c.iat}} {
		if err := numericDate(m[d.name], d.to); err != nil {
			return nil, err
		}
	}
	for _, s := range []struct {
		name string
		to   *string
	}{{"iss", &c.iss}, {"sub", &c.sub}, {"jti", &c.jti}, {"azp", &c.azp}, {"client_id", &c.clientID}} {
		if raw, ok := m[s.name]; ok {
			if err := json.Unmarshal(raw, s.to); err != nil || raw[0] != '"' {
				return nil, refuse(ClassMalformed, ReasonBadClaims)
			}
		}
	}
	for _, s := range []struct {
		name string
		to   **string
	}{{"typ", &c.typ}, {"scope", &c.scope}} {
		if raw, ok := m[s.name]; ok {
			var v string
			if err := json.Unmarshal(raw, &v); err != nil || raw[0] != '"' {
				return nil, refuse(ClassMalformed, ReasonBadClaims)
			}
			*s.to = &v
		}
	}
	if raw, ok := m["aud"]; ok {
		aud, ok := audience(raw)
		if !ok {
			return nil, refuse(ClassMalformed, ReasonBadClaims)
		}
		c.aud = aud
	}
	_, c.nonce = m["nonce"]
	c.scp = m["scp"]
	return &c, nil
}

// audience reads aud: one string, or a list of strings (RFC 7519 §4.1.3).
func audience(raw json.RawMessage) ([]string, bool) {
	switch raw[0] {
	case '"':
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return nil, false
		}
		return []string{s}, true
	case '[':
		var list []string
		if json.Unmarshal(raw, &list) != nil {
			return nil, false
		}
		return list, true
	}
	return nil, false
}

// numericDate reads raw, when present, as a NumericDate into to.
func numericDate(raw json.RawMessage, to *time.Time) error {
	if raw == nil {
		return nil // absent (a null is present, and refused)
	}
	if c := raw[0]; c != '-' && (c < '0' || c > '9') {
		return refuse(ClassMalformed, ReasonNumericDateNotNumber)
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil || f < 0 || f > maxNumericDate {
		return refuse(ClassMalformed, ReasonNumericDateRange)
	}
	sec := math.Floor(f)
	*to = time.Unix(int64(sec), int64((f-sec)*1e9))
	return nil
}
