package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/grant"
)

// grantFixture is a copy of grant's valid manifest in a fresh folder.
func grantFixture(t *testing.T) (manifest, dir string) {
	t.Helper()
	dir = t.TempDir()
	b, err := os.ReadFile(filepath.Join("..", "..", "grant", "testdata", "manifest-valid.json"))
	if err != nil {
		t.Fatal(err)
	}
	manifest = filepath.Join(dir, "manifest.json")
	if err := os.WriteFile(manifest, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return manifest, dir
}

// Why 1: a caller-identity grant written as the README writes it lasts a
// service's 30 days, not a task's 15 minutes; --ttl-seconds still decides
// when given, and a stdio grant keeps its 900 s.
func TestGrantCallerIdentityDefaultTTL(t *testing.T) {
	manifest, dir := grantFixture(t)
	for _, tc := range []struct {
		name string
		args []string
		want time.Duration
	}{
		{"caller identity", []string{"--caller-identity", "--all-approved"}, 30 * 24 * time.Hour},
		{"caller identity, ttl given", []string{"--caller-identity", "--all-approved", "--ttl-seconds", "900"}, 900 * time.Second},
		{"local user", []string{"--local-user", "svc.agent", "--all-approved"}, 900 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(dir, "grant.json")
			run(t, append([]string{"grant", "--manifest", manifest, "--out", out}, tc.args...)...)
			g, err := grant.Load(out)
			if err != nil {
				t.Fatal(err)
			}
			if got := g.NotAfter.Sub(g.IssuedAt); got != tc.want {
				t.Fatalf("the grant lasts %s, want %s", got, tc.want)
			}
		})
	}
}

// Why 6: --file-root with documents and no --tools drops the document
// tools; grant says so on stderr. A grant for nothing is refused.
func TestGrantWarnsAndRefuses(t *testing.T) {
	manifest, dir := grantFixture(t)
	out := filepath.Join(dir, "grant.json")
	root := filepath.Join(dir, "files")
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := pdmcpCmd(t, "grant", "--manifest", manifest, "--out", out, "--local-user", "svc.agent", "--all-approved",
		"--file-root", root)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("grant: %v: %s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "warning: with --file-root and no --tools") {
		t.Fatalf("no warning that the document tools were dropped: %q", stderr.String())
	}

	out2 := filepath.Join(dir, "nothing.json")
	cmd = pdmcpCmd(t, "grant", "--manifest", manifest, "--out", out2, "--local-user", "svc.agent")
	stderr.Reset()
	cmd.Stderr = &stderr
	if err := cmd.Run(); err == nil || !strings.Contains(stderr.String(), "names no document, no destination and no file root") {
		t.Fatalf("a grant for nothing: %v: %s", err, stderr.String())
	}
	if _, err := os.Stat(out2); !os.IsNotExist(err) {
		t.Fatal("a refused grant was written")
	}
}
