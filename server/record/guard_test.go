package record

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pdmcp/pdmcp/server/journal"
)

// folder makes a task folder for manifest() with the files named.
func folder(t *testing.T, files ...string) (manifestPath string) {
	t.Helper()
	dir := t.TempDir()
	for _, f := range files {
		p := filepath.Join(dir, filepath.FromSlash(f))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("ciphertext"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "manifest.json")
}

// TestSavedFiles: the version files only a record names are listed; the
// manifest's history, its sections as protected, empty files (a crash's
// leftover), temporary names and other files are not.
func TestSavedFiles(t *testing.T) {
	mp := folder(t, "results/d.v1.bin", "results/d.v2.bin", "results/gone.v1.bin", "results/.pdmcp-save-ab.tmp",
		"results/notes.txt", "documents/x/A.v1.bin", "documents/x/A.v2.bin", "documents/x/skeleton.txt",
		"documents/x/Z.v2.bin", "documents/other.v2.bin", "results/empty.v3.bin")
	if err := os.Truncate(filepath.Join(filepath.Dir(mp), "results", "empty.v3.bin"), 0); err != nil {
		t.Fatal(err)
	}
	got, err := SavedFiles(filepath.Dir(mp), manifest())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"documents/x/A.v2.bin", "results/d.v2.bin", "results/gone.v1.bin"}
	if !slices.Equal(got, want) {
		t.Fatalf("SavedFiles = %v, want %v", got, want)
	}
}

// TestCheckJournal: a missing or empty journal beside saved versions is
// refused, naming `pdmcp check --repair`; anything else passes.
func TestCheckJournal(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name    string
		files   []string
		journal string // "missing", "empty" or "saves"
		lost    bool
	}{
		{"no journal, nothing saved", []string{"results/d.v1.bin", "documents/x/A.v1.bin"}, "missing", false},
		{"no journal, a result saved", []string{"results/d.v2.bin"}, "missing", true},
		{"no journal, a section saved", []string{"documents/x/B.v2.bin"}, "missing", true},
		{"an empty journal, a result saved", []string{"results/d.v2.bin"}, "empty", true},
		{"an empty journal, nothing saved", nil, "empty", false},
		{"a journal with saves", []string{"results/d.v2.bin"}, "saves", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mp := folder(t, tc.files...)
			jp := journal.DefaultPath(mp)
			var j *journal.Journal
			if tc.journal != "missing" {
				var err error
				if j, err = journal.Open(ctx, jp); err != nil {
					t.Fatal(err)
				}
				defer j.Close()
			}
			if tc.journal == "saves" {
				if _, err := j.Reserve(ctx, journal.SaveKey{Destination: "d", IdempotencyKey: "k"}, h64); err != nil {
					t.Fatal(err)
				}
			}
			err := CheckJournal(ctx, mp, manifest(), jp, j)
			if lost := errors.Is(err, ErrRecordLost); lost != tc.lost || (!tc.lost && err != nil) {
				t.Fatalf("CheckJournal: %v, want lost=%v", err, tc.lost)
			}
			if tc.lost && !strings.Contains(err.Error(), RepairCommand) {
				t.Errorf("the refusal does not name %q: %v", RepairCommand, err)
			}
			// A reader (Load, the commands) never creates the journal.
			rj, err := OpenJournal(ctx, mp, manifest(), "")
			if tc.lost != errors.Is(err, ErrRecordLost) || (!tc.lost && err != nil) {
				t.Errorf("OpenJournal: %v, want lost=%v", err, tc.lost)
			}
			if (rj == nil) != (tc.lost || tc.journal == "missing") {
				t.Errorf("OpenJournal gave a journal %v", rj)
			}
			rj.Close()
			if _, err := os.Stat(jp); tc.journal == "missing" && err == nil {
				t.Errorf("Load created the journal")
			}
		})
	}
}
