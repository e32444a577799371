package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/pdmcp/pdmcp/audit"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/devstack"
	"github.com/pdmcp/pdmcp/server/journal"
)

// runCLI runs pdmcp in this process with args and returns its exit status,
// standard output and standard error.
func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := runMain(context.Background(), args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// completions are the values `pdmcp __complete args...` offers, and its
// directive line.
func completions(t *testing.T, args ...string) ([]string, string) {
	t.Helper()
	code, out, stderr := runCLI(t, append([]string{cobra.ShellCompRequestCmd}, args...)...)
	if code != 0 {
		t.Fatalf("__complete %q: exit %d\n%s", args, code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[:len(lines)-1], lines[len(lines)-1]
}

// TestCompletion: the shell completion offers each closed set of values:
// transports, log levels and formats, host-config's formats, dev's
// providers and users, bench's figures and the grant's tools (a list:
// the ones given are kept in front and not offered again).
func TestCompletion(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"serve", "--transport", ""}, []string{"stdio", "http"}},
		{[]string{"serve", "--log-level", ""}, []string{"debug", "info", "warn", "error"}},
		{[]string{"check", "--log-format", ""}, []string{"text", "json"}},
		{[]string{"host-config", "--format", ""}, []string{"json", "codex-toml"}},
		{[]string{"dev", "--provider", ""}, []string{"dev", "keycloak"}},
		{[]string{"dev", "token", ""}, []string{"alice", "bob", "carol", "patient", "doctor"}},
		{[]string{"dev", "token", "alice", ""}, nil},
		{[]string{"bench", "--only", ""}, []string{"P1", "P2", "P3", "P4", "P5", "P6", "P7"}},
		{[]string{"help", "dev", ""}, []string{"gateway\tRun the reference Gateway and key server over TLS on 127.0.0.1",
			"token\tPrint an access token for a development user (authorization code + PKCE, as a host does)"}},
		{[]string{"bench", "--only", "P1,P3,P"}, []string{"P1,P3,P2", "P1,P3,P4", "P1,P3,P5", "P1,P3,P6", "P1,P3,P7"}},
	} {
		got, _ := completions(t, tc.args...)
		if !slices.Equal(got, tc.want) {
			t.Errorf("__complete %q = %q, want %q", tc.args, got, tc.want)
		}
	}
	// Files and folders: the shell lists them, filtered by the directive
	// (8: by extension, 16: folders only, 0: any file).
	for _, tc := range []struct {
		args      []string
		want      []string
		directive string
	}{
		{[]string{"serve", "--config", ""}, []string{"json"}, ":8"},
		{[]string{"host-config", "--grant", ""}, []string{"json"}, ":8"},
		{[]string{"check", "--seed-record", ""}, []string{"json"}, ":8"},
		{[]string{"dev", "--state", ""}, nil, ":16"},
		{[]string{"dev", "token", "--state", ""}, nil, ":16"},
		{[]string{"bench", "--dir", ""}, nil, ":16"},
		{[]string{"audit", "verify", "--key", ""}, nil, ":0"},
	} {
		got, directive := completions(t, tc.args...)
		if !slices.Equal(got, tc.want) || directive != tc.directive {
			t.Errorf("__complete %q = %q %s, want %q %s", tc.args, got, directive, tc.want, tc.directive)
		}
	}
}

// TestCompleteTools: completeTools offers the server's tool names not yet
// in the list, after the list so far, and no space after one.
func TestCompleteTools(t *testing.T) {
	got, dir := completeTools(nil, nil, "")
	if !slices.Equal(got, grant.AllTools()) || len(got) != 9 {
		t.Fatalf("completeTools(\"\") = %q", got)
	}
	if dir&cobra.ShellCompDirectiveNoSpace == 0 || dir&cobra.ShellCompDirectiveNoFileComp == 0 {
		t.Fatalf("directive %d: want no space and no files", dir)
	}
	got, _ = completeTools(nil, nil, grant.ToolReadProtectedDocument+",save_")
	want := []string{grant.ToolReadProtectedDocument + "," + grant.ToolSaveProtectedResult,
		grant.ToolReadProtectedDocument + "," + grant.ToolSaveProtectedFragment}
	if !slices.Equal(got, want) {
		t.Fatalf("completeTools(read,save_) = %q, want %q", got, want)
	}
	got, _ = completeTools(nil, nil, grant.ToolHandOff+",hand")
	if len(got) != 0 {
		t.Fatalf("completeTools offers a tool already listed: %q", got)
	}
}

// failingWriter fails every write: a standard output that is gone.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("write: broken pipe") }

// checkFolder is a task folder that check reads without a Gateway: a
// manifest, its journal bound to the task, and a stopped save's temporary
// file (a finding).
func checkFolder(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	mp := filepath.Join(dir, "manifest.json")
	m := &grant.Manifest{Version: grant.ManifestVersion, Task: "task-a",
		Destinations: map[string]grant.Destination{"d": {TTag: "t-d-0123456789"}}}
	if err := m.Save(mp); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	j, err := journal.Open(ctx, journal.DefaultPath(mp))
	if err != nil {
		t.Fatal(err)
	}
	if err := j.BindTask(ctx, "task-a"); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "results"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "results", ".pdmcp-save-00112233445566778899aabb.tmp"), []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	return mp
}

// brokenAudit is an audit file of three lines with the middle one removed.
func brokenAudit(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l, err := audit.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := l.Write(audit.Shutdown{RunID: fmt.Sprint("run-", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(b), "\n")
	if err := os.WriteFile(path, []byte(lines[0]+lines[2]), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// deadDevState is a dev state folder whose dev.json names a provider on a
// loopback port nothing listens on (a stack that has stopped).
func deadDevState(t *testing.T) (state, issuer string) {
	t.Helper()
	state = t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	issuer = "https://" + ln.Addr().String()
	ln.Close()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "dev CA"}, IsCA: true,
		BasicConstraintsValid: true, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(state, "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	info := devstack.Info{MCPURL: "https://127.0.0.1:1/mcp", CAFile: ca, Issuer: issuer, HostClientID: "mcp-host",
		CallbackPort: devstack.CallbackPort, Users: []devstack.User{{Name: "alice", Password: "alice-dev-password"}}}
	b, err := json.Marshal(info)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(devstack.InfoPath(state), b, 0o600); err != nil {
		t.Fatal(err)
	}
	return state, issuer
}

// TestExitStatuses: each exit status of the table pdmcp --help lists, from
// a real case of it, with what standard error says.
func TestExitStatuses(t *testing.T) {
	manifest := checkFolder(t)
	broken := brokenAudit(t)
	state, issuer := deadDevState(t)
	missing := filepath.Join(t.TempDir(), "no-such-manifest.json")
	files := t.TempDir()
	empty := filepath.Join(files, "empty.json")
	malformed := filepath.Join(files, "malformed.json")
	caseVariant := filepath.Join(files, "case.json")
	openConfig := filepath.Join(files, "config.json")
	for path, body := range map[string]string{empty: " \n", malformed: "{\"version\": 1,", caseVariant: `{"Version": 1}`, openConfig: "{}"} {
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(openConfig, 0o666); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"unknown command", []string{"vershun"}, exitUsage, `pdmcp: unknown command "vershun"; did you mean "version"?`},
		{"unknown subcommand", []string{"dev", "tokn"}, exitUsage, `pdmcp dev: unknown command "tokn"; did you mean "token"?`},
		{"unknown flag", []string{"check", "--manifst", manifest}, exitUsage, "pdmcp check: unknown flag --manifst; did you mean --manifest?"},
		{"required flag missing", []string{"check"}, exitUsage, "pdmcp check: --manifest is required (the operator's manifest.json)"},
		{"required flags missing", []string{"serve", "--config", "config.json"}, exitUsage,
			"pdmcp serve: --audit, --grant, --manifest are required:\n  --audit: the audit file"},
		{"bad duration", []string{"dev", "--access-token-lifetime", "10"}, exitUsage, `pdmcp dev: --access-token-lifetime "10": not a duration`},
		{"bad number", []string{"dev", "gateway", "--port", "https"}, exitUsage, `--port "https": not a whole number`},
		{"value missing", []string{"check", "--manifest"}, exitUsage, "pdmcp check: --manifest needs a value: the operator's manifest.json\n"},
		{"named file missing", []string{"check", "--manifest", missing}, exitUsage, "--manifest " + missing + ": no such file or directory"},
		{"file of a flag missing", []string{"seed", "--config", missing, "--out", files}, exitUsage,
			"pdmcp: --config " + missing + ": no such file or directory"},
		{"audit file missing", []string{"audit", "verify", missing}, exitUsage, missing},
		{"argument missing", []string{"dev", "token"}, exitUsage, "pdmcp dev token: name the user: alice, bob, carol, patient or doctor"},
		{"argument too many", []string{"version", "now"}, exitUsage, `pdmcp version takes no arguments, and was given "now"`},
		{"check's findings", []string{"check", "--manifest", manifest}, exitRefused, ""},
		{"empty file", []string{"check", "--manifest", empty}, exitRefused, empty + " is empty: it should hold"},
		{"malformed file", []string{"check", "--manifest", malformed}, exitRefused, malformed + ": not valid JSON at line 1"},
		{"member in another case", []string{"check", "--manifest", caseVariant}, exitRefused, caseVariant + ": Version at line 1"},
		{"file others may write", []string{"check", "--manifest", manifest, "--config", openConfig}, exitRefused,
			openConfig + " has mode 0666: group and others must not be able to write it (chmod go-w)"},
		{"broken audit chain", []string{"audit", "verify", broken}, exitRefused, "pdmcp audit verify: the chain breaks at " + broken + ":2"},
		{"provider does not answer", []string{"dev", "token", "alice", "--state", state}, exitUnreachable,
			"pdmcp dev token: the OpenID provider at " + issuer + " did not answer: connect: connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.stderr) {
				t.Fatalf("pdmcp %q: exit %d, want %d; stderr:\n%s\nwant it to say %q", tc.args, code, tc.code, stderr, tc.stderr)
			}
			if strings.Count(strings.TrimSpace(stderr), "\n") > 0 && tc.name != "required flags missing" && tc.code == exitUsage {
				t.Errorf("a usage error spread over lines:\n%s", stderr)
			}
		})
	}
	t.Run("failed while working", func(t *testing.T) {
		var stderr bytes.Buffer
		if code := runMain(context.Background(), []string{"version"}, failingWriter{}, &stderr); code != exitFailure ||
			!strings.Contains(stderr.String(), "broken pipe") {
			t.Fatalf("version to a broken standard output: exit %d: %s", code, stderr.String())
		}
	})
}

// TestHelpListsExitStatuses: pdmcp --help ends its description with the
// table of exit statuses, and every command's help marks its required
// flags and shows examples.
func TestHelpListsExitStatuses(t *testing.T) {
	code, out, _ := runCLI(t, "--help")
	if code != 0 {
		t.Fatalf("--help: exit %d", code)
	}
	for _, line := range []string{"Exit status (every command):", "  0  done", "  1  failed while working",
		"  2  wrong command line", "  3  refused by a check", "  4  the Gateway, key server or OpenID provider did not answer"} {
		if !strings.Contains(out, line) {
			t.Errorf("--help does not say %q:\n%s", line, out)
		}
	}
	_, out, _ = runCLI(t, "serve", "--help")
	for _, f := range []string{"--config", "--manifest", "--grant", "--audit"} {
		if !regexp.MustCompile(`(?m)^\s+` + f + ` string .*\(required\)$`).MatchString(out) {
			t.Errorf("serve --help does not mark %s required:\n%s", f, out)
		}
	}
	if regexp.MustCompile(`(?m)--journal .*\(required\)$`).MatchString(out) {
		t.Errorf("serve --help marks --journal required")
	}
}

// TestEveryCommandHasExamples: each runnable command's help has an
// Examples section; each example runs a pdmcp command that exists, with
// flags it offers under their current names.
func TestEveryCommandHasExamples(t *testing.T) {
	root := newRootCmd()
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "completion" || (c.HasParent() && c.Parent().Name() == "completion") {
			return
		}
		if c.Runnable() {
			if c.Example == "" {
				t.Errorf("%s has no examples", c.CommandPath())
			}
			for _, line := range strings.Split(strings.ReplaceAll(c.Example, "\\\n", " "), "\n") {
				checkExample(t, root, line)
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// checkExample holds one example line to the command tree: the words
// after "pdmcp" up to the first flag name a command, and every --flag is
// one it offers, not hidden or deprecated (after clean-env's --, the
// command it runs is held to the same). A shell comment, a redirection and
// a $( ) around the command are left out.
func checkExample(t *testing.T, root *cobra.Command, line string) {
	t.Helper()
	l, _, _ := strings.Cut(line, " #")
	l, _, _ = strings.Cut(l, ">")
	_, l, ok := strings.Cut(l, "pdmcp ")
	if !ok {
		t.Errorf("example %q does not run pdmcp", line)
		return
	}
	words := strings.Fields(strings.TrimSuffix(strings.TrimSpace(l), ")"))
	n := 0
	for n < len(words) && !strings.HasPrefix(words[n], "-") {
		n++
	}
	c, rest, err := root.Find(words[:n])
	if err != nil || (len(rest) > 0 && c.Args == nil) || c == root && n > 0 {
		t.Errorf("example %q: no command %q", line, words[:n])
		return
	}
	for i, w := range words[n:] {
		if w == "--" { // clean-env's command follows
			if rest := words[n+i+1:]; len(rest) > 0 && rest[0] == "pdmcp" {
				checkExample(t, root, strings.Join(rest, " "))
			}
			return
		}
		if !strings.HasPrefix(w, "--") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(w, "--"), "=")
		f := c.Flags().Lookup(name)
		if f == nil {
			f = c.InheritedFlags().Lookup(name)
		}
		if f == nil && name == "version" && c == root {
			continue
		}
		if f == nil || f.Hidden || f.Deprecated != "" {
			t.Errorf("example %q: %s offers no --%s", line, c.CommandPath(), name)
		}
	}
}

// TestRefusalTexts: each refusal the frame's commands print, from the
// command line that causes it: the exit status and the words, which name
// what was given.
func TestRefusalTexts(t *testing.T) {
	files := []string{"--config", "c.json", "--manifest", "m.json", "--grant", "g.json", "--audit", "a.jsonl"}
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{append([]string{"serve", "--transport", "htp"}, files...), exitUsage, `pdmcp serve: --transport "htp": use stdio or http`},
		{append([]string{"serve", "--transport", "http"}, files...), exitUsage, "pdmcp serve: --transport http needs --http-config mcp-http.json"},
		{append([]string{"serve", "--http-config", "h.json"}, files...), exitUsage, "pdmcp serve: --http-config h.json is for --transport http"},
		{append([]string{"host-config", "--format", "yaml"}, files...), exitUsage, `pdmcp host-config: --format "yaml": use json (an mcpServers object) or codex-toml`},
		{append([]string{"host-config", "--json"}, files...), exitUsage, "pdmcp host-config: --json prints what --out FILE wrote"},
		{[]string{"dev", "--provider", "okta"}, exitUsage, `pdmcp dev: --provider "okta": use dev (the built-in development provider) or keycloak`},
		{[]string{"dev", "--keycloak-info", "k.json"}, exitUsage, "pdmcp dev: --keycloak-info k.json is for --provider keycloak (the provider is dev)"},
		{[]string{"dev", "--provider", "keycloak", "--access-token-lifetime", "1m"}, exitUsage, "pdmcp dev: --access-token-lifetime 1m0s is for --provider dev"},
		{[]string{"dev", "--access-token-lifetime", "0s"}, exitUsage, "pdmcp dev: --access-token-lifetime 0s: a lifetime must be more than zero"},
		{[]string{"dev", "gateway", "--port", "70000"}, exitUsage, "pdmcp dev gateway: --port 70000: a port is 1 to 65535"},
		{[]string{"dev", "token", "zed"}, exitUsage, `pdmcp dev token: "zed" is not a development user: use alice, bob, carol, patient or doctor`},
		{[]string{"dev", "token", "alice", "bob"}, exitUsage, "pdmcp dev token: name one user, not 2 (alice bob)"},
		{[]string{"bench", "--only", "P8"}, exitUsage, `pdmcp bench: --only "P8": the figures are P1 to P7`},
		{[]string{"check", "--manifest", "m.json", "--owner", "alice"}, exitUsage, "pdmcp check: --owner names the keys' owner for the key check, which --config turns on"},
		{[]string{"check", "--manifest", "m.json", "--seed-record", "r.json"}, exitUsage, "pdmcp check: --seed-record names the keys' owner"},
		{[]string{"check", "--manifest", "m.json", "--record", "r.json"}, exitUsage, "Flag --record has been deprecated, use --seed-record instead"},
		{[]string{"check", "--manifest", "m.json", "--key-server", "c.json", "--owner", "o"}, exitUsage, "Flag --key-server has been deprecated, use --config instead"},
		{[]string{"audit", "verify"}, exitUsage, "pdmcp audit verify: name the audit files, oldest first"},
		{[]string{"audit", "nosuch"}, exitUsage, `pdmcp audit: unknown command "nosuch"`},
		{[]string{"help", "sevre"}, exitUsage, `pdmcp: unknown command "sevre"; did you mean "serve"?`},
		{[]string{"help", "dev", "tokn"}, exitUsage, `pdmcp dev: unknown command "tokn"; did you mean "token"?`},
		{[]string{"completion", "bsh"}, exitUsage, `pdmcp completion: unknown command "bsh"`},
		{[]string{"clean-env"}, exitUsage, "pdmcp clean-env: name the command to run, after --"},
		{[]string{"version", "--log-level", "loud"}, exitUsage, `--log-level "loud": use debug, info, warn or error`},
		{[]string{"version", "--log-format", "xml"}, exitUsage, `--log-format "xml": use text or json`},
	} {
		code, stdout, stderr := runCLI(t, tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.stderr) {
			t.Errorf("pdmcp %q: exit %d, want %d; stderr:\n%s\nwant it to say %q", tc.args, code, tc.code, stderr, tc.stderr)
		}
		// Standard output is the commands' result only (a --json object,
		// a file written to -): no warning or refusal goes there.
		if stdout != "" {
			t.Errorf("pdmcp %q wrote to standard output:\n%s", tc.args, stdout)
		}
	}
}

// TestShellQuote: a word comes back from a shell as it went in, quoted
// only when it must be.
func TestShellQuote(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/var/lib/pdmcp/ca.pem", "/var/lib/pdmcp/ca.pem"},
		{"https://127.0.0.1:8443/mcp", "https://127.0.0.1:8443/mcp"},
		{"", "''"},
		{"my state", "'my state'"},
		{"it's", `'it'\''s'`},
		{"$HOME", "'$HOME'"},
	} {
		if got := shellQuote(tc.in); got != tc.want {
			t.Errorf("shellQuote(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
	words := []string{"/tmp/dev state's/ca.pem", "a\"b", "$(touch x)", "`x`", "back\\slash", "tab\there", "new\nline", "*", "~", "!x", ""}
	script := "printf '[%s]\\n'"
	want := ""
	for _, w := range words {
		script += " " + shellQuote(w)
		want += "[" + w + "]\n"
	}
	b, err := exec.Command("bash", "-c", script).CombinedOutput()
	if err != nil || string(b) != want {
		t.Fatalf("bash -c %s: %v\n%s\nwant\n%s", script, err, b, want)
	}
}

// TestErrorLine: cobra's own unknown-command message (from its NoArgs)
// becomes one line naming the command; other errors get the program's
// name unless they start with it.
func TestErrorLine(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"unknown command \"x\" for \"pdmcp protect\"", `pdmcp protect: unknown command "x"`},
		{"unknown command \"tokn\" for \"pdmcp dev\"\n\nDid you mean this?\n\ttoken\n", `pdmcp dev: unknown command "tokn"; did you mean "token"?`},
		{"pdmcp check: --manifest is required (the operator's manifest.json)", "pdmcp check: --manifest is required (the operator's manifest.json)"},
		{"open x.json: no such file or directory", "pdmcp: open x.json: no such file or directory"},
	} {
		if got := errorLine(errors.New(tc.in)); got != tc.want {
			t.Errorf("errorLine(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
