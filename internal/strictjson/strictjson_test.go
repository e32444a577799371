package strictjson

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/internal/fileerr"
)

type inner struct {
	Name string `json:"name"`
}

type embedded struct {
	Shared int `json:"shared"`
}

type doc struct {
	embedded
	Items   []inner          `json:"items"`
	ByID    map[string]inner `json:"byId"`
	Free    map[string]any   `json:"free"`
	When    time.Time        `json:"when"`
	Ptr     *inner           `json:"ptr"`
	Blob    []byte           `json:"blob"`
	Count   uint             `json:"count"`
	Skipped string           `json:"-"`
	Quoted  int64            `json:"quoted,string"`
	GoName  int
}

// TestDecode: each refusal's whole text, with the file named, and the kind
// errors.Is matches.
func TestDecode(t *testing.T) {
	const file = "/etc/pdmcp/doc.json"
	tests := []struct {
		name    string
		in      string
		fold    bool
		wantErr error
		want    string // the whole message
	}{
		{"all members", `{"shared":1,"items":[{"name":"a"}],"byId":{"x":{"name":"b"}},"free":{"Any":1,"any":2},` +
			`"when":"2026-01-02T03:04:05Z","ptr":{"name":"c"},"blob":"AQI=","count":3,"GoName":2,"quoted":"5"}`, false, nil, ""},
		{"quoted number not a number", `{"quoted":"five"}`, false, ErrWrongType, file + `: quoted at line 1, column 11: a JSON string holding a whole number is wanted`},
		{"quoted number unquoted", `{"quoted":5}`, false, ErrWrongType, file + `: quoted at line 1, column 11: a JSON string holding a whole number is wanted`},
		{"nulls", `{"items":null,"byId":null,"ptr":null,"when":null,"shared":null}`, false, nil, ""},
		{"in a slice", `{"items":[{"name":"a"},{"Name":"b"}]}`, false, ErrUnknownField,
			file + `: items[1].Name at line 1, column 25: unknown field: member names are case-sensitive: did you mean "name"?`},
		{"in a map value", `{"byId":{"x":{"nom":"b"}}}`, false, ErrUnknownField,
			file + `: byId.x.nom at line 1, column 15: unknown field: remove it or check its spelling`},
		{"through a pointer", `{"ptr":{"name":"a","name":"b"}}`, false, ErrDuplicateKey,
			file + `: ptr.name at line 1, column 20: given twice (first at line 1, column 9); keep one`},
		{"map keys given twice", "{\"byId\":{\"x\":{},\n \"x\":{}}}", false, ErrDuplicateKey,
			file + `: byId.x at line 2, column 2: given twice (first at line 1, column 10); keep one`},
		{"map keys in two cases", `{"byId":{"Doc":{},"doc":{}}}`, false, nil, ""},
		{"map keys in two cases, folded", `{"byId":{"Doc":{},"doc":{}}}`, true, ErrDuplicateKey,
			file + `: byId.doc at line 1, column 19: given twice: "Doc" at line 1, column 10 differs only in case, and ids that differ only in case name one file; keep one`},
		{"members in two cases, folded", `{"shared":1,"Shared":2}`, true, ErrUnknownField, `Shared at line 1, column 13: unknown field`},
		{"free map keys given twice", `{"free":{"a":1,"a":2}}`, false, ErrDuplicateKey, `: free.a at line 1, column 16: given twice`},
		{"member named -", `{"Skipped":"x"}`, false, ErrUnknownField, `: Skipped at line 1, column 2: unknown field: remove it`},
		{"Go name in another case", `{"goname":1}`, false, ErrUnknownField, `did you mean "GoName"?`},
		{"a typo", `{"itmes":[]}`, false, ErrUnknownField,
			file + `: itmes at line 1, column 2: unknown field: did you mean "items"? If not, remove it`},
		{"a typo in another case", `{"Qouted":"1"}`, false, ErrUnknownField,
			file + `: Qouted at line 1, column 2: unknown field: did you mean "quoted"? If not, remove it`},
		{"nothing near", `{"colour":1}`, false, ErrUnknownField,
			file + `: colour at line 1, column 2: unknown field: remove it or check its spelling`},
		{"key needing quotes", `{"a b":1}`, false, ErrUnknownField, file + `: "a b" at line 1, column 2: unknown field: remove it or check its spelling`},
		{"syntax", "{\n  \"shared\": 1,,\n}", false, ErrMalformed,
			file + `: not valid JSON at line 2, column 15: invalid character ',' looking for beginning of object key string`},
		{"cut short", "{\n  \"items\": [", false, ErrMalformed,
			file + `: not valid JSON at line 2, column 13: the file ends before the JSON object does`},
		{"two objects", "{}\n{}", false, ErrMalformed, file + `: not valid JSON at line 2, column 1: more after the JSON object; the file holds one object`},
		{"not an object", `[1]`, false, ErrWrongType, file + `: the top level at line 1, column 1: a JSON array where an object is wanted`},
		{"string for a number", "{\n  \"shared\": \"1\"}", false, ErrWrongType,
			file + `: shared at line 2, column 13: a JSON string where a whole number is wanted`},
		{"negative for a count", `{"count":-1}`, false, ErrWrongType, `: count at line 1, column 10: a JSON number -1 where a whole number, 0 or more is wanted`},
		{"number in a list of objects", `{"items":[{"name":"a"},2]}`, false, ErrWrongType,
			file + `: items[1] at line 1, column 24: a JSON number where an object is wanted`},
		{"object for a list", `{"items":{}}`, false, ErrMalformed, file + `: items at line 1, column 10: a JSON object where an array is wanted`},
		{"not a time", `{"when":"today"}`, false, ErrWrongType,
			file + `: when at line 1, column 9: a time is wanted, in RFC 3339 form such as 2026-01-02T15:04:05Z`},
		{"too deep", `{"free":{"x":` + strings.Repeat(`[`, 40) + strings.Repeat(`]`, 40) + `}}`, false, ErrMalformed,
			file + `: not valid JSON at line 1, column 45: nested deeper than 32 levels, at free.x` + strings.Repeat("[0]", 31)},
		{"colon missing", `{"shared" 1}`, false, ErrMalformed, file + `: not valid JSON at line 1, column 11: invalid character '1' after object key`},
		{"bad literal", `{"shared":tru}`, false, ErrMalformed, file + `: not valid JSON at line 1, column 14: invalid character '}' in literal true (expecting 'e')`},
		{"empty", " \n", false, ErrEmpty, file + ` is empty: it should hold a test document`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var d doc
			err := File{Path: file, Holds: "a test document", FoldMapKeys: tt.fold}.Decode([]byte(tt.in), &d)
			if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Fatalf("Decode: %v; want %v", err, tt.wantErr)
			}
			if err == nil {
				return
			}
			if strings.HasPrefix(tt.want, file) && err.Error() != tt.want || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error\n %s\nwant\n %s", err, tt.want)
			}
		})
	}
	var d doc
	if err := Decode([]byte(tests[0].in), &d); err != nil || d.Shared != 1 || d.ByID["x"].Name != "b" || d.Ptr.Name != "c" ||
		d.GoName != 2 || string(d.Blob) != "\x01\x02" || d.Quoted != 5 {
		t.Errorf("decoded %+v, %v", d, err)
	}
}

// TestDecodeNoFile: bytes decoded alone name no file.
func TestDecodeNoFile(t *testing.T) {
	var d doc
	err := Decode([]byte(`{"nope":1}`), &d)
	if err == nil || err.Error() != `nope at line 1, column 2: unknown field: remove it or check its spelling` {
		t.Errorf("Decode: %v", err)
	}
	err = Decode(nil, &d)
	var ee *fileerr.EmptyError
	if !errors.As(err, &ee) || err.Error() != "the JSON is empty: it should hold a JSON object" {
		t.Errorf("Decode of nothing: %v", err)
	}
}
