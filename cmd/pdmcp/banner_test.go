package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pdmcp/pdmcp/internal/devstack"
)

// TestPrintedClaudeLinesWorkAsPrinted runs the Claude Code block pdmcp dev
// prints, pasted into one shell as it is, with a stand-in `claude` that
// records the CA it was started with, then `claude mcp list` in that shell
// (as a person would next). Every claude process, not only `add`, must see
// the development CA. (testdata/realclients runs the same block with the
// real claude.)
func TestPrintedClaudeLinesWorkAsPrinted(t *testing.T) {
	dir := t.TempDir()
	info := &devstack.Info{MCPURL: "https://127.0.0.1:40001/mcp", CAFile: filepath.Join(dir, "ca", "ca.pem"),
		Issuer: "https://127.0.0.1:40002", HostClientID: "mcp-host", CallbackPort: 18124, ServerName: "protected-documents"}
	var out bytes.Buffer
	printDevInfo(&out, filepath.Join(dir, "state"), info)

	var block []string
	lines := strings.Split(out.String(), "\n")
	for i, l := range lines {
		if strings.TrimSpace(l) != "Claude Code:" {
			continue
		}
		for _, b := range lines[i+1:] {
			if strings.TrimSpace(b) == "" {
				break
			}
			block = append(block, strings.TrimSpace(b))
		}
	}
	if len(block) == 0 {
		t.Fatalf("no Claude Code block in:\n%s", out.String())
	}

	bin := filepath.Join(dir, "bin")
	record := filepath.Join(dir, "calls")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	stub := "#!/bin/sh\nprintf '%s|%s\\n' \"${NODE_EXTRA_CA_CERTS:-}\" \"$*\" >> " + record + "\n"
	if err := os.WriteFile(filepath.Join(bin, "claude"), []byte(stub), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", "set -e\n"+strings.Join(block, "\n")+"\nclaude mcp list\n")
	cmd.Env = []string{"PATH=" + bin + ":" + os.Getenv("PATH"), "HOME=" + dir}
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the printed lines fail in a shell: %v\n%s", err, b)
	}
	calls, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	want := info.CAFile + "|mcp add --transport http --client-id mcp-host --callback-port 18124 protected-documents " + info.MCPURL + "\n" +
		info.CAFile + "|mcp list\n"
	if string(calls) != want {
		t.Fatalf("claude was run as\n%s\nwant\n%s", calls, want)
	}
}
