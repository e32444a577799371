package main

import (
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pdmcp/pdmcp/internal/devstack"
)

// TestPrintedClaudeLinesWorkAsPrinted runs the Claude Code block pdmcp dev
// prints, pasted into one shell as it is, with a stand-in `claude` that
// records the CA it was started with, then `claude mcp list` in that shell
// (as a person would next). Every claude process, not only `add`, must see
// the development CA. (testdata/realclients runs the same block with the
// real claude.) The state folder's path has a space and a quote in it: the
// lines are shell-quoted.
func TestPrintedClaudeLinesWorkAsPrinted(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "dev state's")
	info := &devstack.Info{MCPURL: "https://127.0.0.1:40001/mcp", CAFile: filepath.Join(dir, "ca", "ca.pem"),
		Issuer: "https://127.0.0.1:40002", HostClientID: "mcp-host", CallbackPort: 18124, ServerName: "protected-documents"}
	var out bytes.Buffer
	printDevInfo(&out, "pdmcp", dir, info)

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
	// The record's path has the quote too: it is written into the stub
	// quoted.
	stub := "#!/bin/sh\nprintf '%s|%s\\n' \"${NODE_EXTRA_CA_CERTS:-}\" \"$*\" >> " + shellQuote(record) + "\n"
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

// TestPrintedCurlLinesQuoteTheState: the curl block's `dev token` line,
// run by bash with a stand-in pdmcp, hands the state folder (a space and
// a quote in its path) over as one argument, and --cacert the CA file.
func TestPrintedCurlLinesQuoteTheState(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "it's a state")
	info := &devstack.Info{MCPURL: "https://127.0.0.1:40001/mcp", CAFile: filepath.Join(dir, "ca", "ca.pem"),
		Issuer: "https://127.0.0.1:40002", HostClientID: "mcp-host", CallbackPort: 18124, ServerName: "protected-documents"}
	var out bytes.Buffer
	printDevInfo(&out, "args", dir, info)
	var tokenLine, hLine string
	for _, l := range strings.Split(out.String(), "\n") {
		l = strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(l, "TOKEN=$("):
			tokenLine = l
		case strings.HasPrefix(l, "H=("):
			hLine = l
		}
	}
	if tokenLine == "" || hLine == "" {
		t.Fatalf("no TOKEN= or H= line in:\n%s", out.String())
	}
	// `args` prints each argument on its own line, between brackets.
	script := "args() { for a; do printf '[%s]\\n' \"$a\"; done; }\n" + tokenLine + "\nprintf '%s\\n' \"$TOKEN\"\n" +
		hLine + "\nprintf '[%s]\\n' \"${H[1]}\"\n"
	b, err := exec.Command("bash", "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("bash: %v\n%s", err, b)
	}
	want := "[dev]\n[token]\n[alice]\n[--state]\n[" + dir + "]\n[" + info.CAFile + "]\n"
	if string(b) != want {
		t.Fatalf("the printed lines ran as\n%s\nwant\n%s", b, want)
	}
}

// jsonKeys are the member names of the JSON object b.
func jsonKeys(t *testing.T, b []byte) []string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("not a JSON object: %v\n%s", err, b)
	}
	return slices.Sorted(maps.Keys(m))
}

// TestDevJSONShapes: dev --json and dev gateway --json print the members
// their help documents, and no password.
func TestDevJSONShapes(t *testing.T) {
	info := &devstack.Info{MCPURL: "https://127.0.0.1:40001/mcp", CAFile: "/s/ca/ca.pem", Issuer: "https://127.0.0.1:40002",
		HostClientID: "mcp-host", CallbackPort: 18124, ServerName: "protected-documents", FileRoot: "/s/files",
		Users: []devstack.User{{Name: "alice", Password: "alice-dev-password"}, {Name: "bob", Password: "bob-dev-password"}}}
	var b bytes.Buffer
	if err := writeJSON(&b, devJSON("/s", info)); err != nil {
		t.Fatal(err)
	}
	want := []string{"caFile", "callbackPort", "fileRoot", "hostClientId", "infoFile", "issuer", "mcpUrl", "serverName", "state", "users"}
	if got := jsonKeys(t, b.Bytes()); !slices.Equal(got, want) {
		t.Fatalf("dev --json members %q, want %q", got, want)
	}
	var got devInfoJSON
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Users, []string{"alice", "bob"}) || got.InfoFile != filepath.Join("/s", "dev.json") || got.CallbackPort != 18124 ||
		got.MCPURL != info.MCPURL || got.State != "/s" || got.FileRoot != "/s/files" {
		t.Fatalf("dev --json: %+v", got)
	}
	if strings.Contains(b.String(), "password") {
		t.Fatalf("dev --json prints a password:\n%s", b.String())
	}
	for _, k := range want {
		if !strings.Contains(newDevCmd().Long, `"`+k+`"`) {
			t.Errorf("dev's help does not document %q", k)
		}
	}

	b.Reset()
	g := devstack.GatewayInfo{URL: "https://127.0.0.1:40003", CAFile: "/g/ca.pem", PasswordFile: "/g/admin-password"}
	printGatewayInfo(&b, g, true)
	wantG := []string{"adminPasswordFile", "adminUser", "caFile", "gatewayUrl"}
	if got := jsonKeys(t, b.Bytes()); !slices.Equal(got, wantG) {
		t.Fatalf("dev gateway --json members %q, want %q", got, wantG)
	}
	var gj gatewayInfoJSON
	if err := json.Unmarshal(b.Bytes(), &gj); err != nil || gj.GatewayURL != g.URL || gj.AdminPasswordFile != g.PasswordFile || gj.AdminUser != "admin" {
		t.Fatalf("dev gateway --json: %+v, %v", gj, err)
	}
	gw, _, err := newDevCmd().Find([]string{"gateway"})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range wantG {
		if !strings.Contains(gw.Long, `"`+k+`"`) {
			t.Errorf("dev gateway's help does not document %q", k)
		}
	}
	b.Reset()
	printGatewayInfo(&b, g, false)
	if b.String() != "gateway: https://127.0.0.1:40003\nca: /g/ca.pem\nadmin user: admin\nadmin password file: /g/admin-password\n" {
		t.Fatalf("dev gateway's text:\n%s", b.String())
	}
}

// TestDevHelpNamesTheUsers: dev's help names every development user.
func TestDevHelpNamesTheUsers(t *testing.T) {
	long := newDevCmd().Long
	for _, u := range devstack.UserNames() {
		if !strings.Contains(long, u) {
			t.Errorf("dev's help does not name the user %s", u)
		}
	}
}
