package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
)

// envelope is what internal/serve's checks read of a POST body's JSON-RPC
// message (its id, method, result, error and params members), decoded once
// by the outermost handler that reads the body (UserLimiter.Wrap) and
// carried to the others (jsonRPCShape) in the request's context, instead of
// each check decoding the body again.
//
// It is only made for the common body: one JSON object in which no member
// name the checks read occurs twice (matched as encoding/json matches a
// struct's fields, case-insensitively). For any other body (not JSON, not
// an object, a name given twice) parseEnvelope reports false and each check
// reads the body as it always has, so what a strange body is answered does
// not depend on this shortcut: where a member occurs once, decoding it from
// its own bytes gives what decoding it as part of the whole message gives.
type envelope struct {
	ID     envelopeMember `json:"id"`
	Method envelopeMember `json:"method"`
	Result envelopeMember `json:"result"`
	Error  envelopeMember `json:"error"`
	Params envelopeMember `json:"params"`

	// What the checks read of method and params, decoded once.
	methodName string
	methodOK   bool
	version    string
}

// envelopeMember is one member's raw value and how many members of the
// object were matched to it.
type envelopeMember struct {
	raw json.RawMessage
	n   int
}

// UnmarshalJSON keeps b (encoding/json hands it a value already checked)
// and counts it; it never fails, so one odd member does not stop the rest
// from being read.
func (m *envelopeMember) UnmarshalJSON(b []byte) error {
	m.raw = b
	m.n++
	return nil
}

// parseEnvelope decodes body's envelope, or reports false when body is not
// the common case envelope describes.
func parseEnvelope(body []byte) (*envelope, bool) {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, false
	}
	e := new(envelope)
	if json.Unmarshal(trimmed, e) != nil {
		return nil, false
	}
	for _, m := range []envelopeMember{e.ID, e.Method, e.Result, e.Error, e.Params} {
		if m.n > 1 {
			return nil, false
		}
	}
	e.methodName, e.methodOK = decodeMethod(e.Method.raw)
	e.version = decodeMetaVersion(e.Params.raw)
	return e, true
}

// method is the message's method as protocolHeaderMismatch reads it: ""
// when there is none (or it is null), and ok false when it is not a string.
func (e *envelope) method() (string, bool) { return e.methodName, e.methodOK }

// metaVersion is the protocol revision the message's params._meta names,
// "" when it names none, or when params (or its _meta) is not an object:
// the checks leave such a message to the SDK.
func (e *envelope) metaVersion() string { return e.version }

func decodeMethod(raw json.RawMessage) (string, bool) {
	var s string
	if raw != nil && json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

func decodeMetaVersion(params json.RawMessage) string {
	var p struct {
		Meta map[string]rawValue `json:"_meta"`
	}
	if params != nil && json.Unmarshal(params, &p) != nil {
		return ""
	}
	var meta string
	if raw, ok := p.Meta[metaProtocolVersion]; !ok || json.Unmarshal(raw, &meta) != nil {
		return ""
	}
	return meta
}

// rawValue is json.RawMessage without the copy: it keeps the bytes it is
// handed, a part of a body that is not changed while it is read.
type rawValue []byte

func (r *rawValue) UnmarshalJSON(b []byte) error {
	*r = b
	return nil
}

// parsedBody is a body the user limiter read, and its envelope (nil when
// parseEnvelope did not make one).
type parsedBody struct {
	body []byte
	env  *envelope
}

type parsedBodyKey struct{}

// withParsedBody carries body and its envelope on r's context.
func withParsedBody(r *http.Request, body []byte, env *envelope) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), parsedBodyKey{}, &parsedBody{body: body, env: env}))
}

// parsedBodyOf is what withParsedBody carried, if anything.
func parsedBodyOf(ctx context.Context) (*parsedBody, bool) {
	p, ok := ctx.Value(parsedBodyKey{}).(*parsedBody)
	return p, ok
}
