// Package strictjson decodes a configuration file's JSON object into a Go
// struct more strictly than encoding/json: a member name must match a
// field's JSON name exactly (encoding/json also takes "maxcallers" for
// "maxCallers"), a name given twice in one object is refused (encoding/json
// keeps the last silently), and every refusal names its place: line,
// column and the JSON path, so the operator can find it in the file.
package strictjson

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
)

// The kinds of refusal, matched with errors.Is.
var (
	ErrMalformed    = errors.New("malformed JSON")
	ErrUnknownField = errors.New("unknown field")
	ErrDuplicateKey = errors.New("duplicate field")
)

// maxDepth is deeper than any configuration file nests.
const maxDepth = 32

// Decode decodes the one JSON object in data into v (a pointer to a
// struct), refusing unknown or differently spelled member names, names
// given twice and anything after the object. Members of types that decode
// themselves (json.Unmarshaler, encoding.TextUnmarshaler) and of
// interface or map[string]any types are checked for duplicates only.
func Decode(data []byte, v any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return fmt.Errorf("%w: the file is empty", ErrMalformed)
	}
	w := walker{data: data, dec: json.NewDecoder(bytes.NewReader(data))}
	w.dec.UseNumber()
	if err := w.walk(reflect.TypeOf(v), "", 0); err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			line, col := Position(data, syn.Offset)
			return fmt.Errorf("%w at line %d, column %d: %w", ErrMalformed, line, col, err)
		}
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return fmt.Errorf("%w: the file ends inside the JSON object", ErrMalformed)
		}
		return err
	}
	after := w.keyStart()
	if _, err := w.dec.Token(); !errors.Is(err, io.EOF) {
		line, col := Position(data, after)
		return fmt.Errorf("%w: data after the JSON object at line %d, column %d", ErrMalformed, line, col)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			// te.Offset is just after the value, on the value's line.
			line, _ := Position(data, te.Offset)
			return fmt.Errorf("%w: %s at line %d is a JSON %s where a %s is wanted (%w)", ErrMalformed,
				DisplayPath(te.Field), line, te.Value, te.Type, err)
		}
		return fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return nil
}

type walker struct {
	data []byte
	dec  *json.Decoder
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// schema reduces t to what the walk checks: nil when anything goes.
func schema(t reflect.Type) reflect.Type {
	for t != nil && t.Kind() == reflect.Pointer {
		if t.Implements(jsonUnmarshaler) || t.Implements(textUnmarshaler) {
			return nil
		}
		t = t.Elem()
	}
	if t == nil || reflect.PointerTo(t).Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler) {
		return nil
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map, reflect.Slice, reflect.Array:
		return t
	}
	return nil
}

func (w *walker) walk(t reflect.Type, path string, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("%w: nested deeper than %d at %s", ErrMalformed, maxDepth, DisplayPath(path))
	}
	t = schema(t)
	tok, err := w.dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		var fields map[string]reflect.Type
		if t != nil && t.Kind() == reflect.Struct {
			fields = jsonFields(t)
		}
		seen := make(map[string]int64)
		for w.dec.More() {
			at := w.keyStart()
			kt, err := w.dec.Token()
			if err != nil {
				return err
			}
			key, _ := kt.(string)
			line, col := Position(w.data, at)
			if first, dup := seen[key]; dup {
				fl, fc := Position(w.data, first)
				return fmt.Errorf("%w %s at line %d, column %d (%s), first given at line %d, column %d",
					ErrDuplicateKey, strconv.Quote(key), line, col, DisplayPath(JoinPath(path, key)), fl, fc)
			}
			seen[key] = at
			var elem reflect.Type
			switch {
			case fields != nil:
				ft, known := fields[key]
				if !known {
					return unknown(key, fields, line, col, path)
				}
				elem = ft
			case t != nil && t.Kind() == reflect.Map:
				elem = t.Elem()
			}
			if err := w.walk(elem, JoinPath(path, key), depth+1); err != nil {
				return err
			}
		}
		_, err = w.dec.Token()
		return err
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
		_, err = w.dec.Token()
		return err
	}
	return nil
}

// keyStart is the offset of the next token (a key's opening quote): the
// decoder's offset is just after the previous token, before any comma and
// spaces.
func (w *walker) keyStart() int64 {
	at := w.dec.InputOffset()
	for at < int64(len(w.data)) {
		switch w.data[at] {
		case ' ', '\t', '\r', '\n', ',':
			at++
			continue
		}
		break
	}
	return at
}

func unknown(key string, fields map[string]reflect.Type, line, col int, path string) error {
	err := fmt.Errorf("%w %s at line %d, column %d (in %s)", ErrUnknownField, strconv.Quote(key), line, col, DisplayPath(path))
	for name := range fields {
		if strings.EqualFold(name, key) {
			return fmt.Errorf("%w; member names are case-sensitive: did you mean %s?", err, strconv.Quote(name))
		}
	}
	return err
}

// jsonFields maps each JSON member name of struct t to its field's type,
// as encoding/json names them (tag name, or the Go name), following
// embedded structs.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := make(map[string]reflect.Type)
	for _, f := range reflect.VisibleFields(t) {
		if !f.IsExported() || len(f.Index) > 1 && !isPromoted(t, f) {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			continue // its fields are listed themselves
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
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
