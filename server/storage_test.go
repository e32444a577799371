package server_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/server/journal"
	"github.com/pdmcp/pdmcp/server/refusal"
)

// TestSaveWhileJournalBusy: another process holding the journal's write
// lock past the busy timeout is the storage's failure, not the call's: the
// save is refused STORAGE_UNAVAILABLE with a retryAfter, nothing is sent,
// the Gateway session is kept, and the same call, sent again once the lock
// is let go, saves once.
func TestSaveWhileJournalBusy(t *testing.T) {
	f := newFixture(t, basicDocs, nil)
	ctx := context.Background()
	args := map[string]any{"destinationId": "summary", "text": "a summary", "idempotencyKey": "busy-1"}
	// A session first, so that keeping it can be seen.
	if m, isErr := f.call(t, grant.ToolListApprovedDocuments, map[string]any{}); isErr {
		t.Fatalf("list: %v", m)
	}

	db, err := sql.Open("sqlite", journal.DefaultPath(f.manifest))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	holder, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := holder.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	before := f.env.Gateway.Counts()
	m, isErr := f.call(t, grant.ToolSaveProtectedResult, args)
	after := f.env.Gateway.Counts()
	if _, err := holder.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	holder.Close()
	if !isErr || m["code"] != string(refusal.StorageUnavailable) || m["status"] != float64(503) ||
		m["retryAfter"] != float64(journal.BusyTimeout.Seconds()) {
		t.Fatalf("a save while another holds the journal's write lock: %v, want STORAGE_UNAVAILABLE, 503, retryAfter", m)
	}
	for _, route := range []string{api.RouteEncrypt, api.RouteRevoke} {
		if after[route] != before[route] {
			t.Errorf("%s: %d requests during the refused save, want none", route, after[route]-before[route])
		}
	}
	if !strings.Contains(f.logs.String(), "storage unavailable") {
		t.Error("no log line names the storage failure")
	}

	m, isErr = f.call(t, grant.ToolSaveProtectedResult, args)
	if isErr || m["version"] != float64(1) || m["replayed"] != false {
		t.Fatalf("the same save once the lock was let go: %v", m)
	}
	if n := f.env.Gateway.Count(api.RouteEncrypt) - before[api.RouteEncrypt]; n != 1 {
		t.Errorf("%d encrypts for the save and its retry, want 1", n)
	}
	if n := f.env.Gateway.Count(api.RouteRevoke) - before[api.RouteRevoke]; n != 0 {
		t.Errorf("%d revokes: the Gateway session was ended", n)
	}
}
