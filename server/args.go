package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/pdmcp/pdmcp/server/refusal"
)

// inputSchema infers a closed object schema from In: every field is a
// declared property, additionalProperties is false.
func inputSchema[In any]() (*jsonschema.Schema, error) {
	s, err := jsonschema.For[In](&jsonschema.ForOptions{})
	if err != nil {
		return nil, fmt.Errorf("input schema for %s: %w", reflect.TypeFor[In](), err)
	}
	if s.Type != "object" {
		return nil, fmt.Errorf("input schema for %s is not an object", reflect.TypeFor[In]())
	}
	s.AdditionalProperties = &jsonschema.Schema{Not: &jsonschema.Schema{}}
	return s, nil
}

// decodeArgs decodes a call's arguments into In, refusing what the schema
// does not declare (never dropping it), what it requires but is missing, and
// values of the wrong type. The refusal names the argument.
func decodeArgs[In any](raw json.RawMessage, schema *jsonschema.Schema) (In, *Refusal) {
	var in In
	if len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		raw = []byte("{}")
	}
	var fields map[string]rawArg
	if err := json.Unmarshal(raw, &fields); err != nil {
		return in, refuseCode(refusal.InvalidArgument, "the arguments must be a JSON object; fix the call and try again")
	}
	var extra []string
	for name := range fields {
		if _, ok := schema.Properties[name]; !ok {
			extra = append(extra, name)
		}
	}
	if len(extra) > 0 {
		sort.Strings(extra)
		return in, refuseCode(refusal.UnexpectedArgument,
			"argument %q is not declared by this tool and was not used; call again with only the declared arguments", extra[0])
	}
	for _, name := range schema.Required {
		v, ok := fields[name]
		if !ok || bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
			return in, refuseCode(refusal.MissingArgument, "argument %q is required; call again with it", name)
		}
	}
	for name, v := range fields {
		if err := checkType(schema.Properties[name], json.RawMessage(v)); err != nil {
			return in, refuseCode(refusal.InvalidArgument, "argument %q %s; call again with a valid value", name, err.Error())
		}
	}
	if decodeStrings(&in, fields) {
		return in, nil
	}
	in = *new(In)
	if err := json.Unmarshal(raw, &in); err != nil {
		return in, refuseCode(refusal.InvalidArgument, "the arguments do not match the tool's input schema; call again with valid values")
	}
	return in, nil
}

// decodeStrings sets in's fields from fields, as json.Unmarshal of the
// arguments into In would, when each one names a string field of In by its
// JSON name: every tool's arguments but the file tools', once decodeArgs has
// checked them (declared names, values of the declared type). It reports
// false for anything else, which is left to json.Unmarshal.
func decodeStrings[In any](in *In, fields map[string]rawArg) bool {
	v := reflect.ValueOf(in).Elem()
	t := v.Type()
	if t.Kind() != reflect.Struct {
		return false
	}
	for name, raw := range fields {
		i := fieldNamed(t, name)
		if i < 0 || t.Field(i).Type.Kind() != reflect.String || len(raw) < 2 || raw[0] != '"' {
			return false
		}
		s, ok := plainJSONString(raw)
		if !ok && json.Unmarshal(raw, &s) != nil {
			return false
		}
		v.Field(i).SetString(s)
	}
	return true
}

// fieldNamed is the index of t's exported field whose JSON name is name,
// or -1.
func fieldNamed(t reflect.Type, name string) int {
	for i := range t.NumField() {
		f := t.Field(i)
		if tag, _, _ := strings.Cut(f.Tag.Get("json"), ","); tag == name && f.IsExported() && !f.Anonymous {
			return i
		}
	}
	return -1
}

// plainJSONString is the value of a JSON string with no escape whose bytes
// are UTF-8: its bytes as they are. Any other is left to json.Unmarshal.
func plainJSONString(raw []byte) (string, bool) {
	body := raw[1 : len(raw)-1]
	if raw[len(raw)-1] != '"' || bytes.IndexByte(body, '\\') >= 0 || !utf8.Valid(body) {
		return "", false
	}
	return string(body), true
}

// rawArg is json.RawMessage without the copy: it keeps the bytes it is
// handed, a part of the call's arguments, which are not changed while they
// are read.
type rawArg []byte

func (r *rawArg) UnmarshalJSON(b []byte) error {
	*r = b
	return nil
}

// checkType compares a JSON value's kind with the property's declared type
// (the inferred schemas use only string, integer, boolean and their nullable
// forms), and enforces declared string length bounds. v is one valid JSON
// value, as decoded into a json.RawMessage: its first byte tells its kind,
// and only a string with bounds to check is decoded.
func checkType(p *jsonschema.Schema, v json.RawMessage) error {
	if len(v) == 0 {
		return fmt.Errorf("is not valid JSON")
	}
	var kind string
	switch v[0] {
	case '"':
		kind = "string"
		if p.MinLength != nil || p.MaxLength != nil {
			var x string
			if err := json.Unmarshal(v, &x); err != nil {
				return fmt.Errorf("is not valid JSON")
			}
			n := utf8.RuneCountInString(x)
			if p.MinLength != nil && n < *p.MinLength {
				return fmt.Errorf("must be at least %d characters", *p.MinLength)
			}
			if p.MaxLength != nil && n > *p.MaxLength {
				return fmt.Errorf("must be at most %d characters", *p.MaxLength)
			}
		}
	case 't', 'f':
		kind = "boolean"
	case 'n':
		kind = "null"
	case '[':
		kind = "array"
	case '{':
		kind = "object"
	default:
		kind = "number"
		if _, err := strconv.ParseInt(string(v), 10, 64); err == nil {
			kind = "integer"
		}
	}
	if p.Type != "" {
		if typeAllows(p.Type, kind) {
			return nil
		}
		return fmt.Errorf("must be of type %v, not %s", []string{p.Type}, kind)
	}
	for _, t := range p.Types {
		if typeAllows(t, kind) {
			return nil
		}
	}
	return fmt.Errorf("must be of type %v, not %s", p.Types, kind)
}

// typeAllows reports whether a value of kind is of the declared type t.
func typeAllows(t, kind string) bool {
	return t == kind || (t == "number" && kind == "integer")
}

// argDecoder is decodeArgs for one tool's In and closed schema, with a
// one-pass walk, planned once per tool, for the common arguments: a flat
// object of plain strings (no escape, UTF-8) each set straight into a
// string field of In. Those need neither the map decodeArgs builds nor
// json.Unmarshal's reflection; anything else goes to decodeArgs.
type argDecoder[In any] struct {
	schema *jsonschema.Schema
	// plain are the declared arguments the walk may take: unbounded
	// strings that name a string field of In. required has a bit set for
	// each of them the schema requires; flat is false when the walk can
	// never apply (In is not a struct, a required argument is not plain).
	plain    []plainArg
	required uint64
	flat     bool
}

// plainArg is a declared string argument and the index of its field in In.
type plainArg struct {
	name  string
	field int
}

// newArgDecoder plans the walk for In under schema, as inputSchema[In]
// made it.
func newArgDecoder[In any](schema *jsonschema.Schema) *argDecoder[In] {
	d := &argDecoder[In]{schema: schema}
	t := reflect.TypeFor[In]()
	if t.Kind() != reflect.Struct {
		return d
	}
	names := make([]string, 0, len(schema.Properties))
	for name := range schema.Properties {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		p := schema.Properties[name]
		i := fieldNamed(t, name)
		if i < 0 || t.Field(i).Type.Kind() != reflect.String || p.MinLength != nil || p.MaxLength != nil ||
			checkType(p, json.RawMessage(`""`)) != nil {
			continue
		}
		d.plain = append(d.plain, plainArg{name: name, field: i})
	}
	if len(d.plain) > 64 {
		return d
	}
	for _, name := range schema.Required {
		a := d.lookup([]byte(name))
		if a < 0 {
			return d
		}
		d.required |= 1 << a
	}
	d.flat = true
	return d
}

// decode is decodeArgs[In](raw, d.schema).
func (d *argDecoder[In]) decode(raw json.RawMessage) (In, *Refusal) {
	if in, ok := d.walk(raw); ok {
		return in, nil
	}
	return decodeArgs[In](raw, d.schema)
}

// walk decodes raw when it is a JSON object (JSON white space allowed
// around its parts) whose members are all plain arguments with plain
// string values, with every required one among them: arguments decodeArgs
// accepts and decodes the same (a repeated name's last value is kept, as
// json.Unmarshal keeps it). It reports false for anything else, refusals
// included, so that every refusal is decodeArgs' own.
func (d *argDecoder[In]) walk(raw []byte) (In, bool) {
	var in In
	if !d.flat {
		return in, false
	}
	v := reflect.ValueOf(&in).Elem()
	i := skipJSONSpace(raw, 0)
	if i == len(raw) || raw[i] != '{' {
		return in, false
	}
	i = skipJSONSpace(raw, i+1)
	var seen uint64
	if i < len(raw) && raw[i] == '}' {
		i++
	} else {
		for {
			name, j, ok := plainString(raw, i)
			if !ok {
				return in, false
			}
			a := d.lookup(name)
			if a < 0 {
				return in, false
			}
			j = skipJSONSpace(raw, j)
			if j == len(raw) || raw[j] != ':' {
				return in, false
			}
			val, j, ok := plainString(raw, skipJSONSpace(raw, j+1))
			if !ok {
				return in, false
			}
			v.Field(d.plain[a].field).SetString(string(val))
			seen |= 1 << a
			j = skipJSONSpace(raw, j)
			if j == len(raw) {
				return in, false
			}
			if raw[j] == '}' {
				i = j + 1
				break
			}
			if raw[j] != ',' {
				return in, false
			}
			i = skipJSONSpace(raw, j+1)
		}
	}
	if skipJSONSpace(raw, i) != len(raw) || seen&d.required != d.required {
		return in, false
	}
	return in, true
}

// lookup is the index in d.plain of the argument named name, or -1.
func (d *argDecoder[In]) lookup(name []byte) int {
	for a := range d.plain {
		if d.plain[a].name == string(name) {
			return a
		}
	}
	return -1
}

// skipJSONSpace is the index of raw's first byte from i that is not JSON
// white space, or len(raw).
func skipJSONSpace(raw []byte, i int) int {
	for i < len(raw) && (raw[i] == ' ' || raw[i] == '\t' || raw[i] == '\n' || raw[i] == '\r') {
		i++
	}
	return i
}

// plainString is the body of the JSON string at raw[i] when it has no
// escape, no control character and is UTF-8 (a string whose value is its
// bytes as they are), and the index just past its closing quote.
func plainString(raw []byte, i int) ([]byte, int, bool) {
	if i == len(raw) || raw[i] != '"' {
		return nil, 0, false
	}
	ascii := true
	for j := i + 1; j < len(raw); j++ {
		switch c := raw[j]; {
		case c == '"':
			body := raw[i+1 : j]
			if !ascii && !utf8.Valid(body) {
				return nil, 0, false
			}
			return body, j + 1, true
		case c == '\\' || c < 0x20:
			return nil, 0, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, 0, false
}
