package testutil

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// UpdateGoldenEnv names the environment variable that, set to anything
// but "", makes Golden rewrite the files it compares against.
const UpdateGoldenEnv = "PDMCP_UPDATE_GOLDEN"

// Golden compares got with the file at path (a golden file under a
// package's testdata/) and fails t when they differ. With
// PDMCP_UPDATE_GOLDEN set it first writes got there, creating the folder:
// a change to a golden file is then a diff to review.
func Golden(t testing.TB, path string, got []byte) {
	t.Helper()
	if os.Getenv(UpdateGoldenEnv) != "" {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with %s=1 to create it)", err, UpdateGoldenEnv)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs; if intended, rerun with %s=1 and review the diff:\ngot:\n%s\nwant:\n%s",
			path, UpdateGoldenEnv, got, want)
	}
}
