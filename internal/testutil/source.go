package testutil

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// SourceFile is one non-test Go file of a package, for the tests that
// read a package's own source (a code passed by constant, a crash point
// named by a string).
type SourceFile struct {
	Path string
	Text string
}

// GoSources returns the Go files in dir that are not tests, in name
// order.
func GoSources(t testing.TB, dir string) []SourceFile {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []SourceFile
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, SourceFile{Path: p, Text: string(b)})
	}
	return out
}
