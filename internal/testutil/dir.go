package testutil

import (
	"os"
	"testing"
)

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
