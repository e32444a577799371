package main

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pdmcp/pdmcp/grant"
)

// TestManifestLinkKeepsOneRecord is issue 32's "Why" 3: manifest.json is a
// symbolic link to manifest-2026.json. Before, a server started with the
// link and one started with the target kept two journals
// (manifest.journal.sqlite, manifest-2026.journal.sqlite), each serving
// only its own saves, under two locks; and pdmcp protect replaced the link
// with a regular file, so the target never got the new document. Now both
// names are resolved to the target: one journal, one lock folder, one
// record, and protect writes the target and keeps the link.
func TestManifestLinkKeepsOneRecord(t *testing.T) {
	s := newStack(t)
	dir := filepath.Dir(s.manifest)
	target := filepath.Join(dir, "manifest-2026.json")
	if err := os.Rename(s.manifest, target); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("manifest-2026.json", s.manifest); err != nil {
		t.Fatal(err)
	}
	viaTarget := *s
	viaTarget.manifest = target

	a, b := s.connect(t), viaTarget.connect(t)
	if m, isErr := call(t, a, "save_protected_result", saveArgs("evaluation-summary", "through the link", "a-1")); isErr || m["version"] != float64(1) {
		t.Fatalf("save through the link: %v", m)
	}
	// The server on the target places above the other's save, and the
	// other's key is replayed there: one record.
	if m, isErr := call(t, b, "save_protected_result", saveArgs("evaluation-summary", "through the target", "b-1")); isErr || m["version"] != float64(2) {
		t.Fatalf("save through the target: %v", m)
	}
	if m, _ := call(t, b, "save_protected_result", saveArgs("evaluation-summary", "through the link", "a-1")); m["replayed"] != true || m["version"] != float64(1) {
		t.Fatalf("the link server's save retried on the target's: %v", m)
	}
	for _, name := range []*stack{s, &viaTarget} {
		if got := resultVersions(t, name, "evaluation-summary"); !slices.Equal(got, []int{1, 2}) {
			t.Errorf("versions --manifest %s: %v, want [1 2]", filepath.Base(name.manifest), got)
		}
	}
	for _, stale := range []string{"manifest.journal.sqlite", "manifest.journal.sqlite.locks"} {
		if _, err := os.Lstat(filepath.Join(dir, stale)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s exists beside the link: %v", stale, err)
		}
	}
	for _, kept := range []string{"manifest-2026.journal.sqlite", "manifest-2026.journal.sqlite.locks"} {
		if _, err := os.Stat(filepath.Join(dir, kept)); err != nil {
			t.Errorf("%s: %v", kept, err)
		}
	}

	// protect through the link writes the target and keeps the link.
	if out, stderr, ok := s.protect(t, nil, "--source", oruSource, "--document-id", "probe"); !ok || !strings.Contains(out, "PROTECT: OK") {
		t.Fatalf("protect: %s %s", out, stderr)
	}
	if fi, err := os.Lstat(s.manifest); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Fatalf("manifest.json after protect: %v, %v; want the symbolic link kept", fi, err)
	}
	m, err := grant.LoadManifest(target)
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := m.Documents["probe"]; !ok || len(d.Fragments) == 0 {
		t.Fatalf("the link's target lacks the protected document: %+v", d)
	}
	if _, err := os.Stat(grant.LockPath(target)); err != nil {
		t.Errorf("protect did not lock the target: %v", err)
	}
}
