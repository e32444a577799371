package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"

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
	var fields map[string]json.RawMessage
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
		if err := checkType(schema.Properties[name], v); err != nil {
			return in, refuseCode(refusal.InvalidArgument, "argument %q %s; call again with a valid value", name, err.Error())
		}
	}
	if err := json.Unmarshal(raw, &in); err != nil {
		return in, refuseCode(refusal.InvalidArgument, "the arguments do not match the tool's input schema; call again with valid values")
	}
	return in, nil
}

// checkType compares a JSON value's kind with the property's declared type
// (the inferred schemas use only string, integer, boolean and their nullable
// forms), and enforces declared string length bounds.
func checkType(p *jsonschema.Schema, v json.RawMessage) error {
	types := p.Types
	if p.Type != "" {
		types = []string{p.Type}
	}
	var val any
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.UseNumber()
	if err := dec.Decode(&val); err != nil {
		return fmt.Errorf("is not valid JSON")
	}
	kind := "null"
	switch x := val.(type) {
	case string:
		kind = "string"
		if p.MinLength != nil && len([]rune(x)) < *p.MinLength {
			return fmt.Errorf("must be at least %d characters", *p.MinLength)
		}
		if p.MaxLength != nil && len([]rune(x)) > *p.MaxLength {
			return fmt.Errorf("must be at most %d characters", *p.MaxLength)
		}
	case bool:
		kind = "boolean"
	case json.Number:
		kind = "number"
		if _, err := x.Int64(); err == nil {
			kind = "integer"
		}
	case []any:
		kind = "array"
	case map[string]any:
		kind = "object"
	}
	for _, t := range types {
		if t == kind || (t == "number" && kind == "integer") {
			return nil
		}
	}
	return fmt.Errorf("must be of type %v, not %s", types, kind)
}
