package server

import (
	"encoding/json"
	"testing"

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
