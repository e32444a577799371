package server_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/audit"
	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/mcptest"
	"github.com/pdmcp/pdmcp/server"
	"github.com/pdmcp/pdmcp/server/refusal"
)

// panicSecret is what the panicking session source panics with: it must
// reach neither the caller nor the log.
const panicSecret = "Bearer eyJhbGciOiJFUzI1NiJ9.secret-token-text"

// panickySessions is the task's real session source, which panics once
// in Acquire (a tool's handler) or in Current (the tool gate's audit line)
// when armed: the probe, a panicking session source.
type panickySessions struct {
	*server.GrantSessions
	acquire, current atomic.Bool
}

func (p *panickySessions) Acquire(ctx context.Context, c server.Caller) (server.GatewaySession, func(), error) {
	if p.acquire.CompareAndSwap(true, false) {
		panic(panicSecret)
	}
	return p.GrantSessions.Acquire(ctx, c)
}

func (p *panickySessions) Current(c server.Caller) server.GatewaySession {
	if p.current.CompareAndSwap(true, false) {
		panic(panicSecret)
	}
	return p.GrantSessions.Current(c)
}

// countingMetrics is a server.CallMetrics that counts panics by where.
type countingMetrics struct {
	mu     sync.Mutex
	panics map[string]int
}

func (m *countingMetrics) ToolCall(audit.ToolCall, []gateway.Request) {}

func (m *countingMetrics) Panicked(where string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.panics[where]++
}

func (m *countingMetrics) count(where string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.panics[where]
}

// TestPanicInAToolEndsThatCallOnly (issue 31 item 5): a panic in a tool's
// handler, on the go-sdk's own goroutine, no longer ends the process: the
// call is answered INTERNAL_ERROR in the refusal shape with nothing of the
// panic, the log has the stack and not the value, the metric counts it,
// the task's Gateway session is ended (revoked) so the next call mints a
// fresh one, and that next call works. A panic in the tool gate (outside
// a tool's handler) is answered the same way.
func TestPanicInAToolEndsThatCallOnly(t *testing.T) {
	var ps *panickySessions
	metrics := &countingMetrics{panics: map[string]int{}}
	f := newFixture(t, basicDocs, nil, func(c *server.Config) {
		ps = &panickySessions{GrantSessions: c.Sessions.(*server.GrantSessions)}
		c.Sessions, c.Metrics = ps, metrics
	})
	read := map[string]any{"documentId": "notes"}
	if m, isErr := f.call(t, grant.ToolReadProtectedDocument, read); isErr {
		t.Fatalf("the first read: %v", m)
	}
	first := f.lastToolLine(t)
	revokes := f.env.Gateway.Count(api.RouteRevoke)

	ps.acquire.Store(true)
	res, err := f.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: grant.ToolReadProtectedDocument, Arguments: read})
	if err != nil {
		t.Fatalf("the panicking call was not answered: %v", err)
	}
	f.checkPanicAnswer(t, res)
	if got := metrics.count(server.PanicTool); got != 1 {
		t.Errorf("panics counted at tool: %d, want 1", got)
	}
	if line := f.lastToolLine(t); line.Outcome != "error" || line.Code != string(refusal.Internal) || line.Tool != grant.ToolReadProtectedDocument {
		t.Errorf("the panicking call's audit line: %+v", line)
	}
	if ps.Len() != 0 || f.env.Gateway.Count(api.RouteRevoke) != revokes+1 {
		t.Errorf("the task's session was not ended: %d held, %d revokes (was %d)", ps.Len(),
			f.env.Gateway.Count(api.RouteRevoke), revokes)
	}

	// The next call works, on a fresh session.
	if m, isErr := f.call(t, grant.ToolReadProtectedDocument, read); isErr || m["text"] != string(f.texts["notes"]) {
		t.Fatalf("the call after the panic: %v", m)
	}
	if next := f.lastToolLine(t); next.HandleDigest == "" || next.HandleDigest == first.HandleDigest {
		t.Errorf("the call after the panic used session %q; the one before was %q", next.HandleDigest, first.HandleDigest)
	}

	// A panic in the tool gate: a tool outside the grant is refused there,
	// and its audit line asks the session source for the caller's session.
	ps.current.Store(true)
	res, err = f.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: grant.ToolHandOff, Arguments: map[string]any{"stepId": "s"}})
	if err != nil {
		t.Fatalf("the call that panicked in the gate was not answered: %v", err)
	}
	f.checkPanicAnswer(t, res)
	if got := metrics.count(server.PanicMethod); got != 1 {
		t.Errorf("panics counted at method: %d, want 1", got)
	}
	if line := f.lastToolLine(t); line.Outcome != "error" || line.Code != string(refusal.Internal) || line.Tool != grant.ToolHandOff {
		t.Errorf("the gate's panicking call's audit line: %+v", line)
	}
	if m, isErr := f.call(t, grant.ToolListApprovedDocuments, nil); isErr {
		t.Fatalf("a list after the panics: %v", m)
	}
	logs := f.logs.String()
	if strings.Contains(logs, "secret-token-text") {
		t.Fatalf("the log holds the panic's value:\n%s", logs)
	}
	if n := strings.Count(logs, "a panic was recovered"); n < 2 || !strings.Contains(logs, "panic(string)") ||
		!strings.Contains(logs, "panickySessions).Acquire(...)") {
		t.Fatalf("the log does not report the panics with their stacks (%d reports):\n%s", n, logs)
	}
}

// checkPanicAnswer checks a call that panicked was answered as an internal
// failure in the refusal shape, with nothing of the panic.
func (f *fixture) checkPanicAnswer(t *testing.T, res *mcp.CallToolResult) {
	t.Helper()
	r, ok := server.RefusalOf(res)
	if !ok || r.Code != string(refusal.Internal) || r.Status != 500 || r.Layer != "adapter" || res.StructuredContent != nil {
		t.Fatalf("the panicking call: %+v, want an INTERNAL_ERROR refusal", res)
	}
	for _, c := range res.Content {
		if tc, isText := c.(*mcp.TextContent); isText && strings.Contains(tc.Text, "secret") {
			t.Fatalf("the answer carries the panic's value: %q", tc.Text)
		}
	}
}

// lastToolLine is the audit file's last tool-call line.
func (f *fixture) lastToolLine(t *testing.T) mcptest.ToolLine {
	t.Helper()
	lines := mcptest.ToolLines(t, f.auditLog)
	if len(lines) == 0 {
		t.Fatal("no tool-call line in the audit file")
	}
	return lines[len(lines)-1]
}
