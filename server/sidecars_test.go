package server_test

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/server/journal"
	"github.com/pdmcp/pdmcp/server/sidecar"
)

// TestSaveWritesItsSidecar: a save leaves its version's sidecar beside the
// file, saying what the record says; a leftover sidecar at the version's
// name (a save stopped before it placed its version, whose file is
// missing) is replaced, and logged; a stray file's name is stepped over
// with no sidecar written for it.
func TestSaveWritesItsSidecar(t *testing.T) {
	f := newFixture(t, basicDocs, nil)
	root := f.root(t)
	if err := os.MkdirAll(filepath.Join(f.dir, "results"), 0o700); err != nil {
		t.Fatal(err)
	}
	leftover := sidecar.Version{Record: journal.Version{Destination: "summary", Version: 1, Path: "results/summary.v1.bin",
		IV: "AAAAAAAAAAAAAAAAAAAAAA==", TTag: "t-other", CiphertextSHA256: strings.Repeat("0", 64),
		SHA256: strings.Repeat("1", 64), SavedAt: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}}
	if err := sidecar.Write(root, leftover, true); err != nil {
		t.Fatal(err)
	}
	// A stray file at version 2 with no sidecar.
	if err := os.WriteFile(filepath.Join(f.dir, "results", "summary.v2.bin"), []byte("stray"), 0o600); err != nil {
		t.Fatal(err)
	}
	for i, want := range []float64{1, 3} {
		m, isErr := f.call(t, "save_protected_result", map[string]any{"destinationId": "summary", "text": "a summary",
			"idempotencyKey": "k" + string(rune('1'+i))})
		if isErr || m["version"] != want {
			t.Fatalf("save %d: %v, want version %v", i, m, want)
		}
	}
	if !strings.Contains(f.logs.String(), "path=results/summary.v1.json") {
		t.Errorf("the replaced leftover is not logged:\n%s", f.logs.String())
	}
	if _, err := os.Stat(filepath.Join(f.dir, "results", "summary.v2.json")); !os.IsNotExist(err) {
		t.Errorf("a sidecar was written for the stray file: %v", err)
	}
	j, err := journal.Open(t.Context(), journal.DefaultPath(f.manifest))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	rows, err := j.Versions(t.Context())
	if err != nil || len(rows) != 2 {
		t.Fatalf("record %+v %v", rows, err)
	}
	for _, r := range rows {
		side, err := sidecar.Read(root, r.Path)
		if err != nil || side.Record != r {
			t.Fatalf("version %d: sidecar %+v (%v), record %+v", r.Version, side.Record, err, r)
		}
		ct, err := os.ReadFile(filepath.Join(f.dir, filepath.FromSlash(r.Path)))
		if err != nil || side.Record.CiphertextSHA256 != hexSHA(ct) || r.TTag == "" {
			t.Fatalf("version %d: the sidecar does not describe its file (%v)", r.Version, err)
		}
	}
}

func hexSHA(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
