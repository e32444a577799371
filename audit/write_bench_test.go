package audit

import (
	"path/filepath"
	"testing"
	"time"
)

// readLine is the line a 4 KiB read_protected_document writes over HTTP.
func readLine() ToolCall {
	return ToolCall{RunID: "run-7f3a9c", GrantID: "grant-2026-10-24", ActingAs: "alice@example.test",
		Caller: "https://idp.example.test|alice", JKT: "0ZcOCORZNYy-DWpqq30jZyJGHTN0d2HglBV3uiguA4I",
		HandleDigest: "a1b2c3d4e5f6", Tool: "read_protected_document", DocumentID: "doc-1", Version: 3,
		Outcome: OutcomeOK, StartedAt: time.Date(2026, 10, 24, 12, 0, 0, 123456789, time.UTC), LatencyMs: 2,
		GatewayRequests: []Request{{Route: "/v1/decrypt", Status: 200, LatencyMs: 1}},
		KeyLink:         "0a1b2c3d4e5f"}
}

// BenchmarkWriteToolCall: one tool call's line, encoded, chained and
// written to the file, through Write (as a Line) and WriteToolCall.
func BenchmarkWriteToolCall(b *testing.B) {
	for _, bc := range []struct {
		name  string
		write func(*Log, ToolCall) error
	}{
		{"Write", func(l *Log, c ToolCall) error { return l.Write(c) }},
		{"WriteToolCall", (*Log).WriteToolCall},
	} {
		b.Run(bc.name, func(b *testing.B) {
			l, err := Open(filepath.Join(b.TempDir(), "audit.jsonl"))
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			line := readLine()
			b.ReportAllocs()
			for b.Loop() {
				if err := bc.write(l, line); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
