//go:build unix

package testutil

import (
	"os"
	"path/filepath"
	"testing"
)

// TestWantMode: the permission bits are compared as set (on Unix; Windows
// reports only read-only or not).
func TestWantMode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	WantMode(t, path, 0o640)
}
