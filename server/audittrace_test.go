package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"

	"github.com/pdmcp/pdmcp/grant"
)

// TestAuditLinesNameTheActiveSpan: a tool call handled within an active
// trace span (here put in the request's context by a middleware, as the
// tracing middleware does) writes its audit line with the span's trace and
// span ids, whether it succeeds, is refused by the tool, or is refused at
// the grant's gate; without a span, a line names neither.
func TestAuditLinesNameTheActiveSpan(t *testing.T) {
	f := newFixture(t, basicDocs, nil)
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})
	var traced atomic.Bool
	f.srv.MCP().AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if traced.Load() {
				ctx = trace.ContextWithSpanContext(ctx, sc)
			}
			return next(ctx, method, req)
		}
	})
	calls := []struct {
		tool string
		args map[string]any
	}{
		{grant.ToolReadProtectedDocument, map[string]any{"documentId": "notes"}},
		{grant.ToolReadProtectedDocument, map[string]any{"documentId": "other"}},
		{"encrypt_file", map[string]any{"path": "a.txt"}}, // not in the grant: the gate
	}
	for _, on := range []bool{true, false} {
		traced.Store(on)
		for _, c := range calls {
			f.call(t, c.tool, c.args)
		}
	}
	var tools []map[string]any
	file, err := os.Open(f.auditLog)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	sc2 := bufio.NewScanner(file)
	sc2.Buffer(nil, 1<<20)
	for sc2.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc2.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		if m["event"] == "tool" {
			tools = append(tools, m)
		}
	}
	if len(tools) != 2*len(calls) {
		t.Fatalf("%d tool lines, want %d", len(tools), 2*len(calls))
	}
	for i, m := range tools {
		on := i < len(calls)
		tr, sp := m["traceId"], m["spanId"]
		switch {
		case on && (tr != tid.String() || sp != sid.String()):
			t.Errorf("line %d (%v, %v) in a span: traceId %v spanId %v, want %s %s", i, m["tool"], m["outcome"], tr, sp, tid, sid)
		case !on && (tr != nil || sp != nil):
			t.Errorf("line %d (%v) without a span: traceId %v spanId %v, want neither", i, m["tool"], tr, sp)
		}
	}
	if b, _ := os.ReadFile(f.auditLog); strings.Count(string(b), tid.String()) != len(calls) {
		t.Errorf("the trace id is on other lines than the traced calls':\n%s", b)
	}
}
