// Package strictjson decodes a configuration file's JSON object into a Go
// struct more strictly than encoding/json: a member name must match a
// field's JSON name exactly (encoding/json also takes "maxcallers" for
// "maxCallers"), a name given twice in one object is refused (encoding/json
// keeps the last silently), a value of the wrong type is refused at its own
// place, and every refusal names its place: the file, the line and column
// and, for a member or value, its JSON path, so the operator can find it:
//
//	/etc/pdmcp/mcp-http.json: maxcallers at line 9, column 3: unknown field: member names are case-sensitive: did you mean "maxCallers"?
//	/etc/pdmcp/config.json: not valid JSON at line 4, column 2: invalid character '}' looking for object key string
//	/etc/pdmcp/config.json is empty: it should hold the service's settings as a JSON object
package strictjson

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pdmcp/pdmcp/internal/fileerr"
	"github.com/pdmcp/pdmcp/internal/suggest"
)

// The kinds of refusal, matched with errors.Is on an [*Error]. An empty
// file is an [*fileerr.EmptyError] (ErrEmpty).
var (
	ErrEmpty        = fileerr.ErrEmpty
	ErrMalformed    = errors.New("not valid JSON")
	ErrUnknownField = errors.New("unknown field")
	ErrDuplicateKey = errors.New("given twice")
	// ErrWrongType: a value of another JSON type than its field's, or one
	// its field's type refuses (a time that is not RFC 3339). It matches
	// ErrMalformed too.
	ErrWrongType = errors.New("wrong type")
)

// maxDepth is deeper than any configuration file nests.
const maxDepth = 32

// Error is a refusal of a JSON file that names its place: the line and
// column, and for a member or value the JSON path the operator would look
// for (provider.allowedAlgs[1]).
type Error struct {
	File string // the file as the operator named it; "" when only bytes were decoded
	Kind error  // ErrMalformed, ErrUnknownField, ErrDuplicateKey or ErrWrongType
	// Field is the JSON path of the member or value; "" for the top level.
	// A syntax error (ErrMalformed) has none.
	Field        string
	Line, Column int
	Problem      string // what is wrong, in words
	Err          error  // the decoder's own error, when there is one
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File + ": ")
	}
	if e.Kind == ErrMalformed {
		fmt.Fprintf(&b, "not valid JSON at line %d, column %d: %s", e.Line, e.Column, e.Problem)
		return b.String()
	}
	fmt.Fprintf(&b, "%s at line %d, column %d: %s", DisplayPath(e.Field), e.Line, e.Column, e.Problem)
	return b.String()
}

// Is matches the error's kind; a wrong type matches ErrMalformed too.
func (e *Error) Is(target error) bool {
	return target == e.Kind || target == ErrMalformed && e.Kind == ErrWrongType
}

func (e *Error) Unwrap() error { return e.Err }

// File describes the JSON file Decode reads, for its messages.
type File struct {
	// Path is the file as the operator named it; every refusal starts
	// with it.
	Path string
	// Holds says what the file should hold, for the refusal of an empty
	// file: "<Path> is empty: it should hold <Holds>".
	Holds string
	// FoldMapKeys refuses two keys of one map (not a struct's members,
	// which must match exactly anyway) that differ only in case: ids that
	// become file names name one file where case is ignored.
	FoldMapKeys bool
}

// Decode decodes the one JSON object in data into v (a pointer to a
// struct), refusing unknown or differently spelled member names, names
// given twice, values of the wrong type and anything after the object.
// Members of types that decode themselves (json.Unmarshaler,
// encoding.TextUnmarshaler) are decoded alone to place their refusals;
// interface and map[string]any values are checked for duplicates only.
// Refusals are [*Error] or, for an empty file, [*fileerr.EmptyError].
func (f File) Decode(data []byte, v any) error {
	name := f.Path
	if name == "" {
		name = "the JSON"
	}
	holds := f.Holds
	if holds == "" {
		holds = "a JSON object"
	}
	if err := fileerr.CheckEmpty(name, data, holds); err != nil {
		return err
	}
	err := f.decode(data, v)
	var e *Error
	if errors.As(err, &e) {
		e.File = f.Path
	}
	return err
}

// Decode decodes data as [File.Decode] does, for bytes that are no file:
// refusals name no file.
func Decode(data []byte, v any) error { return File{}.Decode(data, v) }

func (f File) decode(data []byte, v any) error {
	w := walker{data: data, dec: json.NewDecoder(bytes.NewReader(data)), fold: f.FoldMapKeys}
	w.dec.UseNumber()
	if err := w.walk(reflect.TypeOf(v), "", 0); err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			line, col := Position(data, syntaxOffset(data, syn))
			return &Error{Kind: ErrMalformed, Line: line, Column: col, Problem: syn.Error(), Err: err}
		}
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			line, col := Position(data, int64(len(data)))
			return &Error{Kind: ErrMalformed, Line: line, Column: col, Problem: "the file ends before the JSON object does", Err: err}
		}
		return err
	}
	after := w.nextToken()
	if _, err := w.dec.Token(); !errors.Is(err, io.EOF) {
		line, col := Position(data, after)
		return &Error{Kind: ErrMalformed, Line: line, Column: col, Problem: "more after the JSON object; the file holds one object"}
	}
	// The walk checked names, duplicates and types; what is left is the
	// decoding itself.
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		e := &Error{Kind: ErrWrongType, Line: 1, Column: 1, Problem: err.Error(), Err: err}
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			e.Field = te.Field
			e.Line, e.Column = Position(data, te.Offset)
		}
		return e
	}
	return nil
}

// syntaxOffset is the offset of the character a syntax error names. The
// decoder's offset is that character's for most errors but the one before
// it inside a literal (tru}).
func syntaxOffset(data []byte, syn *json.SyntaxError) int64 {
	off := syn.Offset
	rest, ok := strings.CutPrefix(syn.Error(), "invalid character '")
	if !ok || len(rest) < 2 || rest[1] != '\'' || off < 0 || off+1 >= int64(len(data)) {
		return off
	}
	if c := rest[0]; data[off] != c && data[off+1] == c {
		return off + 1
	}
	return off
}

type walker struct {
	data []byte
	dec  *json.Decoder
	fold bool
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// decodesItself reports whether encoding/json hands t's JSON to t's own
// method.
func decodesItself(t reflect.Type) bool {
	return t.Implements(jsonUnmarshaler) || t.Implements(textUnmarshaler) ||
		reflect.PointerTo(t).Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler)
}

// schema reduces t to what the walk looks into: a struct, map, slice or
// array; nil for a value checked whole (a scalar, a type that decodes
// itself, []byte) or when anything goes.
func schema(t reflect.Type) reflect.Type {
	for t != nil && t.Kind() == reflect.Pointer && !decodesItself(t) {
		t = t.Elem()
	}
	if t == nil || decodesItself(t) {
		return nil
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map, reflect.Array:
		return t
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 && !decodesItself(t.Elem()) {
			return nil // base64 in a string
		}
		return t
	}
	return nil
}

// leaf is t when a value of it is to be decoded alone to check its type:
// nil for an interface (anything goes) or no type.
func leaf(t reflect.Type) reflect.Type {
	if t == nil || t.Kind() == reflect.Interface {
		return nil
	}
	return t
}

func (w *walker) walk(t reflect.Type, path string, depth int) error {
	start := w.nextToken()
	if depth > maxDepth {
		line, col := Position(w.data, start)
		return &Error{Kind: ErrMalformed, Line: line, Column: col,
			Problem: fmt.Sprintf("nested deeper than %d levels, at %s", maxDepth, DisplayPath(path))}
	}
	orig := t
	t = schema(t)
	tok, err := w.dec.Token()
	if err != nil {
		return err
	}
	if t != nil {
		if err := w.wantKind(t, tok, path, start); err != nil {
			return err
		}
	}
	switch tok {
	case json.Delim('{'):
		if err := w.object(t, path, depth); err != nil {
			return err
		}
	case json.Delim('['):
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for i := 0; w.dec.More(); i++ {
			if err := w.walk(elem, fmt.Sprintf("%s[%d]", path, i), depth+1); err != nil {
				return err
			}
		}
		if _, err := w.dec.Token(); err != nil {
			return err
		}
	}
	if lt := leaf(orig); t == nil && lt != nil {
		return w.checkLeaf(lt, path, start, w.dec.InputOffset())
	}
	return nil
}

// object walks an object's members after its '{', up to its '}'.
func (w *walker) object(t reflect.Type, path string, depth int) error {
	var fields map[string]field
	if t != nil && t.Kind() == reflect.Struct {
		fields = jsonFields(t)
	}
	fold := w.fold && t != nil && t.Kind() == reflect.Map
	type first struct {
		key string
		at  int64
	}
	seen := make(map[string]first)
	for w.dec.More() {
		at := w.nextToken()
		kt, err := w.dec.Token()
		if err != nil {
			return err
		}
		key, _ := kt.(string)
		member := JoinPath(path, key)
		line, col := Position(w.data, at)
		same := key
		if fold {
			same = strings.ToLower(key)
		}
		if f, dup := seen[same]; dup {
			fl, fc := Position(w.data, f.at)
			problem := fmt.Sprintf("given twice (first at line %d, column %d); keep one", fl, fc)
			if f.key != key {
				problem = fmt.Sprintf("given twice: %s at line %d, column %d differs only in case, and ids that differ only in case name one file; keep one",
					strconv.Quote(f.key), fl, fc)
			}
			return &Error{Kind: ErrDuplicateKey, Field: member, Line: line, Column: col, Problem: problem}
		}
		seen[same] = first{key, at}
		var elem reflect.Type
		switch {
		case fields != nil:
			f, known := fields[key]
			if !known {
				return unknown(key, fields, member, line, col)
			}
			if f.quoted && leaf(f.typ) != nil && schema(f.typ) == nil {
				start := w.nextToken()
				if err := w.walk(nil, member, depth+1); err != nil {
					return err
				}
				if err := w.checkQuoted(f.typ, member, start, w.dec.InputOffset()); err != nil {
					return err
				}
				continue
			}
			elem = f.typ
		case t != nil && t.Kind() == reflect.Map:
			elem = t.Elem()
		}
		if err := w.walk(elem, member, depth+1); err != nil {
			return err
		}
	}
	_, err := w.dec.Token()
	return err
}

// wantKind refuses a token that cannot start a value of t (a struct, map,
// slice or array); null is taken, as encoding/json takes it.
func (w *walker) wantKind(t reflect.Type, tok json.Token, path string, start int64) error {
	want := json.Delim('[')
	if t.Kind() == reflect.Struct || t.Kind() == reflect.Map {
		want = json.Delim('{')
	}
	if tok == nil || tok == want {
		return nil
	}
	line, col := Position(w.data, start)
	return &Error{Kind: ErrWrongType, Field: path, Line: line, Column: col,
		Problem: fmt.Sprintf("a JSON %s where %s is wanted", jsonKind(tok), words(t))}
}

// checkLeaf decodes the value at data[start:end] alone into a new t, so a
// value of the wrong type is refused at its own place and path.
func (w *walker) checkLeaf(t reflect.Type, path string, start, end int64) error {
	err := json.Unmarshal(w.data[start:end], reflect.New(t).Interface())
	if err == nil {
		return nil
	}
	line, col := Position(w.data, start)
	e := &Error{Kind: ErrWrongType, Field: path, Line: line, Column: col, Problem: err.Error(), Err: err}
	var te *json.UnmarshalTypeError
	switch {
	case t == reflect.TypeFor[time.Time]():
		e.Problem = "a time is wanted, in RFC 3339 form such as 2026-01-02T15:04:05Z"
	case errors.As(err, &te):
		e.Problem = fmt.Sprintf("a JSON %s where %s is wanted", te.Value, words(te.Type))
	}
	return e
}

// checkQuoted decodes the value at data[start:end] alone as a field of t
// tagged ",string" decodes it: a JSON string holding t's JSON.
func (w *walker) checkQuoted(t reflect.Type, path string, start, end int64) error {
	holder := reflect.StructOf([]reflect.StructField{{Name: "V", Type: t, Tag: `json:"v,string"`}})
	raw := append(append([]byte(`{"v":`), w.data[start:end]...), '}')
	if err := json.Unmarshal(raw, reflect.New(holder).Interface()); err != nil {
		line, col := Position(w.data, start)
		return &Error{Kind: ErrWrongType, Field: path, Line: line, Column: col, Err: err,
			Problem: fmt.Sprintf("a JSON string holding %s is wanted", words(t))}
	}
	return nil
}

// jsonKind names a token's JSON type.
func jsonKind(tok json.Token) string {
	switch tok.(type) {
	case json.Delim:
		if tok == json.Delim('{') {
			return "object"
		}
		return "array"
	case string:
		return "string"
	case bool:
		return "bool"
	case json.Number, float64:
		return "number"
	}
	return "value"
}

// words names what a value of t is in JSON, for a refusal.
func words(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "a whole number"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number, 0 or more"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return "a " + t.String()
}

// nextToken is the offset of the next token: the decoder's offset is just
// after the previous token, before any comma, colon and spaces.
func (w *walker) nextToken() int64 {
	at := w.dec.InputOffset()
	for at < int64(len(w.data)) {
		switch w.data[at] {
		case ' ', '\t', '\r', '\n', ',', ':':
			at++
			continue
		}
		break
	}
	return at
}

// unknown refuses a member the struct does not have, naming the member
// meant when one is near: the same name in another case, or one a typo
// away (two edits, one for a name of four letters or fewer).
func unknown(key string, fields map[string]field, member string, line, col int) error {
	e := &Error{Kind: ErrUnknownField, Field: member, Line: line, Column: col,
		Problem: "unknown field: remove it or check its spelling"}
	// A short name is near another at one edit, a longer one at two.
	best, bestDist := "", 3
	if len(key) <= 4 {
		bestDist = 2
	}
	for _, name := range slices.Sorted(maps.Keys(fields)) {
		if strings.EqualFold(name, key) {
			e.Problem = fmt.Sprintf("unknown field: member names are case-sensitive: did you mean %s?", strconv.Quote(name))
			return e
		}
		if d := suggest.Distance(strings.ToLower(name), strings.ToLower(key)); d < bestDist {
			best, bestDist = name, d
		}
	}
	if best != "" {
		e.Problem = fmt.Sprintf("unknown field: did you mean %s? If not, remove it", strconv.Quote(best))
	}
	return e
}

// field is a struct field as the walk sees it: its type, and whether it is
// tagged ",string" (a scalar written as a JSON string).
type field struct {
	typ    reflect.Type
	quoted bool
}

// jsonFields maps each JSON member name of struct t to its field's type,
// as encoding/json names them (tag name, or the Go name; a tag "-,omitempty" names
// a member "-"), following embedded structs.
func jsonFields(t reflect.Type) map[string]field {
	out := make(map[string]field)
	for _, f := range reflect.VisibleFields(t) {
		if !f.IsExported() || len(f.Index) > 1 && !isPromoted(t, f) {
			continue
		}
		name, opts, comma := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" && !comma {
			continue
		}
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			continue // its fields are listed themselves
		}
		if name == "" {
			name = f.Name
		}
		out[name] = field{typ: f.Type, quoted: slices.Contains(strings.Split(opts, ","), "string")}
	}
	return out
}

// isPromoted reports whether a field of an embedded struct reaches t's
// JSON object: only through untagged anonymous structs.
func isPromoted(t reflect.Type, f reflect.StructField) bool {
	for _, i := range f.Index[:len(f.Index)-1] {
		sf := t.Field(i)
		if !sf.Anonymous || sf.Tag.Get("json") != "" {
			return false
		}
		t = sf.Type
		if t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
	}
	return true
}

// JoinPath extends a JSON path such as provider.allowedAlgs[1] with key,
// quoting a key that holds anything but letters, digits, '-' and '_' so the
// path stays unambiguous. grant's decoder names its fields the same way.
func JoinPath(parent, key string) string {
	plain := key != ""
	for _, r := range key {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			plain = false
			break
		}
	}
	if !plain {
		key = strconv.Quote(key)
	}
	if parent == "" {
		return key
	}
	return parent + "." + key
}

// DisplayPath is a JSON path as a message names it: "the top level" for
// the empty path.
func DisplayPath(p string) string {
	if p == "" {
		return "the top level"
	}
	return p
}

// Position turns a byte offset into a 1-based line and column.
func Position(data []byte, offset int64) (line, col int) {
	offset = min(max(offset, 0), int64(len(data)))
	before := data[:offset]
	line = bytes.Count(before, []byte("\n")) + 1
	col = int(offset) - bytes.LastIndexByte(before, '\n')
	return line, col
}
