//go:build unix

package operator

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/pdmcp/pdmcp/internal/fileerr"
	"github.com/pdmcp/pdmcp/internal/safefile"
)

// TestReadSecretFile: the admin password is read as a secret: owner-only,
// never through a symbolic link, its trailing newline dropped.
func TestReadSecretFile(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	if err := os.WriteFile(pw, []byte("hunter2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := readSecretFile(pw); err != nil || got != "hunter2" {
		t.Fatalf("owner-only file: %q, %v", got, err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(pw, link); err != nil {
		t.Fatal(err)
	}
	if _, err := readSecretFile(link); !errors.Is(err, safefile.ErrSymlink) {
		t.Errorf("through a link: %v, want ErrSymlink", err)
	}
	if err := os.Chmod(pw, 0o640); err != nil {
		t.Fatal(err)
	}
	want := "secret file: " + pw + " has mode 0640: group and others must have no access (chmod 600)"
	if _, err := readSecretFile(pw); !errors.Is(err, safefile.ErrNotOwnerOnly) || err.Error() != want {
		t.Errorf("mode 0640: %v, want %q", err, want)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	want = empty + " is empty: it should hold the secret on its first line"
	if _, err := readSecretFile(empty); !errors.Is(err, fileerr.ErrEmpty) || err.Error() != want {
		t.Errorf("empty file: %v, want %q", err, want)
	}
}

// TestProtectJournalMode: a protect journal others may read is refused in
// the wording of every operator file's mode.
func TestProtectJournalMode(t *testing.T) {
	path := filepath.Join(t.TempDir(), ProtectJournalName)
	if err := os.WriteFile(path, []byte(`{"version":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadProtectJournal(path); err != nil {
		t.Fatalf("owner-only journal: %v", err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	want := "protect journal: " + path + " has mode 0644: group and others must have no access (chmod 600)"
	if _, err := loadProtectJournal(path); !errors.Is(err, safefile.ErrNotOwnerOnly) || err.Error() != want {
		t.Errorf("0644 journal: %v, want %q", err, want)
	}
}
