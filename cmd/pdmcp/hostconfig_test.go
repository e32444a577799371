package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pdmcp/pdmcp/grant"
)

// TestHostConfigOut: with --out FILE host-config writes the configuration
// there (mode 600, nothing left beside it) and says so in one line, or
// with --json as {"out","format","tools"}; --out - is standard output.
func TestHostConfigOut(t *testing.T) {
	s := newStack(t)
	files := []string{"--config", s.config, "--manifest", s.manifest, "--grant", s.grant, "--audit", s.audit}
	dir := t.TempDir()
	out := filepath.Join(dir, "mcp.json")
	code, stdout, stderr := runCLI(t, append([]string{"host-config", "--out", out}, files...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	tools := strings.Join(grant.DocumentTools(), ", ")
	if want := "host-config: wrote " + out + " (json), tools: " + tools + "\n"; stdout != want {
		t.Fatalf("stdout %q, want %q", stdout, want)
	}
	fi, err := os.Stat(out)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v, mode %v", out, err, fi.Mode())
	}
	b, _ := os.ReadFile(out)
	var doc struct {
		MCPServers map[string]json.RawMessage `json:"mcpServers"`
	}
	if err := json.Unmarshal(b, &doc); err != nil || len(doc.MCPServers) != 1 {
		t.Fatalf("%s: %v\n%s", out, err, b)
	}
	toml := filepath.Join(dir, "codex.toml")
	code, stdout, stderr = runCLI(t, append([]string{"host-config", "--format", "codex-toml", "--out", toml, "--json"}, files...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var got hostConfigWritten
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("--json: %v\n%s", err, stdout)
	}
	if got.Out != toml || got.Format != "codex-toml" || !slices.Equal(got.Tools, grant.DocumentTools()) {
		t.Fatalf("--json: %+v", got)
	}
	if keys := jsonKeys(t, []byte(stdout)); !slices.Equal(keys, []string{"format", "out", "tools"}) {
		t.Fatalf("--json members %q", keys)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Fatalf("beside the outputs: %v", entries)
	}
	code, stdout, _ = runCLI(t, append([]string{"host-config", "--out", "-"}, files...)...)
	if code != 0 || !strings.HasPrefix(stdout, "{") || strings.Contains(stdout, "host-config: wrote") {
		t.Fatalf("--out -: exit %d\n%s", code, stdout)
	}
}
