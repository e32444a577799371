package testutil

import (
	"os"
	"testing"
)

// WantMode fails the test unless the file at path has the permission
// bits want.
func WantMode(t testing.TB, path string, want os.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != want {
		t.Fatalf("%s is mode %04o, want %04o", path, got, want)
	}
}

// DirNames lists the names in dir, sorted as os.ReadDir sorts them; it
// fails the test if dir cannot be read.
func DirNames(t testing.TB, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}
