package server_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/audit"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/handofftest"
	"github.com/pdmcp/pdmcp/internal/mcptest"
	"github.com/pdmcp/pdmcp/server"
	"github.com/pdmcp/pdmcp/server/journal"
	"github.com/pdmcp/pdmcp/server/refusal"
)

// secondServer starts another server on the fixture's task (its grant,
// manifest and journal file, its own journal connection and Gateway
// sessions), as a second host's stdio server on the same grant is; now is
// its clock (nil: the real one).
func (f *stepFixture) secondServer(t *testing.T, now func() time.Time) (*server.Server, *mcp.ClientSession) {
	t.Helper()
	ctx := context.Background()
	j, err := journal.Open(ctx, journal.DefaultPath(f.w.Manifest))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	a, err := audit.Open(filepath.Join(f.w.Dir, "audit-second.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	sessions := server.NewGrantSessions(f.w.Client, f.grant.LocalUser, grant.Keys(f.grant, f.manifest), f.grant.NotAfter, nil, nil)
	srv, err := server.New(server.Config{Grant: f.grant, Manifest: f.manifest, ManifestPath: f.w.Manifest, Journal: j,
		Audit: a, Sessions: sessions, Version: "test", RunID: "run-second", Now: now,
		ClockOffset: f.w.Client.ClockOffset, Revoker: f.w.Client})
	if err != nil {
		t.Fatalf("second server.New: %v", err)
	}
	t.Cleanup(func() { srv.Close() })
	ct, st := mcp.NewInMemoryTransports()
	if _, err := srv.MCP().Connect(ctx, st, nil); err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "second-host", Version: "0"},
		&mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{}}}).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close(); sessions.EndAll(context.Background()) })
	return srv, cs
}

// doctorEntries counts the doctor's entries on the world's keys.
func (f *stepFixture) doctorEntries(t *testing.T) int {
	t.Helper()
	n := 0
	for _, k := range f.w.Keys {
		if _, ok := f.w.Entry(t, k, f.w.Doctor); ok {
			n++
		}
	}
	return n
}

// TestShutdownLeavesAnotherRunningServersHandOffs: two servers on one grant
// (two hosts' stdio servers on one task). A hand-off made through the
// second stays granted, and its rows open, when the first stops; once the
// second is gone without closing them (killed), the first's shutdown closes
// them; the grant's end closes every server's.
func TestShutdownLeavesAnotherRunningServersHandOffs(t *testing.T) {
	ctx := context.Background()
	t.Run("shutdown", func(t *testing.T) {
		f := newStepFixture(t, stepOptions{})
		_, csB := f.secondServer(t, nil)
		if m, isErr := mcptest.Call(t, csB, grant.ToolHandOff, map[string]any{"stepId": handofftest.StepReferral}); isErr {
			t.Fatalf("hand_off through the second server: %v", m)
		}
		handed := f.doctorEntries(t)
		if handed == 0 {
			t.Fatal("the hand-off gave the doctor no entry")
		}
		f.srv.RevokeHandOffs(ctx)
		if n := f.doctorEntries(t); n != handed {
			t.Errorf("the first server's shutdown left %d of the second server's %d entries", n, handed)
		}
		j := openJournal(t, f.w.Manifest)
		if open, err := j.OpenHandOffsOfGrant(ctx, f.grant.ID); err != nil || len(open) != handed {
			t.Errorf("open rows after the first server's shutdown: %d, %v; want %d", len(open), err, handed)
		}

		// The second server is killed: its rows now name a process that
		// has ended.
		markMakerGone(t, f.w.Manifest)
		f.srv.RevokeHandOffs(ctx)
		if n := f.doctorEntries(t); n != 0 {
			t.Errorf("%d entries of a killed server survived the shutdown of another", n)
		}
		if open, err := j.OpenHandOffsOfGrant(ctx, f.grant.ID); err != nil || len(open) != 0 {
			t.Errorf("open rows: %d, %v; want none", len(open), err)
		}
	})
	t.Run("grant expired", func(t *testing.T) {
		var now time.Time
		f := newStepFixture(t, stepOptions{now: func() time.Time {
			if now.IsZero() {
				return time.Now()
			}
			return now
		}})
		_, csB := f.secondServer(t, nil)
		if m, isErr := mcptest.Call(t, csB, grant.ToolHandOff, map[string]any{"stepId": handofftest.StepReferral}); isErr {
			t.Fatalf("hand_off through the second server: %v", m)
		}
		now = time.Now().Add(2 * time.Hour)
		if m, _ := f.call(t, grant.ToolListApprovedDocuments, nil); m["code"] != string(refusal.GrantExpired) {
			t.Fatalf("after the grant: %v", m)
		}
		if n := f.doctorEntries(t); n != 0 {
			t.Errorf("%d entries of the second server survived GRANT_EXPIRED", n)
		}
	})
}

func openJournal(t *testing.T, manifest string) *journal.Journal {
	t.Helper()
	j, err := journal.Open(context.Background(), journal.DefaultPath(manifest))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

// markMakerGone makes every open hand-off row name a server whose process
// has ended (a process id above Linux's and macOS's largest), as a killed
// server's rows do.
func markMakerGone(t *testing.T, manifest string) {
	t.Helper()
	db, err := sql.Open("sqlite", journal.DefaultPath(manifest))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`UPDATE handoffs SET maker = '2147483646:00000000deadbeef' WHERE state = 'open'`); err != nil {
		t.Fatal(err)
	}
}
