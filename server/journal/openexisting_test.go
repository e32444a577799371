package journal

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// TestOpenExistingNeverCreates: Open creates a missing journal; OpenExisting
// refuses one, leaving nothing behind, so a reader of the record never puts
// a new, empty journal where a lost one was.
func TestOpenExistingNeverCreates(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "manifest.journal.sqlite")
	_, err := OpenExisting(ctx, path)
	if !errors.Is(err, ErrMissing) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("OpenExisting of a missing file: %v, want ErrMissing and fs.ErrNotExist", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("OpenExisting left a file behind: %v", err)
	}
	openAt(t, path).Close()
	j, err := OpenExisting(ctx, path)
	if err != nil {
		t.Fatalf("OpenExisting of the file Open made: %v", err)
	}
	j.Close()
}

// TestCheckFile: a handle notices its file removed or replaced (a restore
// renamed or copied over it), by the file's identity.
func TestCheckFile(t *testing.T) {
	tests := []struct {
		name   string
		change func(t *testing.T, path string)
		want   error
	}{
		{"unchanged", func(*testing.T, string) {}, nil},
		{"removed", func(t *testing.T, path string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}, ErrReplaced},
		{"another renamed over it", func(t *testing.T, path string) {
			other := filepath.Join(filepath.Dir(path), "restored.sqlite")
			openAt(t, other).Close()
			if err := os.Rename(other, path); err != nil {
				t.Fatal(err)
			}
		}, ErrReplaced},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			j, path := openTemp(t)
			if err := j.CheckFile(); err != nil {
				t.Fatalf("before: %v", err)
			}
			tc.change(t, path)
			if err := j.CheckFile(); !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("CheckFile: %v, want %v", err, tc.want)
			}
		})
	}
}

// TestHoldsSaves: a new journal holds no save; one reserved save is enough.
func TestHoldsSaves(t *testing.T) {
	ctx := context.Background()
	j, _ := openTemp(t)
	if holds, err := j.HoldsSaves(ctx); err != nil || holds {
		t.Fatalf("a new journal: %v, %v", holds, err)
	}
	if _, err := j.Reserve(ctx, SaveKey{Destination: "summary", IdempotencyKey: "k"}, sum("t")); err != nil {
		t.Fatal(err)
	}
	if holds, err := j.HoldsSaves(ctx); err != nil || !holds {
		t.Fatalf("after a reservation: %v, %v", holds, err)
	}
}

// TestJournalFollowsLinks: a manifest that is a symbolic link has the
// journal of the file it names, and a journal opened through a link is
// the target (its Path, and so its lock folder beside it).
func TestJournalFollowsLinks(t *testing.T) {
	dir := t.TempDir()
	target, link := filepath.Join(dir, "manifest-2026.json"), filepath.Join(dir, "manifest.json")
	if err := os.WriteFile(target, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("manifest-2026.json", link); err != nil {
		t.Fatal(err)
	}
	if got, want := DefaultPath(link), filepath.Join(dir, "manifest-2026.journal.sqlite"); got != want {
		t.Errorf("DefaultPath(link) = %s, want %s", got, want)
	}
	viaName := openAt(t, filepath.Join(dir, "real.sqlite"))
	if err := os.Symlink("real.sqlite", filepath.Join(dir, "alias.sqlite")); err != nil {
		t.Fatal(err)
	}
	j := openAt(t, filepath.Join(dir, "alias.sqlite"))
	if j.Path() != viaName.Path() {
		t.Errorf("a journal opened through a link: %s, want %s", j.Path(), viaName.Path())
	}
}
