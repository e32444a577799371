package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDevFileTools: pdmcp dev grants the file tools on files/ in its state
// folder with a sample file, says so in its banner, and the sample
// round-trips through encrypt_file and decrypt_file over HTTP.
func TestDevFileTools(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	d := startDev(t, state)
	root, _ := d.info["fileRoot"].(string)
	want, err := filepath.EvalSymlinks(filepath.Join(state, "files"))
	if err != nil || root != want {
		t.Fatalf("dev.json fileRoot %q, want %q (%v)", root, want, err)
	}
	sample, err := os.ReadFile(filepath.Join(root, "sample-notes.txt"))
	if err != nil || len(sample) == 0 {
		t.Fatalf("sample file: %v", err)
	}
	if !strings.Contains(d.out.String(), "encrypt_file and decrypt_file work in "+root) {
		t.Fatalf("the banner does not name the file root:\n%s", d.out.String())
	}
	cs := devClient(t, d, "alice")
	res, isErr := call(t, cs, "encrypt_file", map[string]any{"path": "sample-notes.txt"})
	if isErr || res["envelope"] != "sample-notes.txt.pisoft" {
		t.Fatalf("encrypt_file: %v", res)
	}
	res, isErr = call(t, cs, "decrypt_file", map[string]any{"path": "sample-notes.txt.pisoft"})
	if isErr || res["path"] != "sample-notes.decrypted.txt" {
		t.Fatalf("decrypt_file: %v", res)
	}
	got, err := os.ReadFile(filepath.Join(root, "sample-notes.decrypted.txt"))
	if err != nil || !bytes.Equal(got, sample) {
		t.Fatalf("decrypted sample differs (%v)", err)
	}
	m, e := call(t, cs, "encrypt_file", map[string]any{"path": "../dev.json"})
	wantRefused(t, m, e, "adapter", "OUTSIDE_ROOT")
}
