package stack

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestStoppedSeedFiles: only a folder holding what a seed writes before its
// manifest is a stopped seed; anything a task leaves when it ran (a
// journal, results, an audit file, protect's section folders) is named, so
// the stack removes nothing of it.
func TestStoppedSeedFiles(t *testing.T) {
	tests := []struct {
		name       string
		files      []string // relative; a trailing "/" makes a folder
		wantSeed   []string
		wantOthers []string
	}{
		{"record only", []string{"seed-record.json"}, []string{"seed-record.json"}, nil},
		{"a seed stopped after two documents",
			[]string{"seed-record.json", "seed-record.json.lock", "documents/a.v1.bin", "documents/b.v1.bin"},
			[]string{"documents/a.v1.bin", "documents/b.v1.bin", "documents", "seed-record.json", "seed-record.json.lock"}, nil},
		{"a task that ran and lost its manifest",
			[]string{"seed-record.json", "documents/a.v1.bin", "documents/ccd-0001/", "manifest.journal.sqlite", "results/", "audit.jsonl"},
			[]string{"documents/a.v1.bin", "documents", "seed-record.json"},
			[]string{"audit.jsonl", "manifest.journal.sqlite", "results", "documents/ccd-0001"}},
		{"a second version of a document", []string{"seed-record.json", "documents/a.v2.bin"},
			[]string{"documents", "seed-record.json"}, []string{"documents/a.v2.bin"}},
		{"a record that is a folder", []string{"seed-record.json/"}, nil, []string{"seed-record.json"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range tt.files {
				p := filepath.Join(dir, filepath.FromSlash(f))
				if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
					t.Fatal(err)
				}
				if f[len(f)-1] == '/' {
					if err := os.MkdirAll(p, 0o700); err != nil {
						t.Fatal(err)
					}
					continue
				}
				if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			seed, others, err := stoppedSeedFiles(dir)
			if err != nil {
				t.Fatal(err)
			}
			for i := range tt.wantSeed {
				tt.wantSeed[i] = filepath.FromSlash(tt.wantSeed[i])
			}
			for i := range tt.wantOthers {
				tt.wantOthers[i] = filepath.FromSlash(tt.wantOthers[i])
			}
			if !slices.Equal(seed, tt.wantSeed) {
				t.Errorf("seed files %q, want %q", seed, tt.wantSeed)
			}
			slices.Sort(others)
			slices.Sort(tt.wantOthers)
			if !slices.Equal(others, tt.wantOthers) {
				t.Errorf("others %q, want %q", others, tt.wantOthers)
			}
		})
	}
}
