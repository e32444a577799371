package server

import (
	"encoding/json"
	"testing"
)

// BenchmarkDecodeArgs: a read's arguments, checked against the closed
// schema and decoded.
func BenchmarkDecodeArgs(b *testing.B) {
	schema, err := inputSchema[readInput]()
	if err != nil {
		b.Fatal(err)
	}
	raw := json.RawMessage(`{"documentId":"doc-1"}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, r := decodeArgs[readInput](raw, schema); r != nil {
			b.Fatal(r)
		}
	}
}
