package server

import (
	"encoding/json"
	"testing"
)

// BenchmarkDecodeArgs: a read's arguments, checked against the closed
// schema and decoded: by the general path (decodeArgs) and by the tool's
// argDecoder, which walks them in one pass.
func BenchmarkDecodeArgs(b *testing.B) {
	schema, err := inputSchema[readInput]()
	if err != nil {
		b.Fatal(err)
	}
	raw := json.RawMessage(`{"documentId":"doc-1"}`)
	b.Run("general", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, r := decodeArgs[readInput](raw, schema); r != nil {
				b.Fatal(r)
			}
		}
	})
	b.Run("decoder", func(b *testing.B) {
		d := newArgDecoder[readInput](schema)
		b.ReportAllocs()
		for b.Loop() {
			if _, r := d.decode(raw); r != nil {
				b.Fatal(r)
			}
		}
	})
}
