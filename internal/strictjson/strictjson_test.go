package strictjson

import (
	"errors"
	"strings"
	"testing"
	"time"
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
	Skipped string           `json:"-"`
	GoName  int
}

func TestDecode(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		wantErr error
		want    string
	}{
		{"all members", `{"shared":1,"items":[{"name":"a"}],"byId":{"x":{"name":"b"}},"free":{"Any":1,"any":2},` +
			`"when":"2026-01-02T03:04:05Z","ptr":{"name":"c"},"GoName":2}`, nil, ""},
		{"in a slice", `{"items":[{"name":"a"},{"Name":"b"}]}`, ErrUnknownField, `"Name" at line 1, column 25 (in items[1]); member names are case-sensitive: did you mean "name"?`},
		{"in a map value", `{"byId":{"x":{"nom":"b"}}}`, ErrUnknownField, `"nom" at line 1, column 15 (in byId.x)`},
		{"through a pointer", `{"ptr":{"name":"a","name":"b"}}`, ErrDuplicateKey, `(ptr.name)`},
		{"map keys given twice", `{"byId":{"x":{},"x":{}}}`, ErrDuplicateKey, `(byId.x)`},
		{"free map keys given twice", `{"free":{"a":1,"a":2}}`, ErrDuplicateKey, `(free.a)`},
		{"member named -", `{"Skipped":"x"}`, ErrUnknownField, `"Skipped"`},
		{"Go name in another case", `{"goname":1}`, ErrUnknownField, `did you mean "GoName"?`},
		{"syntax", "{\n  \"shared\": 1,,\n}", ErrMalformed, "at line 2, column"},
		{"not an object", `[1]`, ErrMalformed, "cannot unmarshal array"},
		{"too deep", `{"free":` + strings.Repeat(`[`, 40) + strings.Repeat(`]`, 40) + `}`, ErrMalformed, "nested deeper than 32"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var d doc
			err := Decode([]byte(tt.in), &d)
			if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Fatalf("Decode: %v; want %v", err, tt.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not say %q", err, tt.want)
			}
		})
	}
	var d doc
	if err := Decode([]byte(tests[0].in), &d); err != nil || d.Shared != 1 || d.ByID["x"].Name != "b" || d.Ptr.Name != "c" || d.GoName != 2 {
		t.Errorf("decoded %+v, %v", d, err)
	}
}
