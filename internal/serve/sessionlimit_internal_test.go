package serve

import (
	"net/http"
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
