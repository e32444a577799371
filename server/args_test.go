package server

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/pdmcp/pdmcp/server/refusal"
)

type sampleArgs struct {
	DocumentID string `json:"documentId" jsonschema:"the document id"`
	Category   string `json:"category,omitempty"`
	Count      int    `json:"count,omitempty"`
}

func TestDecodeArgs(t *testing.T) {
	schema, err := inputSchema[sampleArgs]()
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(schema.AdditionalProperties); string(b) != `false` {
		t.Fatalf("schema is not closed: additionalProperties=%s", b)
	}
	tests := []struct {
		name string
		raw  string
		code string
	}{
		{"ok", `{"documentId":"a"}`, ""},
		{"ok optional", `{"documentId":"a","category":"c","count":3}`, ""},
		{"undeclared", `{"documentId":"a","ttag":"x"}`, string(refusal.UnexpectedArgument)},
		{"missing", `{"category":"c"}`, string(refusal.MissingArgument)},
		{"null required", `{"documentId":null}`, string(refusal.MissingArgument)},
		{"wrong type", `{"documentId":7}`, string(refusal.InvalidArgument)},
		{"fraction for int", `{"documentId":"a","count":1.5}`, string(refusal.InvalidArgument)},
		{"not an object", `["a"]`, string(refusal.InvalidArgument)},
		{"empty is no args", ``, string(refusal.MissingArgument)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in, r := decodeArgs[sampleArgs](json.RawMessage(tc.raw), schema)
			if tc.code == "" {
				if r != nil {
					t.Fatalf("refused: %v", r)
				}
				if in.DocumentID != "a" {
					t.Fatalf("decoded %+v", in)
				}
				return
			}
			if r == nil || r.Code != tc.code || r.Layer != "adapter" {
				t.Fatalf("got %+v, want %s", r, tc.code)
			}
		})
	}
}

// TestCheckType: each JSON kind against declared types, nullable forms,
// and string length bounds counted in characters, not bytes.
func TestCheckType(t *testing.T) {
	two, three := 2, 3
	str := &jsonschema.Schema{Type: "string"}
	bounded := &jsonschema.Schema{Type: "string", MinLength: &two, MaxLength: &three}
	integer := &jsonschema.Schema{Type: "integer"}
	number := &jsonschema.Schema{Type: "number"}
	nullableInt := &jsonschema.Schema{Types: []string{"null", "integer"}}
	boolean := &jsonschema.Schema{Type: "boolean"}
	for _, tc := range []struct {
		p    *jsonschema.Schema
		v    string
		want string // "" for accepted
	}{
		{str, `"a"`, ""},
		{str, `"a\"b\u00e9"`, ""},
		{str, `7`, "must be of type [string], not integer"},
		{str, `null`, "must be of type [string], not null"},
		{str, `{"a":1}`, "must be of type [string], not object"},
		{str, `["a"]`, "must be of type [string], not array"},
		{str, `true`, "must be of type [string], not boolean"},
		{bounded, `"ab"`, ""},
		{bounded, `"ééé"`, ""},
		{bounded, `"\u00e9\u00e9"`, ""},
		{bounded, `"a"`, "must be at least 2 characters"},
		{bounded, `"abcd"`, "must be at most 3 characters"},
		{bounded, `"éééé"`, "must be at most 3 characters"},
		{integer, `-12`, ""},
		{integer, `1.5`, "must be of type [integer], not number"},
		{integer, `1e3`, "must be of type [integer], not number"},
		{integer, `99999999999999999999`, "must be of type [integer], not number"},
		{number, `1.5`, ""},
		{number, `3`, ""},
		{nullableInt, `null`, ""},
		{nullableInt, `4`, ""},
		{nullableInt, `"4"`, "must be of type [null integer], not string"},
		{boolean, `false`, ""},
		{boolean, `0`, "must be of type [boolean], not integer"},
	} {
		got := ""
		if err := checkType(tc.p, json.RawMessage(tc.v)); err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("%v %s: got %q, want %q", tc.p.Type+fmt.Sprint(tc.p.Types), tc.v, got, tc.want)
		}
	}
}

// TestDecodeArgsIsUnmarshal: checked arguments come out as json.Unmarshal
// makes them, escapes, invalid UTF-8 and repeated names included, whichever
// way decodeArgs decodes them.
func TestDecodeArgsIsUnmarshal(t *testing.T) {
	for _, raw := range []string{
		`{"documentId":"doc-1"}`,
		`{"documentId":""}`,
		`{"documentId":"a\"b\\c\u00e9\ud83d\ude00\n"}`,
		`{"documentId":"zoë"}`,
		"{\"documentId\":\"a\xffb\"}",
		`{"documentId":"first","documentId":"last"}`,
		` { "documentId" : "spaced" } `,
	} {
		checkDecodesAsUnmarshal[readInput](t, raw)
	}
	for _, raw := range []string{
		`{"documentId":"d","fragmentId":"f","text":"line 1\nline 2 <b>&</b>","idempotencyKey":"k1"}`,
		`{"idempotencyKey":"k2","text":"only","documentId":"d","fragmentId":"f"}`,
	} {
		// Its embedded idempotency key is left to json.Unmarshal.
		checkDecodesAsUnmarshal[saveFragmentInput](t, raw)
	}
	checkDecodesAsUnmarshal[saveInput](t, `{"destinationId":"out","text":"t\u00e9","idempotencyKey":"k3"}`)
	checkDecodesAsUnmarshal[listInput](t, `{}`)
	checkDecodesAsUnmarshal[listInput](t, `{"category":"lab"}`)
	checkDecodesAsUnmarshal[sampleArgs](t, `{"documentId":"n","count":3}`)
	checkDecodesAsUnmarshal[sampleArgs](t, `{"documentId":"n","category":"c"}`)
}

func checkDecodesAsUnmarshal[In any](t *testing.T, raw string) {
	t.Helper()
	schema, err := inputSchema[In]()
	if err != nil {
		t.Fatal(err)
	}
	got, r := decodeArgs[In](json.RawMessage(raw), schema)
	if r != nil {
		t.Fatalf("decodeArgs(%s) refused: %v", raw, r)
	}
	var want In
	if err := json.Unmarshal([]byte(raw), &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decodeArgs(%s) = %+v, json.Unmarshal = %+v", raw, got, want)
	}
}

// boundedArgs has a string argument with length bounds, which only the
// general path checks, and a plain one.
type boundedArgs struct {
	Name string `json:"name"`
	Code string `json:"code"`
}

// argsCases are arguments of every shape, the common ones and hostile
// ones: each must decode (or be refused) alike on both paths.
var argsCases = []string{
	`{"documentId":"doc-1"}`,
	`{"documentId":""}`,
	`{}`,
	` { "documentId" : "spaced" } `,
	"\t{\r\n\"documentId\"\n:\t\"ws\"\r\n}\n",
	`{"documentId":"zoë 日本 😀"}`,
	`{"documentId":"first","documentId":"last"}`,
	`{"documentId":7,"documentId":"last"}`,
	`{"documentId":"first","documentId":7}`,
	`{"documentId":"first","documentId":null}`,
	`{"documentId":"a\"b\\c\u00e9\ud83d\ude00\n"}`,
	`{"documentId":"a\/b"}`,
	`{"document\u0049d":"escaped name"}`,
	"{\"documentId\":\"a\xffb\"}",
	"{\"documentId\":\"a\xc3\"}",
	"{\"documentId\":\"tab\there\"}",
	"{\"documentId\":\"nul\x00\"}",
	"{\"documentId\":\"del\x7f\"}",
	"{\"documentId\xff\":\"x\"}",
	`{"documentid":"case"}`,
	`{"DocumentId":"case"}`,
	`{"documentId":"a","ttag":"x"}`,
	`{"zz":"1","aa":"2","documentId":"a"}`,
	`{"ttag":"x"}`,
	`{"documentId":"a",}`,
	`{"documentId":"a""b":"c"}`,
	`{"documentId":"a" "b":"c"}`,
	`{"documentId":"a"`,
	`{"documentId":"a`,
	`{"documentId":`,
	`{"documentId"`,
	`{"documentId""a"}`,
	`{"documentId"::"a"}`,
	`{,"documentId":"a"}`,
	`{`,
	`}`,
	`{}}`,
	`{"documentId":"a"}}`,
	`{"documentId":"a"} x`,
	`{"documentId":"a"}{}`,
	"\v{\"documentId\":\"a\"}",
	"\u00a0{\"documentId\":\"a\"}",
	`{'documentId':'a'}`,
	`{documentId:"a"}`,
	`{"documentId":null}`,
	`{"documentId":7}`,
	`{"documentId":true}`,
	`{"documentId":["a"]}`,
	`{"documentId":{"a":"b"}}`,
	`{"documentId":"a","count":3}`,
	`{"documentId":"a","count":"3"}`,
	`{"documentId":"a","count":1.5}`,
	`{"documentId":"a","category":"c"}`,
	`{"documentId":"a","category":null}`,
	`{"category":"c"}`,
	`{"category":"lab"}`,
	`{"destinationId":"out","text":"t"}`,
	`{"destinationId":"out","text":"t","idempotencyKey":"k"}`,
	`{"documentId":"d","fragmentId":"f"}`,
	`{"documentId":"d","fragmentId":"f","text":"x","idempotencyKey":"k1"}`,
	`{"stepId":"s"}`,
	`{"path":"a/b.txt"}`,
	`{"name":"ab","code":"c"}`,
	`{"name":"a","code":"c"}`,
	`{"name":"abcd","code":"c"}`,
	`{"code":"c"}`,
	`null`,
	` null `,
	``,
	`   `,
	`[]`,
	`["a"]`,
	`"a"`,
	`7`,
	`true`,
}

// TestArgDecoderIsDecodeArgs: the one-pass walk and the general path give
// the same arguments and the same refusals, for every tool's input type
// and every case; and the common arguments take the walk.
func TestArgDecoderIsDecodeArgs(t *testing.T) {
	two, three := 2, 3
	bounded, err := inputSchema[boundedArgs]()
	if err != nil {
		t.Fatal(err)
	}
	bounded.Properties["name"].MinLength, bounded.Properties["name"].MaxLength = &two, &three
	bounded.Required = []string{"name", "code"}
	for _, raw := range argsCases {
		checkArgDecoder[readInput](t, nil, raw)
		checkArgDecoder[sampleArgs](t, nil, raw)
		checkArgDecoder[listInput](t, nil, raw)
		checkArgDecoder[saveInput](t, nil, raw)
		checkArgDecoder[fragmentInput](t, nil, raw)
		checkArgDecoder[saveFragmentInput](t, nil, raw)
		checkArgDecoder[stepInput](t, nil, raw)
		checkArgDecoder[fileInput](t, nil, raw)
		checkArgDecoder[boundedArgs](t, bounded, raw)
	}
	walks := func(name string, ok bool) {
		t.Helper()
		if !ok {
			t.Errorf("%s was left to the general path", name)
		}
	}
	readArgs := newArgDecoder[readInput](mustSchema[readInput](t))
	for _, raw := range []string{`{"documentId":"doc-1"}`, ` { "documentId" : "zoë" } `, `{"documentId":"a","documentId":"b"}`} {
		_, ok := readArgs.walk([]byte(raw))
		walks(raw, ok)
	}
	_, ok := newArgDecoder[listInput](mustSchema[listInput](t)).walk([]byte(`{}`))
	walks("list's {}", ok)
	_, ok = newArgDecoder[fragmentInput](mustSchema[fragmentInput](t)).walk([]byte(`{"fragmentId":"f","documentId":"d"}`))
	walks("a fragment's arguments", ok)
	_, ok = newArgDecoder[sampleArgs](mustSchema[sampleArgs](t)).walk([]byte(`{"documentId":"n","count":3}`))
	if ok {
		t.Error("an integer argument was walked")
	}
	_, ok = newArgDecoder[boundedArgs](bounded).walk([]byte(`{"name":"abcd","code":"c"}`))
	if ok {
		t.Error("a bounded string argument was walked")
	}
}

// FuzzArgDecoder: whatever the arguments, the walk and the general path
// agree.
func FuzzArgDecoder(f *testing.F) {
	for _, raw := range argsCases {
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		checkArgDecoder[readInput](t, nil, raw)
		checkArgDecoder[fragmentInput](t, nil, raw)
		checkArgDecoder[listInput](t, nil, raw)
	})
}

func mustSchema[In any](t *testing.T) *jsonschema.Schema {
	t.Helper()
	s, err := inputSchema[In]()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// checkArgDecoder compares argDecoder's decode with decodeArgs on raw,
// under schema (In's own when nil). The general path's refusal of a wrong
// type names one argument in map order, so only cases with at most one
// wrong value are compared on its text.
func checkArgDecoder[In any](t *testing.T, schema *jsonschema.Schema, raw string) {
	t.Helper()
	if schema == nil {
		schema = mustSchema[In](t)
	}
	want, wantR := decodeArgs[In](json.RawMessage(raw), schema)
	got, gotR := newArgDecoder[In](schema).decode(json.RawMessage(raw))
	if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(gotR, wantR) {
		t.Errorf("%T %q: decode = %+v, %+v; decodeArgs = %+v, %+v", want, raw, got, gotR, want, wantR)
	}
	if in, ok := newArgDecoder[In](schema).walk([]byte(raw)); ok && (wantR != nil || !reflect.DeepEqual(in, want)) {
		t.Errorf("%T %q: walked to %+v; decodeArgs = %+v, %+v", want, raw, in, want, wantR)
	}
}
