package serve

import (
	"bytes"
	"encoding/json"
	"net/http"
	"unicode/utf8"
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
	// The common body is checked and walked in one pass; any other (not
	// valid, a name not plain, nested deep) takes the general path, which
	// answers it as it always has.
	if e, ok := scanEnvelope(trimmed); ok {
		if !e.counted() {
			return nil, false
		}
		return e, true
	}
	return parseEnvelopeGeneral(trimmed)
}

// parseEnvelopeGeneral is parseEnvelope for a trimmed body starting with
// '{': json.Valid, then the walk or the general decode.
func parseEnvelopeGeneral(trimmed []byte) (*envelope, bool) {
	if !json.Valid(trimmed) {
		return nil, false
	}
	// The common body is walked by hand, without encoding/json's
	// reflection and allocations; a member name it does not read as
	// encoding/json would for sure (escaped, not ASCII) sends the body to
	// the general decode.
	e, ok := walkEnvelope(trimmed)
	if !ok {
		e, ok = decodeEnvelope(trimmed)
	}
	if !ok || !e.counted() {
		return nil, false
	}
	return e, true
}

// decodeEnvelope is the general decode of a valid JSON object's envelope.
func decodeEnvelope(obj []byte) (*envelope, bool) {
	e := new(envelope)
	if json.Unmarshal(obj, e) != nil {
		return nil, false
	}
	e.methodName, e.methodOK = decodeMethod(e.Method.raw)
	e.version = decodeMetaVersion(e.Params.raw)
	return e, true
}

// counted reports whether no member the checks read occurs twice.
func (e *envelope) counted() bool {
	for _, m := range []*envelopeMember{&e.ID, &e.Method, &e.Result, &e.Error, &e.Params} {
		if m.n > 1 {
			return false
		}
	}
	return true
}

// walkEnvelope is json.Unmarshal(obj, e) for a valid JSON object whose
// member names are plain ASCII without escapes, matched to envelope's
// fields as encoding/json matches them (exactly, else ASCII
// case-insensitively); ok is false for any other object.
func walkEnvelope(obj []byte) (*envelope, bool) {
	e := new(envelope)
	w := objectWalker{b: obj, i: 1}
	for {
		key, val, more := w.next()
		if !more {
			break
		}
		if !plainName(key) {
			return nil, false
		}
		if m := e.member(key); m != nil {
			m.raw = val
			m.n++
		}
	}
	e.methodName, e.methodOK = decodeMethod(e.Method.raw)
	e.version = metaVersionOf(e.Params.raw)
	return e, true
}

// scanEnvelope is json.Valid(obj) and walkEnvelope(obj) in one pass, for
// an object whose member names (at its top level) are plain and which
// nests no deeper than maxScanDepth; ok is false for any other obj, valid
// or not, which is left to the general path.
func scanEnvelope(obj []byte) (*envelope, bool) {
	if len(obj) == 0 || obj[0] != '{' {
		return nil, false
	}
	e := new(envelope)
	plain := true
	end, ok := jsonScanner{b: obj}.container(0, 1, func(key, val []byte) {
		if !plainName(key) {
			plain = false
		} else if m := e.member(key); m != nil {
			m.raw = val
			m.n++
		}
	})
	if !ok || !plain || end != len(obj) {
		return nil, false
	}
	e.methodName, e.methodOK = decodeMethod(e.Method.raw)
	e.version = metaVersionOf(e.Params.raw)
	return e, true
}

// member is the field a plain member name is matched to, as encoding/json
// matches it (exactly, else ASCII case-insensitively), or nil.
func (e *envelope) member(key []byte) *envelopeMember {
	switch {
	case asciiFold(key, "id"):
		return &e.ID
	case asciiFold(key, "method"):
		return &e.Method
	case asciiFold(key, "result"):
		return &e.Result
	case asciiFold(key, "error"):
		return &e.Error
	case asciiFold(key, "params"):
		return &e.Params
	}
	return nil
}

// maxScanDepth is how deep jsonScanner follows nested arrays and objects;
// a deeper value is left to json.Valid (whose own bound is far deeper).
const maxScanDepth = 64

// jsonScanner checks JSON values as json.Valid does. It never reports
// valid what json.Valid refuses; what it refuses (or finds too deep) goes
// to json.Valid itself.
type jsonScanner struct{ b []byte }

// space is the index of the first byte at or after i that is not JSON
// white space.
func (s jsonScanner) space(i int) int {
	for i < len(s.b) {
		switch s.b[i] {
		case ' ', '\t', '\r', '\n':
			i++
		default:
			return i
		}
	}
	return i
}

// value checks the value starting at b[i] and returns the index past it.
func (s jsonScanner) value(i, depth int) (int, bool) {
	b := s.b
	if i >= len(b) {
		return 0, false
	}
	switch c := b[i]; {
	case c == '"':
		return s.str(i)
	case c == '{' || c == '[':
		if depth >= maxScanDepth {
			return 0, false
		}
		return s.container(i, depth+1, nil)
	case c == '-' || ('0' <= c && c <= '9'):
		return s.number(i)
	case c == 't':
		return s.literal(i, "true")
	case c == 'f':
		return s.literal(i, "false")
	case c == 'n':
		return s.literal(i, "null")
	}
	return 0, false
}

// container checks the object or array opening at b[i]. member, when not
// nil, is handed each member of the object (its name as written, without
// the quotes, and its raw value).
func (s jsonScanner) container(i, depth int, member func(key, val []byte)) (int, bool) {
	b := s.b
	object := b[i] == '{'
	closer := byte(']')
	if object {
		closer = '}'
	}
	i = s.space(i + 1)
	if i < len(b) && b[i] == closer {
		return i + 1, true
	}
	for {
		var ok bool
		var key []byte
		if object {
			if i >= len(b) || b[i] != '"' {
				return 0, false
			}
			open := i
			if i, ok = s.str(i); !ok {
				return 0, false
			}
			key = b[open+1 : i-1]
			i = s.space(i)
			if i >= len(b) || b[i] != ':' {
				return 0, false
			}
			i = s.space(i + 1)
		}
		start := i
		if i, ok = s.value(i, depth); !ok {
			return 0, false
		}
		if object && member != nil {
			member(key, b[start:i])
		}
		i = s.space(i)
		if i >= len(b) {
			return 0, false
		}
		switch b[i] {
		case closer:
			return i + 1, true
		case ',':
			i = s.space(i + 1)
		default:
			return 0, false
		}
	}
}

// str checks the string opening at b[i]: no control character, escapes
// only of the forms JSON has. Other bytes are taken as they are, as
// json.Valid takes them (it does not check UTF-8).
func (s jsonScanner) str(i int) (int, bool) {
	b := s.b
	for i++; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return i + 1, true
		case c < 0x20:
			return 0, false
		case c == '\\':
			i++
			if i >= len(b) {
				return 0, false
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(b) {
					return 0, false
				}
				for _, h := range b[i+1 : i+5] {
					if !isHex(h) {
						return 0, false
					}
				}
				i += 4
			default:
				return 0, false
			}
		}
	}
	return 0, false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// number checks the number starting at b[i]: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func (s jsonScanner) number(i int) (int, bool) {
	b := s.b
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		i = digits(b, i)
	default:
		return 0, false
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return 0, false
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return 0, false
		}
		i = j
	}
	return i, true
}

// digits is the index past the decimal digits at b[i:].
func digits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}

func (s jsonScanner) literal(i int, lit string) (int, bool) {
	if len(s.b)-i < len(lit) || string(s.b[i:i+len(lit)]) != lit {
		return 0, false
	}
	return i + len(lit), true
}

// metaVersionOf is decodeMetaVersion, walked by hand when params is an
// object whose member names are plain and which has at most one _meta.
func metaVersionOf(params json.RawMessage) string {
	if len(params) == 0 || params[0] != '{' {
		// null, or not an object: what decodeMetaVersion answers.
		return decodeMetaVersion(params)
	}
	var meta []byte
	n := 0
	w := objectWalker{b: params, i: 1}
	for {
		key, val, more := w.next()
		if !more {
			break
		}
		if !plainName(key) {
			return decodeMetaVersion(params)
		}
		if asciiFold(key, "_meta") {
			meta, n = val, n+1
		}
	}
	if n != 1 || meta[0] != '{' {
		// None, several (merged by encoding/json), null, or not an object.
		return decodeMetaVersion(params)
	}
	var version []byte
	w = objectWalker{b: meta, i: 1}
	for {
		key, val, more := w.next()
		if !more {
			break
		}
		if bytes.IndexByte(key, '\\') >= 0 {
			return decodeMetaVersion(params)
		}
		// A map's keys match exactly; the last of a name given twice wins.
		if string(key) == metaProtocolVersion {
			version = val
		}
	}
	if version == nil {
		return ""
	}
	if s, ok := plainString(version); ok {
		return s
	}
	var s string
	if json.Unmarshal(version, &s) != nil {
		return ""
	}
	return s
}

// objectWalker reads the members of a JSON object already checked valid,
// b[i:] being what follows its opening brace (or a member's comma).
type objectWalker struct {
	b []byte
	i int
}

// next is the next member's name as written (without its quotes, escapes
// not decoded) and its raw value, or more false at the object's end.
func (w *objectWalker) next() (key, val []byte, more bool) {
	w.space()
	if w.b[w.i] == '}' {
		return nil, nil, false
	}
	if w.b[w.i] == ',' {
		w.i++
		w.space()
	}
	start := w.i
	w.skip()
	key = w.b[start+1 : w.i-1]
	w.space()
	w.i++ // the colon
	w.space()
	start = w.i
	w.skip()
	return key, w.b[start:w.i], true
}

func (w *objectWalker) space() {
	for w.i < len(w.b) {
		switch w.b[w.i] {
		case ' ', '\t', '\r', '\n':
			w.i++
		default:
			return
		}
	}
}

// skip moves past one value.
func (w *objectWalker) skip() {
	b := w.b
	switch b[w.i] {
	case '"':
		w.i++
		for b[w.i] != '"' {
			if b[w.i] == '\\' {
				w.i++
			}
			w.i++
		}
		w.i++
	case '{', '[':
		depth := 0
		for {
			switch b[w.i] {
			case '"':
				w.skip()
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
			}
			w.i++
			if depth == 0 {
				return
			}
		}
	default: // a number, true, false or null
		for w.i < len(b) {
			switch b[w.i] {
			case ',', '}', ']', ' ', '\t', '\r', '\n':
				return
			}
			w.i++
		}
	}
}

// plainName reports whether a member name as written is printable ASCII
// without escapes: what it says is what it is.
func plainName(key []byte) bool {
	for _, c := range key {
		if c == '\\' || c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// asciiFold reports whether the ASCII name key matches field as
// encoding/json matches a member to a struct field.
func asciiFold(key []byte, field string) bool {
	if len(key) != len(field) {
		return false
	}
	for i := range len(key) {
		c := key[i]
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		f := field[i]
		if 'a' <= f && f <= 'z' {
			f -= 'a' - 'A'
		}
		if c != f {
			return false
		}
	}
	return true
}

// plainString is a JSON string value without escapes, in valid UTF-8,
// decoded: its bytes between the quotes.
func plainString(raw []byte) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	in := raw[1 : len(raw)-1]
	if bytes.IndexByte(in, '\\') >= 0 || !utf8.Valid(in) {
		return "", false
	}
	return string(in), true
}

// method is the message's method as protocolHeaderMismatch reads it: ""
// when there is none (or it is null), and ok false when it is not a string.
func (e *envelope) method() (string, bool) { return e.methodName, e.methodOK }

// metaVersion is the protocol revision the message's params._meta names,
// "" when it names none, or when params (or its _meta) is not an object:
// the checks leave such a message to the SDK.
func (e *envelope) metaVersion() string { return e.version }

func decodeMethod(raw json.RawMessage) (string, bool) {
	if s, ok := plainString(raw); ok {
		return s, true
	}
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

// parsedBody is a body the user limiter read and its envelope (nil when
// parseEnvelope did not make one), handed on as the request's Body: it
// reads as the body would have, and jsonRPCShape finds them there instead
// of reading and decoding the body again. Carried in the Body rather than
// in the context, so no copy of the request is made for it.
type parsedBody struct {
	bytes.Reader
	body []byte
	env  *envelope
}

// Close does nothing: the body was read whole.
func (*parsedBody) Close() error { return nil }

// setParsedBody makes r's Body read body, and carry it and its envelope.
func setParsedBody(r *http.Request, body []byte, env *envelope) {
	p := &parsedBody{body: body, env: env}
	p.Reset(body)
	r.Body = p
}

// parsedBodyOf is what setParsedBody put in r's Body, if it is still
// there; it reads from the start again.
func parsedBodyOf(r *http.Request) (*parsedBody, bool) {
	p, ok := r.Body.(*parsedBody)
	if ok {
		p.Reset(p.body)
	}
	return p, ok
}
