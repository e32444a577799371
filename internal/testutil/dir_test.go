package testutil

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestDirNamesSorted(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"b", ".hidden", "a"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := DirNames(t, dir), []string{".hidden", "a", "b"}; !slices.Equal(got, want) {
		t.Fatalf("DirNames = %v, want %v", got, want)
	}
	if got := DirNames(t, t.TempDir()); got != nil {
		t.Fatalf("DirNames of an empty folder = %v, want nil", got)
	}
}
