package audit

import (
	"strings"
	"unicode/utf8"

	"github.com/pdmcp/pdmcp/internal/lowerhex"
)

// maxClientField bounds strings that come from the other end of a
// connection (a client's name, a request path), so one request cannot write
// an arbitrarily long line.
const maxClientField = 256

// sanitizer clears fields whose values have the wrong shape and remembers
// their names.
type sanitizer struct {
	dropped []string
}

// match keeps v if it is empty or ok(v) holds.
func (s *sanitizer) match(field, v string, ok func(string) bool) string {
	if v == "" || ok(v) {
		return v
	}
	s.dropped = append(s.dropped, field)
	return ""
}

// free keeps an identifier chosen by the operator or a client unless it
// looks like a bearer token, which no identifier in a line ever is.
func (s *sanitizer) free(field, v string) string {
	return s.match(field, v, func(v string) bool { return !looksLikeJWT(v) })
}

// looksLikeJWT spots a compact JWS or JWE anywhere in v: a base64url JSON
// header ("eyJ") followed by at least two dot-separated segments.
func looksLikeJWT(v string) bool {
	for {
		i := strings.Index(v, "eyJ")
		if i < 0 {
			return false
		}
		v = v[i:]
		end := 0
		for end < len(v) && (isB64URL(v[end]) || v[end] == '.') {
			end++
		}
		if strings.Count(v[:end], ".") >= 2 {
			return true
		}
		v = v[3:]
	}
}

// clip shortens v to at most n bytes without splitting a character.
func clip(v string, n int) string {
	if len(v) <= n {
		return v
	}
	v = v[:n]
	for len(v) > 0 && !utf8.ValidString(v) {
		v = v[:len(v)-1]
	}
	return v
}

func isB64URL(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

func isDigest12(v string) bool { return lowerhex.Valid(v, 12) }
func isSHA256(v string) bool   { return lowerhex.Valid(v, 64) }

// isThumbprint: an RFC 7638 SHA-256 thumbprint is 43 base64url characters.
func isThumbprint(v string) bool {
	if len(v) != 43 {
		return false
	}
	for i := 0; i < len(v); i++ {
		if !isB64URL(v[i]) {
			return false
		}
	}
	return true
}

// charset reports whether v is 1..max bytes, starts with a character of
// first, and continues with characters of rest.
func charset(v string, max int, first, rest func(byte) bool) bool {
	if len(v) == 0 || len(v) > max || !first(v[0]) {
		return false
	}
	for i := 1; i < len(v); i++ {
		if !rest(v[i]) {
			return false
		}
	}
	return true
}

func upper(c byte) bool { return c >= 'A' && c <= 'Z' }
func lower(c byte) bool { return c >= 'a' && c <= 'z' }
func digit(c byte) bool { return c >= '0' && c <= '9' }

// isCode: a refusal code such as ACL_DENIED.
func isCode(v string) bool {
	return charset(v, 64, upper, func(c byte) bool { return upper(c) || digit(c) || c == '_' })
}

// isToolName: a tool name such as read_protected_document.
func isToolName(v string) bool {
	return charset(v, 64, lower, func(c byte) bool { return lower(c) || digit(c) || c == '_' })
}

// isClass: a lowercase word list such as not-an-access-token.
func isClass(v string) bool {
	return charset(v, 32, lower, func(c byte) bool { return lower(c) || digit(c) || c == '-' })
}

// isReason: a signal name or a short lowercase reason.
func isReason(v string) bool {
	return charset(v, 64, func(c byte) bool { return upper(c) || lower(c) }, func(c byte) bool {
		return upper(c) || lower(c) || digit(c) || c == '-' || c == '_'
	})
}

// RequestMethod is how a line names a request's method: a standard
// method (RFC 9110, and PATCH) as itself, anything else as "OTHER", so a
// sender cannot choose what is written.
func RequestMethod(m string) string {
	switch m {
	case "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "CONNECT", "OPTIONS", "TRACE":
		return m
	}
	return "OTHER"
}

// isRoute: a Gateway route such as /api/v1/crypto/decrypt.
func isRoute(v string) bool {
	return charset(v, 128, func(c byte) bool { return c == '/' }, func(c byte) bool {
		return lower(c) || upper(c) || digit(c) || c == '/' || c == '-' || c == '_' || c == '.'
	})
}

func isOutcome(v string) bool {
	return v == OutcomeOK || v == OutcomeRefused || v == OutcomeError
}

func isLayer(v string) bool {
	return v == LayerAdapter || v == LayerGateway || v == LayerKeyServer
}

func isConfirmation(v string) bool {
	switch v {
	case ConfirmAccepted, ConfirmDeclined, ConfirmCancelled, ConfirmUnavailable:
		return true
	}
	return false
}
