package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pdmcp/pdmcp/gateway/reference"
	"github.com/pdmcp/pdmcp/gateway/reference/reftest"
)

// The docs run test: the README's operator path is not only parsed (as
// TestDocsCommands does) but run, line by line and as written, with the
// built binary first on PATH, against a reference Gateway on 127.0.0.1. A
// step that no longer works as the README prints it fails here.

// operatorPathSection is the README section whose code lines are run.
const operatorPathSection = "## The operator path, first to last"

// readmePlaceholders are the values the README itself presents as the
// operator's own: the Gateway's URL (replaced by the running one), and the
// files the operator brings, written into the working folder.
const readmeGatewayURL = "https://gateway:8443"

// docsRunSkip is one README line the test does not run: the start of its
// text and why. Each must still match a line of the section, so a skip
// cannot outlive the line it was written for.
type docsRunSkip struct {
	prefix string
	reason string
}

var operatorPathSkips = []docsRunSkip{
	{"go build -o pdmcp ./cmd/pdmcp",
		"the test builds the binary once for every end-to-end test and puts its folder first on PATH"},
	{"install -m 755 pdmcp ~/.local/bin/pdmcp",
		"writes into the user's home; PATH already starts with the built binary's folder"},
	{"pdmcp serve --transport http --http-config mcp-http.json",
		"serves until stopped and needs an OpenID provider and a TLS certificate; the stdio server host-config prints is run instead"},
	{"pdmcp close-step --config config.json --manifest task-data/manifest.json --step referral-history",
		"the seeded data set defines no hand-off step; referral-history is docs/handoff.md's example manifest's step (close-step refuses a step the manifest lacks with exit 2)"},
}

// sectionCodeLines returns the code lines of the Markdown section headed
// heading (up to the next heading of its level), with their line numbers
// in the whole page.
func sectionCodeLines(t *testing.T, text, heading string) []codeLine {
	t.Helper()
	start := strings.Index(text, "\n"+heading+"\n")
	if start < 0 {
		t.Fatalf("README.md has no section %q", heading)
	}
	start++
	end := len(text)
	if i := strings.Index(text[start+len(heading):], "\n## "); i >= 0 {
		end = start + len(heading) + i + 1
	}
	first := strings.Count(text[:start], "\n")
	var out []codeLine
	for _, cl := range codeLines(text[start:end]) {
		cl.line += first
		out = append(out, cl)
	}
	return out
}

// mcpStdioExchange is what a host sends first: initialize, the initialized
// notification and tools/list; then it closes standard input.
const mcpStdioExchange = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"docs-run","version":"1"}}}
{"jsonrpc":"2.0","method":"notifications/initialized"}
{"jsonrpc":"2.0","id":2,"method":"tools/list"}
`

// runHostLaunch runs the server the way host-config's output tells a host
// to, sends it one initialize and tools/list, closes its input, and checks
// it answered both and exited 0.
func runHostLaunch(t *testing.T, where, hostConfig string, env []string, dir string) {
	t.Helper()
	var doc struct {
		MCPServers map[string]struct {
			Command string   `json:"command"`
			Args    []string `json:"args"`
		} `json:"mcpServers"`
	}
	if err := json.Unmarshal([]byte(hostConfig), &doc); err != nil {
		t.Fatalf("%s: host-config did not print JSON: %v\n%s", where, err, hostConfig)
	}
	if len(doc.MCPServers) != 1 {
		t.Fatalf("%s: host-config names %d servers, want 1:\n%s", where, len(doc.MCPServers), hostConfig)
	}
	for name, srv := range doc.MCPServers {
		cmd := exec.Command(srv.Command, srv.Args...)
		cmd.Dir, cmd.Env = dir, env
		cmd.Stdin = strings.NewReader(mcpStdioExchange)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s: the server %q host-config launches: %v\nstderr:\n%s", where, name, err, stderr.String())
		}
		answered := map[float64]bool{}
		tools := 0
		for _, l := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
			var m struct {
				ID     float64 `json:"id"`
				Result *struct {
					Tools []json.RawMessage `json:"tools"`
				} `json:"result"`
			}
			if err := json.Unmarshal([]byte(l), &m); err != nil || m.Result == nil {
				t.Fatalf("%s: the server %q answered %s (%v)\nstderr:\n%s", where, name, l, err, stderr.String())
			}
			answered[m.ID] = true
			if m.ID == 2 {
				tools = len(m.Result.Tools)
			}
		}
		if !answered[1] || !answered[2] || tools == 0 {
			t.Fatalf("%s: the server %q did not answer initialize and tools/list with tools:\n%s\nstderr:\n%s",
				where, name, stdout.String(), stderr.String())
		}
		if strings.Contains(strings.ToLower(stderr.String()), "deprecated") {
			t.Errorf("%s: the server %q warned of something deprecated:\n%s", where, name, stderr.String())
		}
	}
}

// TestDocsRunOperatorPath runs every code line of the README's operator
// path, in order, through bash in one working folder, against a reference
// Gateway: each must exit 0 and warn of nothing deprecated. The host-config
// line's launch is run too (one initialize and tools/list over stdio), so
// the audit file the later lines verify is the one a host's server wrote.
func TestDocsRunOperatorPath(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		// The README's lines are shell lines; every machine of this
		// project has bash. A missing one fails, never skips, the check.
		t.Fatalf("no bash to run the README's lines with: %v", err)
	}
	readme, err := os.ReadFile(filepath.Join(docsRepoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	lines := sectionCodeLines(t, string(readme), operatorPathSection)
	if len(lines) < 10 {
		t.Fatalf("the operator path has %d code lines; has the section changed shape?", len(lines))
	}

	// Every skip still names a line; every placeholder is still there.
	skipOf := map[int]docsRunSkip{}
	for _, s := range operatorPathSkips {
		n := 0
		for _, cl := range lines {
			if strings.HasPrefix(cl.text, s.prefix) {
				skipOf[cl.line] = s
				n++
			}
		}
		if n != 1 {
			t.Errorf("the skip %q matches %d lines of the operator path, want 1; update operatorPathSkips", s.prefix, n)
		}
	}
	section := ""
	for _, cl := range lines {
		section += cl.text + "\n"
	}
	for _, p := range []string{readmeGatewayURL, "gateway-ca.pem", "admin-pw", "ccd.xml", "--admin-user " + reftest.AdminUser, `"$AGENT"`} {
		if !strings.Contains(section, p) {
			t.Errorf("the operator path no longer holds %q, which this test fills in; update the test", p)
		}
	}
	if !strings.Contains(strings.Join(strings.Fields(string(readme)), " "), "`$AGENT` is the agent user") {
		t.Errorf("README.md no longer says what $AGENT stands for; the test sets it from seed's output")
	}
	if t.Failed() {
		t.FailNow()
	}

	bin := binary(t)
	gw := reftest.Start(t, reference.Config{})
	if !strings.HasPrefix(gw.URL, "https://127.0.0.1:") {
		t.Fatalf("the reference Gateway serves %s, not on 127.0.0.1", gw.URL)
	}

	// The working folder holds the files the operator brings.
	work := t.TempDir()
	ca, err := os.ReadFile(gw.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pw, err := os.ReadFile(gw.AdminPasswordFile)
	if err != nil {
		t.Fatal(err)
	}
	ccd, err := os.ReadFile(filepath.Join(docsRepoRoot, "internal", "operator", "seeddata", "synthetic-ccd.xml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct {
		name string
		data []byte
		mode os.FileMode
	}{{"gateway-ca.pem", ca, 0o644}, {"admin-pw", pw, 0o600}, {"ccd.xml", ccd, 0o644}} {
		if err := os.WriteFile(filepath.Join(work, f.name), f.data, f.mode); err != nil {
			t.Fatal(err)
		}
	}
	env := []string{
		"PATH=" + filepath.Dir(bin) + string(os.PathListSeparator) + os.Getenv("PATH"),
		"HOME=" + t.TempDir(),
		"TMPDIR=" + os.TempDir(),
	}

	ran := 0
	for _, cl := range lines {
		where := fmt.Sprintf("README.md:%d", cl.line)
		if s, ok := skipOf[cl.line]; ok {
			t.Logf("%s: skipped (%s): %s", where, s.reason, cl.text)
			continue
		}
		ws, err := shellWords(cl.text)
		if err != nil {
			t.Fatalf("%s: cannot split %s: %v", where, cl.text, err)
		}
		args, isPdmcp := pdmcpArgs(ws)
		if !isPdmcp || len(args) == 0 {
			t.Fatalf("%s: %s is not a pdmcp command; run it here or add it to operatorPathSkips with a reason", where, cl.text)
		}
		line := strings.ReplaceAll(cl.text, readmeGatewayURL, gw.URL)
		cmd := exec.Command(bash, "-c", line)
		cmd.Dir, cmd.Env = work, env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s: %s: %v\nstdout:\n%s\nstderr:\n%s", where, cl.text, err, stdout.String(), stderr.String())
		}
		ran++
		if out := strings.ToLower(stdout.String() + stderr.String()); strings.Contains(out, "deprecated") {
			t.Errorf("%s: %s warned of something deprecated:\n%s%s", where, cl.text, stdout.String(), stderr.String())
		}
		switch {
		case args[0].text == "seed" && !strings.Contains(cl.text, "--cleanup"):
			// $AGENT, as the README says, is the agent user seed printed.
			agent := ""
			for _, l := range strings.Split(stdout.String(), "\n") {
				if v, ok := strings.CutPrefix(l, "agent user: "); ok {
					agent = strings.TrimSpace(v)
				}
			}
			if agent == "" {
				t.Fatalf("%s: seed printed no agent user:\n%s", where, stdout.String())
			}
			env = append(env, "AGENT="+agent)
		case args[0].text == "host-config":
			runHostLaunch(t, where, stdout.String(), env, work)
		}
	}
	if ran+len(operatorPathSkips) != len(lines) {
		t.Fatalf("ran %d lines and skipped %d of %d", ran, len(operatorPathSkips), len(lines))
	}
}
