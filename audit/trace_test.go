package audit

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

// TestTrace: the ids of a valid span context in ctx, in W3C form; none for
// a context without one or with an invalid one.
func TestTrace(t *testing.T) {
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	valid := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid})
	tests := []struct {
		name             string
		ctx              context.Context
		wantTrace, wantS string
	}{
		{"a span", trace.ContextWithSpanContext(context.Background(), valid), tid.String(), sid.String()},
		{"a remote parent", trace.ContextWithRemoteSpanContext(context.Background(), valid), tid.String(), sid.String()},
		{"no span", context.Background(), "", ""},
		{"a trace id without a span id", trace.ContextWithSpanContext(context.Background(),
			trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid})), "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			gotT, gotS := Trace(tc.ctx)
			if gotT != tc.wantTrace || gotS != tc.wantS {
				t.Fatalf("Trace = %q %q, want %q %q", gotT, gotS, tc.wantTrace, tc.wantS)
			}
		})
	}
}

// TestTraceIDsOnLines: a line carries well-formed ids and drops others.
func TestTraceIDsOnLines(t *testing.T) {
	const tid, sid = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	tests := []struct {
		name    string
		line    Line
		keep    bool
		dropped bool
	}{
		{"tool", ToolCall{Tool: "t", Outcome: OutcomeOK, TraceID: tid, SpanID: sid}, true, false},
		{"client", Client{Name: "h", TraceID: tid, SpanID: sid}, true, false},
		{"auth-refused", AuthRefused{Class: "expired", Reason: "TOKEN_EXPIRED", Status: 401, Path: "/mcp", TraceID: tid, SpanID: sid}, true, false},
		{"uppercase", ToolCall{Tool: "t", Outcome: OutcomeOK, TraceID: "4BF92F3577B34DA6A3CE929D0E0E4736", SpanID: "00F067AA0BA902B7"}, false, true},
		{"all zero", ToolCall{Tool: "t", Outcome: OutcomeOK, TraceID: "00000000000000000000000000000000", SpanID: "0000000000000000"}, false, true},
		{"none", ToolCall{Tool: "t", Outcome: OutcomeOK}, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, path := openTemp(t)
			err := l.Write(tc.line)
			if tc.dropped != errors.Is(err, ErrRedacted) {
				t.Fatalf("Write: %v, want redacted %v", err, tc.dropped)
			}
			m := readLines(t, path)[0]
			if tc.keep && (m["traceId"] != tid || m["spanId"] != sid) {
				t.Fatalf("line %v, want the ids", m)
			}
			if _, has := m["traceId"]; !tc.keep && has {
				t.Fatalf("line %v, want no traceId", m)
			}
			if _, has := m["spanId"]; !tc.keep && has {
				t.Fatalf("line %v, want no spanId", m)
			}
		})
	}
}
