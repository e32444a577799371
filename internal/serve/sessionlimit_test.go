package serve

import (
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/server"
)

// TestReserveRefusesWhenEveryoneInTheWayIsBusy: a session with a request in
// flight is never ended to make room; the new session is refused instead,
// 429 at the user's own bound and 503 at the server's.
func TestReserveRefusesWhenEveryoneInTheWayIsBusy(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: server.Name, Version: "test"}, nil)
	tr := newMCPSessionLimiter(srv, 1, 2, func(*http.Request, string) {})
	tr.byID["a1"] = &mcpSession{id: "a1", user: "alice", busy: 1}
	if got := tr.reserve("alice"); got != http.StatusTooManyRequests {
		t.Fatalf("alice at her bound, her session busy: %d, want 429", got)
	}
	tr.byID["b1"] = &mcpSession{id: "b1", user: "bob", busy: 1}
	if got := tr.reserve("carol"); got != http.StatusServiceUnavailable {
		t.Fatalf("server at its bound, every session busy: %d, want 503", got)
	}
	if len(tr.byID) != 2 || tr.pendingTotal != 0 {
		t.Fatalf("a refused reservation changed the table: %d sessions, %d pending", len(tr.byID), tr.pendingTotal)
	}
	// Once bob's request ends, his session no longer holds the place.
	tr.byID["b1"].busy = 0
	if got := tr.reserve("carol"); got != 0 {
		t.Fatalf("with bob's session idle: %d, want room", got)
	}
	if _, ok := tr.byID["b1"]; ok || tr.pendingTotal != 1 {
		t.Fatalf("bob's idle session still holds the place (pending %d)", tr.pendingTotal)
	}
}

// BenchmarkIdleMCPSession opens b.N MCP sessions over TLS that are never
// ended, as hosts that send no DELETE leave them, and reports the heap each
// idle session holds, heap and stacks ("bytes/session") and what the default bound of
// DefaultMaxSessions would hold in all ("MiB-at-bound"). Run:
//
//	go test -run X -bench IdleMCPSession -benchtime 2000x ./internal/serve/
func BenchmarkIdleMCPSession(b *testing.B) {
	srv := mcp.NewServer(&mcp.Implementation{Name: server.Name, Version: "bench"}, nil)
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{SessionTimeout: SessionIdleTimeout})
	// Bounds above b.N: nothing is evicted while measuring.
	tracked := newMCPSessionLimiter(srv, b.N+1, b.N+1, func(*http.Request, string) {})
	ts := httptest.NewTLSServer(tracked.wrap(h))
	defer ts.Close()
	client := ts.Client()
	open := func() {
		req, _ := http.NewRequest("POST", ts.URL, strings.NewReader(
			`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get(sessionHeader) == "" {
			b.Fatalf("initialize: %d", resp.StatusCode)
		}
	}
	open() // the connection and the first allocations are not a session's
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	for range b.N {
		open()
	}
	b.StopTimer()
	runtime.GC()
	runtime.ReadMemStats(&after)
	if n := tracked.Len(); n != b.N+1 {
		b.Fatalf("%d sessions tracked, want %d", n, b.N+1)
	}
	// Heap and goroutine stacks: what a resident-size measure would see.
	held := func(m *runtime.MemStats) int64 { return int64(m.HeapAlloc + m.StackInuse) }
	per := float64(held(&after)-held(&before)) / float64(b.N)
	b.ReportMetric(per, "bytes/session")
	b.ReportMetric(per*DefaultMaxSessions/(1<<20), "MiB-at-bound")
}
