//go:build unix

package operator

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

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
	if _, err := readSecretFile(pw); !errors.Is(err, safefile.ErrNotOwnerOnly) {
		t.Errorf("mode 0640: %v, want ErrNotOwnerOnly", err)
	}
}
