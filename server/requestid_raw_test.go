package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// NoteRawRequestID notes what decoding the id as the SDK does and noting
// that notes, for ids it takes as written and ids it decodes alike.
func TestNoteRawRequestIDAsDecoded(t *testing.T) {
	for _, raw := range []string{
		`12`, `0`, `-0`, `-5`, `007`, `1e2`, `12.7`, `-`, `999999999999999`, `1234567890123456789`,
		`"abc"`, `"a-b_c:1"`, `"a\"b"`, `"\u00e9"`, `"é"`, `""`, `"` + strings.Repeat("x", maxRequestID) + `"`,
		`"` + strings.Repeat("x", maxRequestID+1) + `"`, "\"a\tb\"", `null`, `true`, `{}`, `[1]`, ``, `"`,
	} {
		t.Run(raw, func(t *testing.T) {
			want := http.Header{}
			var v any
			if json.Unmarshal([]byte(raw), &v) == nil {
				if id, err := jsonrpc.MakeID(v); err == nil {
					NoteRequestID(want, id)
				}
			}
			got := http.Header{}
			NoteRawRequestID(got, []byte(raw))
			if g, w := got.Values(RequestIDHeader), want.Values(RequestIDHeader); strings.Join(g, "|") != strings.Join(w, "|") || len(g) != len(w) {
				t.Errorf("noted %q, decoded %q", g, w)
			}
		})
	}
	h, id := http.Header{}, []byte(`12`)
	if n := testing.AllocsPerRun(100, func() { NoteRawRequestID(h, id) }); n > 2 {
		t.Errorf("a plain id allocates %v times, want at most 2", n)
	}
}
