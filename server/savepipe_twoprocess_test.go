package server_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/crashpoint"
	"github.com/pdmcp/pdmcp/internal/filelock"
	"github.com/pdmcp/pdmcp/internal/mcptest"
	"github.com/pdmcp/pdmcp/internal/testutil"
	"github.com/pdmcp/pdmcp/server"
	"github.com/pdmcp/pdmcp/server/journal"
	"github.com/pdmcp/pdmcp/server/refusal"
	"github.com/pdmcp/pdmcp/server/sidecar"
)

// waitingOnFileLock reports whether a goroutine is waiting in
// filelock.Acquire: the only place a save can block on another process.
func waitingOnFileLock() bool {
	buf := make([]byte, 1<<20)
	return strings.Contains(string(buf[:runtime.Stack(buf, true)]), "internal/filelock.Acquire")
}

// TestSameSaveInTwoProcessesTakesTurns runs one save (same caller,
// destination, idempotency key and text: a host's retry that reached a
// second server while the first still worked) in two servers on one
// journal, each stopped between its file steps while the other comes. The
// save's temporary name is one per save, so without a cross-process lock
// the second removed the first's temporary file and made its own, and the
// first linked that empty file as the committed version (or failed with an
// internal error, ending its Gateway session). Now the one that comes second
// waits until the first is done, and returns the same receipt.
func TestSameSaveInTwoProcessesTakesTurns(t *testing.T) {
	tests := []struct {
		name string
		// firstStopsAt is where the first server stops while the second
		// comes.
		firstStopsAt crashpoint.Point
	}{
		{"second comes after the first wrote its temporary file", crashpoint.SaveFileWritten},
		{"second comes after the first created its temporary file, empty", crashpoint.SaveFileCreated},
		{"second comes after the first linked the version", crashpoint.SaveLinked},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			var cfgA *server.Config
			var stopA atomic.Bool
			stopA.Store(true)
			aStopped, aGo := make(chan struct{}), make(chan struct{})
			f := newFixture(t, basicDocs, nil, func(c *server.Config) {
				cfgA = c
				c.CrashPoint = func(p crashpoint.Point) {
					if p == tc.firstStopsAt && stopA.CompareAndSwap(true, false) {
						close(aStopped)
						<-aGo
					}
				}
			})
			// The second server: its own journal connection, as a second
			// process has, on the same files.
			j2, err := journal.Open(ctx, journal.DefaultPath(f.manifest))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { j2.Close() })
			cfgB := *cfgA
			cfgB.Journal = j2
			bCreated := make(chan struct{})
			var bOnce atomic.Bool
			cfgB.CrashPoint = func(p crashpoint.Point) {
				if p == crashpoint.SaveFileCreated && bOnce.CompareAndSwap(false, true) {
					close(bCreated)
				}
			}
			cfgB.Logger = slog.New(slog.NewTextHandler(&testutil.LogBuffer{}, nil))
			srvB, err := server.New(cfgB)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { srvB.Close() })
			ct, st := mcp.NewInMemoryTransports()
			if _, err := srvB.MCP().Connect(ctx, st, nil); err != nil {
				t.Fatal(err)
			}
			csB, err := mcp.NewClient(&mcp.Implementation{Name: "second", Version: "0"}, nil).Connect(ctx, ct, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { csB.Close() })

			args := map[string]any{"destinationId": "summary", "text": "the result, saved once", "idempotencyKey": "k1"}
			type outcome struct {
				res *mcp.CallToolResult
				err error
			}
			save := func(cs *mcp.ClientSession, done chan<- outcome) {
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: grant.ToolSaveProtectedResult, Arguments: args})
				done <- outcome{res, err}
			}
			aDone := make(chan outcome, 1)
			go save(f.cs, aDone)
			<-aStopped
			bDone := make(chan outcome, 1)
			go save(csB, bDone)
			// The second server either waits for the save's lock, or (the
			// defect) goes on into the first one's temporary name.
			for waiting := false; !waiting; {
				select {
				case <-bCreated:
					t.Errorf("the second server made the save's temporary file while the first was stopped at %s", tc.firstStopsAt)
					waiting = true
				case o := <-bDone:
					t.Errorf("the second server finished while the first was stopped at %s", tc.firstStopsAt)
					bDone <- o
					waiting = true
				default:
					waiting = waitingOnFileLock()
					if !waiting {
						time.Sleep(time.Millisecond)
					}
				}
			}
			close(aGo)
			oa, ob := <-aDone, <-bDone
			if oa.err != nil || ob.err != nil {
				t.Fatalf("calls: %v, %v", oa.err, ob.err)
			}
			a, b := mcptest.Result(t, oa.res), mcptest.Result(t, ob.res)
			if oa.res.IsError || ob.res.IsError {
				t.Fatalf("first: isError=%v %v\nsecond: isError=%v %v", oa.res.IsError, a, ob.res.IsError, b)
			}
			if a["version"] != b["version"] || a["path"] != b["path"] || a["version"] != float64(1) {
				t.Errorf("receipts differ or are not version 1: first %v, second %v", a, b)
			}
			if a["replayed"] == true || b["replayed"] != true {
				t.Errorf("replayed: first %v, second %v; want false, then true", a["replayed"], b["replayed"])
			}
			// The committed file is the save's ciphertext as the journal
			// recorded it, whole; nothing else is left in the folder.
			row, err := j2.Get(ctx, journal.SaveKey{Caller: journal.LocalCaller(cfgA.Grant.LocalUser), Destination: "summary", IdempotencyKey: "k1"})
			if err != nil || row.Encrypted == nil {
				t.Fatalf("the save's row: %+v, %v", row, err)
			}
			got, err := os.ReadFile(filepath.Join(f.dir, "results", "summary.v1.bin"))
			if err != nil || !bytes.Equal(got, row.Encrypted.Ciphertext) {
				t.Errorf("summary.v1.bin holds %d bytes, not the save's %d-byte ciphertext (%v)", len(got), len(row.Encrypted.Ciphertext), err)
			}
			entries, err := os.ReadDir(filepath.Join(f.dir, "results"))
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			if !slices.Equal(names, []string{"summary.v1.bin", "summary.v1.json"}) {
				t.Errorf("results folder holds %v, want only summary.v1.bin and its sidecar", names)
			}
			// The sidecar names the save's IV and key, and the record agrees.
			side, err := sidecar.Read(f.root(t), "results/summary.v1.bin")
			if err != nil || side.Record.IV != base64.StdEncoding.EncodeToString(row.Encrypted.IV) || side.Record.TTag != row.Encrypted.TTag {
				t.Errorf("the sidecar %+v (%v) is not the save's", side, err)
			}
			if vs, err := j2.Versions(ctx); err != nil || len(vs) != 1 || vs[0] != side.Record {
				t.Errorf("the record %+v (%v) differs from the sidecar %+v", vs, err, side.Record)
			}
		})
	}
}

// root opens the fixture's task folder.
func (f *fixture) root(t *testing.T) *os.Root {
	t.Helper()
	r, err := os.OpenRoot(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// TestStoppedLockHolderDoesNotWedgeTheDestination: another server stopped
// in the middle of a save (played by a second handle holding that save's
// cross-process lock). Before, the same save sent here waited without end,
// after its encrypt had gone to the Gateway and while it held the
// destination's in-process lock, so every later save to the destination
// waited too. Now it waits at most LockWait and is refused
// DESTINATION_BUSY with nothing sent; the destination's other saves go on
// meanwhile; and once the holder is gone the same call saves.
func TestStoppedLockHolderDoesNotWedgeTheDestination(t *testing.T) {
	ctx := context.Background()
	const bound = 2 * time.Second
	var cfg server.Config
	f := newFixture(t, basicDocs, nil, func(c *server.Config) {
		c.LockWait = bound
		cfg = *c
	})
	lockFile := server.SaveLockFile(cfg, "summary", "k-held")
	if err := os.MkdirAll(filepath.Dir(lockFile), 0o700); err != nil {
		t.Fatal(err)
	}
	held, err := filelock.Acquire(ctx, lockFile)
	if err != nil {
		t.Fatal(err)
	}
	// Released before the fixture's cleanup, so a wedged save (the defect)
	// unwinds instead of holding the test up.
	t.Cleanup(func() { held.Release() })
	// A save whose lock shares no file with k-held's: the lock files are
	// 256, chosen by digest.
	other := ""
	for i := 0; other == ""; i++ {
		if k := fmt.Sprintf("k-other-%d", i); server.SaveLockFile(cfg, "summary", k) != lockFile {
			other = k
		}
	}
	type outcome struct {
		res *mcp.CallToolResult
		err error
	}
	save := func(key, text string) outcome {
		// Generous, to fail rather than hang on a wedge.
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		res, err := f.cs.CallTool(ctx, &mcp.CallToolParams{Name: grant.ToolSaveProtectedResult,
			Arguments: map[string]any{"destinationId": "summary", "text": text, "idempotencyKey": key}})
		if err != nil {
			err = fmt.Errorf("save %s: %w (wedged?)", key, err)
		}
		return outcome{res, err}
	}
	// result is a save's answer, on the test's goroutine.
	result := func(o outcome) (map[string]any, bool) {
		t.Helper()
		if o.err != nil {
			t.Fatal(o.err)
		}
		return mcptest.Result(t, o.res), o.res.IsError
	}

	encrypts := f.env.Gateway.Count(api.RouteEncrypt)
	busy := make(chan outcome, 1)
	go func() { busy <- save("k-held", "the held save") }()
	// Meanwhile the destination is not wedged: a save under another lock
	// goes through.
	if res, isErr := result(save(other, "another save to the same destination")); isErr || res["version"] != float64(1) {
		t.Fatalf("a save to the destination while another's lock is held: %v", res)
	}
	res, isErr := result(<-busy)
	if !isErr || res["code"] != string(refusal.DestinationBusy) || res["layer"] != "adapter" {
		t.Fatalf("the save under a held lock: %v, want DESTINATION_BUSY", res)
	}
	if detail, _ := res["detail"].(string); !strings.Contains(detail, "nothing was sent") {
		t.Errorf("detail %q does not say nothing was sent", detail)
	}
	// Exactly one encrypt: the other save's.
	if n := f.env.Gateway.Count(api.RouteEncrypt) - encrypts; n != 1 {
		t.Fatalf("%d encrypts reached the Gateway; want 1 (the refused save sends none)", n)
	}
	// Nothing of the refused save was journaled: its retry is a first try.
	if err := held.Release(); err != nil {
		t.Fatal(err)
	}
	if res, isErr := result(save("k-held", "the held save")); isErr || res["version"] != float64(2) || res["replayed"] != false {
		t.Fatalf("the same save once the holder is gone: %v", res)
	}
}
