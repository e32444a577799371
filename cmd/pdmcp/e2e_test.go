package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/reference"
	"github.com/pdmcp/pdmcp/gateway/reference/reftest"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/mcptest"
	"github.com/pdmcp/pdmcp/internal/testutil"
)

// buildOnce builds the pdmcp binary once for every end-to-end test.
var buildOnce = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "pdmcp-e2e-bin")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "pdmcp")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		return "", &buildError{out: string(out), err: err}
	}
	return bin, nil
})

type buildError struct {
	out string
	err error
}

func (e *buildError) Error() string { return e.err.Error() + ": " + e.out }

func binary(t testing.TB) string {
	t.Helper()
	bin, err := buildOnce()
	if err != nil {
		t.Fatalf("build pdmcp: %v", err)
	}
	return bin
}

// cleanEnv is what a host would pass through pdmcp clean-env: no model
// credentials, whatever the test runner's environment holds.
func cleanEnv() []string {
	return []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "TMPDIR=" + os.TempDir()}
}

// pdmcpCmd is pdmcp with args, run as a host or an operator would: in the
// clean environment.
func pdmcpCmd(t testing.TB, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(binary(t), args...)
	cmd.Env = cleanEnv()
	return cmd
}

// serveCmd is `pdmcp serve` on the stack's config, manifest, grant and
// audit file.
func (s *stack) serveCmd(t testing.TB) *exec.Cmd {
	t.Helper()
	return pdmcpCmd(t, "serve", "--config", s.config, "--manifest", s.manifest, "--grant", s.grant, "--audit", s.audit)
}

// run runs pdmcp with args and returns its stdout; it fails the test on a
// non-zero exit.
func run(t testing.TB, args ...string) string {
	t.Helper()
	cmd := pdmcpCmd(t, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pdmcp %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}

// stack is a reference Gateway with a registered service, the seed's data
// set and a grant, all made by the pdmcp binary as an operator would.
type stack struct {
	env      *reftest.Env
	dir      string
	config   string
	manifest string
	grant    string
	audit    string
}

// newStack starts a reference Gateway in this process and makes the stack
// on it, with a grant of grantArgs (default: all approved documents, 15
// minutes).
func newStack(t testing.TB, grantArgs ...string) *stack {
	t.Helper()
	env := reftest.Start(t, reference.Config{})
	s := seededStack(t, env.URL, env.CAFile, reftest.AdminUser, env.AdminPasswordFile)
	s.env = env
	args := append([]string{"grant", "--manifest", s.manifest, "--out", s.grant}, grantArgs...)
	if len(grantArgs) == 0 {
		args = append(args, "--all-approved", "--ttl", "15m")
	}
	run(t, args...)
	return s
}

// seededStack bootstraps a service against the Gateway at url (trusting
// ca, signing in as admin with the password in pwFile) and seeds the data
// set into a fresh folder, with the pdmcp binary as an operator would. No
// grant is written yet: s.grant names where it goes.
func seededStack(t testing.TB, url, ca, admin, pwFile string) *stack {
	t.Helper()
	s := &stack{dir: t.TempDir()}
	s.config = filepath.Join(s.dir, "config.json")
	out := run(t, "bootstrap", "--endpoint", url, "--trust-file", ca, "--admin-user", admin,
		"--admin-password-file", pwFile, "--out", s.config)
	if !strings.HasSuffix(strings.TrimSpace(out), "BOOTSTRAP: OK") {
		t.Fatalf("bootstrap did not end BOOTSTRAP: OK:\n%s", out)
	}
	data := filepath.Join(s.dir, "task-data")
	out = run(t, "seed", "--config", s.config, "--out", data)
	if !strings.Contains(out, "SEED: OK") {
		t.Fatalf("seed: %s", out)
	}
	s.manifest = filepath.Join(data, "manifest.json")
	s.grant = filepath.Join(data, "grant.json")
	s.audit = filepath.Join(data, "audit.jsonl")
	return s
}

// callDies starts a server that dies at the crash point and calls tool on
// it: the call must fail, the server gone.
func (s *stack) callDies(t *testing.T, point, tool string, args map[string]any) {
	t.Helper()
	doomed := s.connect(t, crashEnv+"="+point)
	if _, err := doomed.CallTool(context.Background(), mcpCall(tool, args)); err == nil {
		t.Fatalf("the server answered instead of dying at %s", point)
	}
}

// retryAfterKill kills the server at point in a call of tool, then makes
// the same call twice on a fresh server: the first is the retry, the second
// must replay it. It returns that server's session and both answers,
// having checked that neither is an error and that the Gateway encrypted
// once in all (the kill is before or after the one encrypt, never both).
func (s *stack) retryAfterKill(t *testing.T, point, tool string, args map[string]any) (cs *mcp.ClientSession, first, again map[string]any) {
	t.Helper()
	encrypts := s.env.Gateway.Count(api.RouteEncrypt)
	s.callDies(t, point, tool, args)
	cs = s.connect(t)
	first, isErr := call(t, cs, tool, args)
	if isErr {
		t.Fatalf("retry after the kill: %v", first)
	}
	again, isErr = call(t, cs, tool, args)
	if isErr || again["replayed"] != true {
		t.Fatalf("second retry %v, first %v", again, first)
	}
	if n := s.env.Gateway.Count(api.RouteEncrypt) - encrypts; n != 1 {
		t.Errorf("Gateway encrypts: %d, want 1", n)
	}
	return cs, first, again
}

// connect starts `pdmcp serve` as a host would and connects the go-sdk
// client to it over stdio.
func (s *stack) connect(t testing.TB, extraEnv ...string) *mcp.ClientSession {
	t.Helper()
	cmd := s.serveCmd(t)
	cmd.Env = append(cmd.Env, extraEnv...)
	cmd.Stderr = &testLog{t: t}
	c := mcp.NewClient(&mcp.Implementation{Name: "e2e-host", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to pdmcp serve: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

type testLog struct {
	t  testing.TB
	mu sync.Mutex
}

func (l *testLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.t.Logf("serve: %s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// call calls a tool and returns its result as a map (mcptest.Result).
func call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (map[string]any, bool) {
	t.Helper()
	return mcptest.Call(t, cs, name, args)
}

// wantRefused asserts a refusal's layer and code.
func wantRefused(t *testing.T, m map[string]any, isError bool, layer, code string) {
	t.Helper()
	if !isError || m["refused"] != true || m["layer"] != layer || m["code"] != code {
		t.Fatalf("got isError=%v %v, want %s %s", isError, m, layer, code)
	}
	if d, _ := m["detail"].(string); d == "" {
		t.Errorf("refusal %s has no detail", code)
	}
}

// quiet asserts that fn sends nothing to the Gateway.
func (s *stack) quiet(t *testing.T, what string, fn func()) {
	t.Helper()
	before := s.env.Gateway.Counts()
	fn()
	if after := s.env.Gateway.Counts(); !maps.Equal(before, after) {
		t.Errorf("%s reached the Gateway: before %v, after %v", what, before, after)
	}
}

func seedText(t *testing.T, id string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "internal", "operator", "seeddata", id+".txt"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestStdioEndToEnd(t *testing.T) {
	s := newStack(t)
	cs := s.connect(t)

	names := mcptest.ToolNames(t, cs)
	if want := []string{"list_approved_documents", "read_protected_document", "save_protected_result"}; !slices.Equal(names, want) {
		t.Fatalf("tools/list = %v, want %v", names, want)
	}

	list, isErr := call(t, cs, "list_approved_documents", map[string]any{})
	if isErr {
		t.Fatalf("list refused: %v", list)
	}
	docs := list["documents"].([]any)
	var ids []string
	for _, d := range docs {
		ids = append(ids, d.(map[string]any)["documentId"].(string))
	}
	if len(ids) != 5 || slices.Contains(ids, "proposal-equinox") {
		t.Fatalf("listed %v: want the four approved proposals and the criteria", ids)
	}

	read, isErr := call(t, cs, "read_protected_document", map[string]any{"documentId": "proposal-aurora"})
	if isErr {
		t.Fatalf("read refused: %v", read)
	}
	want := seedText(t, "proposal-aurora")
	sum := sha256.Sum256(want)
	prov := read["provenance"].(map[string]any)
	if read["text"] != string(want) || prov["sha256"] != hex.EncodeToString(sum[:]) || read["untrusted"] != true {
		t.Fatalf("read returned %v", read)
	}

	s.quiet(t, "adapter refusals", func() {
		m, e := call(t, cs, "read_protected_document", map[string]any{"documentId": "proposal-equinox"})
		wantRefused(t, m, e, "adapter", "DOCUMENT_NOT_IN_GRANT")
		m, e = call(t, cs, "read_protected_document", map[string]any{"documentId": "proposal-aurora", "ttag": "x"})
		wantRefused(t, m, e, "adapter", "UNEXPECTED_ARGUMENT")
		m, e = call(t, cs, "save_protected_result", map[string]any{"destinationId": "elsewhere", "text": "t", "idempotencyKey": "k"})
		wantRefused(t, m, e, "adapter", "DESTINATION_NOT_IN_GRANT")
		m, e = call(t, cs, "save_protected_result", map[string]any{"destinationId": "evaluation-summary",
			"text": strings.Repeat("x", 64*1024+1), "idempotencyKey": "big"})
		wantRefused(t, m, e, "adapter", "RESULT_TOO_LARGE")
		m, e = call(t, cs, "encrypt_file", map[string]any{"path": "a.txt"})
		wantRefused(t, m, e, "adapter", "TOOL_NOT_IN_GRANT")
	})

	before := s.env.Gateway.Count(api.RouteEncrypt)
	first, isErr := call(t, cs, "save_protected_result", map[string]any{"destinationId": "evaluation-summary",
		"text": "Aurora scores best on delivery.", "idempotencyKey": "summary-1"})
	if isErr || first["version"] != float64(1) || first["replayed"] != false {
		t.Fatalf("save: %v", first)
	}
	again, isErr := call(t, cs, "save_protected_result", map[string]any{"destinationId": "evaluation-summary",
		"text": "Aurora scores best on delivery.", "idempotencyKey": "summary-1"})
	if isErr || again["version"] != first["version"] || again["savedAt"] != first["savedAt"] || again["replayed"] != true {
		t.Fatalf("retry returned %v, first was %v", again, first)
	}
	if n := s.env.Gateway.Count(api.RouteEncrypt) - before; n != 1 {
		t.Errorf("Gateway encrypts for a save and its retry: %d, want 1", n)
	}
	s.quiet(t, "an idempotency conflict", func() {
		m, e := call(t, cs, "save_protected_result", map[string]any{"destinationId": "evaluation-summary",
			"text": "Different text.", "idempotencyKey": "summary-1"})
		wantRefused(t, m, e, "adapter", "IDEMPOTENCY_CONFLICT")
	})
	files, _ := filepath.Glob(filepath.Join(filepath.Dir(s.manifest), "results", "*"))
	if len(files) != 2 || !strings.HasSuffix(files[0], "evaluation-summary.v1.bin") || !strings.HasSuffix(files[1], "evaluation-summary.v1.json") {
		t.Errorf("result files %v, want exactly one and its sidecar", files)
	}
	if v := resultVersions(t, s, "evaluation-summary"); !slices.Equal(v, []int{1}) {
		t.Errorf("recorded versions %v, want [1]", v)
	}
	checkSidecars(t, s)

	_ = cs.Close()
	checkAudit(t, s.audit, string(want))
}

// checkAudit reads the audit file: mode 0600, one JSON object a line, a
// client line, tool lines; never the document text; its chain whole.
func checkAudit(t *testing.T, path, secretText string) {
	t.Helper()
	testutil.WantMode(t, path, 0o600)
	b, _ := os.ReadFile(path)
	if strings.Contains(string(b), secretText[:40]) {
		t.Error("the audit file holds document text")
	}
	var sawClient, sawRead, sawStart, sawStop bool
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("audit line is not JSON: %q", line)
		}
		switch {
		case m["event"] == "startup" && m["transport"] == "stdio":
			sawStart = true
		case m["event"] == "shutdown" && m["reason"] == "stdin-closed":
			sawStop = true
		case m["event"] == "client" && m["name"] == "e2e-host":
			sawClient = true
		case m["tool"] == "read_protected_document" && m["outcome"] == "ok":
			sawRead = true
			if h, _ := m["handleDigest"].(string); len(h) != 12 {
				t.Errorf("read line without a handle digest: %v", m)
			}
			if reqs, _ := m["gatewayRequests"].([]any); len(reqs) == 0 {
				t.Errorf("read line lists no Gateway request: %v", m)
			}
			if k, _ := m["keyLink"].(string); len(k) != 12 {
				t.Errorf("read line without the key link digest: %v", m)
			}
		}
	}
	if !sawClient || !sawRead || !sawStart || !sawStop {
		t.Errorf("audit lines: client %v, read %v, startup %v, shutdown %v:\n%s", sawClient, sawRead, sawStart, sawStop, b)
	}
	if out, stderr, code := auditVerify(t, path); code != 0 {
		t.Errorf("pdmcp audit verify: status %d\n%s%s", code, out, stderr)
	}
}

// TestStdioKeyServerRefusesUserWithoutAccess: the key server decides every
// read. A grant acting as a principal with no access-list entry passes
// every adapter check, and the key server refuses it.
func TestStdioKeyServerRefusesUserWithoutAccess(t *testing.T) {
	s := newStack(t)
	sc, err := gateway.LoadServiceConfig(s.config)
	if err != nil {
		t.Fatal(err)
	}
	stranger := reftest.Principal(t, s.env.ServiceClient(t, sc), sc.Prefix+"stranger")
	g, err := grant.Load(s.grant)
	if err != nil {
		t.Fatal(err)
	}
	g.LocalUser = stranger.Name
	if err := g.Save(s.grant); err != nil {
		t.Fatal(err)
	}
	cs := s.connect(t)
	decrypts := s.env.Gateway.Count(api.RouteDecrypt)
	m, e := call(t, cs, "read_protected_document", map[string]any{"documentId": "evaluation-criteria"})
	wantRefused(t, m, e, "keyserver", "ACL_DENIED")
	if m["status"] != float64(403) {
		t.Errorf("status %v", m["status"])
	}
	if s.env.Gateway.Count(api.RouteDecrypt) != decrypts+1 {
		t.Error("the refusal did not come from a decrypt at the Gateway")
	}
}

// TestServeRefusesUnapprovedDocument: a grant naming a document the
// manifest does not approve (written past the launcher) is refused at
// start, naming the document.
func TestServeRefusesUnapprovedDocument(t *testing.T) {
	s := newStack(t)
	g, err := grant.Load(s.grant)
	if err != nil {
		t.Fatal(err)
	}
	g.Documents = append(g.Documents, "proposal-equinox")
	if err := g.Save(s.grant); err != nil {
		t.Fatal(err)
	}
	out, err := s.serveCmd(t).CombinedOutput()
	if err == nil {
		t.Fatal("serve started with a grant naming an unapproved document")
	}
	if !strings.Contains(string(out), `"proposal-equinox"`) || !strings.Contains(string(out), "not approved") {
		t.Fatalf("the refusal must name the document and say why: %s", out)
	}
}

func TestStdioGrantExpiry(t *testing.T) {
	s := newStack(t, "--all-approved", "--ttl", "3s")
	cs := s.connect(t)
	if m, e := call(t, cs, "read_protected_document", map[string]any{"documentId": "evaluation-criteria"}); e {
		t.Fatalf("read before expiry: %v", m)
	}
	g, _ := grant.Load(s.grant)
	time.Sleep(time.Until(g.NotAfter) + 100*time.Millisecond)
	revokes := s.env.Gateway.Count(api.RouteRevoke)
	decrypts := s.env.Gateway.Count(api.RouteDecrypt)
	m, e := call(t, cs, "read_protected_document", map[string]any{"documentId": "evaluation-criteria"})
	wantRefused(t, m, e, "adapter", "GRANT_EXPIRED")
	if s.env.Gateway.Count(api.RouteDecrypt) != decrypts {
		t.Error("a call after expiry reached the crypto routes")
	}
	if s.env.Gateway.Count(api.RouteRevoke) != revokes+1 {
		t.Error("the first call after expiry did not revoke the session")
	}
}

func TestServeRefusesModelCredential(t *testing.T) {
	s := newStack(t)
	cmd := s.serveCmd(t)
	cmd.Env = append(cmd.Env, "ANTHROPIC_API_KEY=sk-ant-do-not-print")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatal("serve started with a model credential in its environment")
	}
	if !strings.Contains(string(out), "ANTHROPIC_API_KEY") || strings.Contains(string(out), "do-not-print") {
		t.Fatalf("refusal must name the variable and not its value: %s", out)
	}
}

// TestSaveSurvivesKillAtEachStep kills the server (SIGKILL, through the
// test hook) at each step between the journal reservation and the removal
// of the temporary file, then retries the same save on a fresh server: one
// receipt, one result file and no temporary one, one Gateway encrypt, and
// one version in the record naming that file.
func TestSaveSurvivesKillAtEachStep(t *testing.T) {
	for _, point := range savePoints {
		t.Run(point, func(t *testing.T) {
			s := newStack(t)
			args := map[string]any{"destinationId": "evaluation-summary", "text": "Cirrus: best quality.", "idempotencyKey": "crash-1"}
			// A save places again only past a stray file: one is at v1.
			want, files := 1, 1
			if point == "save:placed" {
				putStray(t, s, "results/evaluation-summary.v1.bin")
				want, files = 2, 2
			}
			_, first, again := s.retryAfterKill(t, point, "save_protected_result", args)
			if first["version"] != float64(want) || again["savedAt"] != first["savedAt"] {
				t.Fatalf("retry %v, second retry %v; want version %d, saved once", first, again, want)
			}
			if got, _ := filepath.Glob(filepath.Join(filepath.Dir(s.manifest), "results", "*.bin")); len(got) != files {
				t.Errorf("result files %v, want %d", got, files)
			}
			checkSidecars(t, s)
			if v := resultVersions(t, s, "evaluation-summary"); !slices.Equal(v, []int{want}) {
				t.Fatalf("recorded versions %v, want [%d]", v, want)
			}
			if m, err := grant.LoadManifest(s.manifest); err != nil || len(m.Destinations["evaluation-summary"].Versions) != 0 {
				t.Fatalf("the server wrote manifest.json: %v", err)
			}
		})
	}
}

// TestHostConfigStartsTheServer runs the launch that host-config writes as
// a host would, with a model credential in the host's environment: the
// clean-env launch must drop it, and the server must answer.
func TestHostConfigStartsTheServer(t *testing.T) {
	s := newStack(t)
	out := run(t, "host-config", "--config", s.config, "--manifest", s.manifest, "--grant", s.grant, "--audit", s.audit)
	var doc struct {
		MCPServers map[string]struct {
			Command string   `json:"command"`
			Args    []string `json:"args"`
		} `json:"mcpServers"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("host-config output is not JSON: %v\n%s", err, out)
	}
	srv, ok := doc.MCPServers["protected-documents"]
	if !ok || !filepath.IsAbs(srv.Command) {
		t.Fatalf("host-config: %s", out)
	}
	cmd := exec.Command(srv.Command, srv.Args...)
	cmd.Env = append(cleanEnv(), "ANTHROPIC_API_KEY=sk-ant-host-key", "OPENAI_API_KEY=sk-host-key")
	cmd.Stderr = &testLog{t: t}
	c := mcp.NewClient(&mcp.Implementation{Name: "by-hand", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("the host-config launch did not start the server: %v", err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil || len(tools.Tools) != 3 {
		t.Fatalf("tools/list through the host-config launch: %v", err)
	}

	tomlText := run(t, "host-config", "--format", "codex-toml", "--config", s.config, "--manifest", s.manifest,
		"--grant", s.grant, "--audit", s.audit)
	var codex map[string]map[string]map[string]any
	if _, err := toml.Decode(tomlText, &codex); err != nil {
		t.Fatalf("codex TOML does not parse: %v\n%s", err, tomlText)
	}
	entry := codex["mcp_servers"]["protected-documents"]
	if entry["command"] != srv.Command || entry["required"] != true {
		t.Errorf("codex entry %v", entry)
	}
}

// startDevGateway runs `pdmcp dev gateway` and returns its URL and CA file
// once it prints them; the process is stopped (SIGTERM) at test end.
func startDevGateway(t *testing.T, state string, extra ...string) (url, ca, pwFile string, stop func()) {
	t.Helper()
	cmd := pdmcpCmd(t, append([]string{"dev", "gateway", "--state", state}, extra...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = &testLog{t: t}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			_ = cmd.Process.Signal(os.Interrupt)
			_ = cmd.Wait()
		}
	}
	t.Cleanup(stop)
	buf := make([]byte, 4096)
	var got strings.Builder
	for !strings.Contains(got.String(), "admin password file:") || !strings.HasSuffix(got.String(), "\n") {
		n, err := stdout.Read(buf)
		if err != nil {
			t.Fatalf("dev gateway ended before printing its URL: %v (%s)", err, got.String())
		}
		got.Write(buf[:n])
	}
	for _, line := range strings.Split(got.String(), "\n") {
		k, v, _ := strings.Cut(line, ": ")
		switch k {
		case "gateway":
			url = v
		case "ca":
			ca = v
		case "admin password file":
			pwFile = v
		}
	}
	return url, ca, pwFile, stop
}

// TestDevGatewayStandalone runs the reference Gateway as its own process,
// bootstraps and seeds against it, restarts it on the same state (and the
// same port: issue 33 scenario 4), and reads a seeded document through a
// new session with the config bootstrap wrote.
func TestDevGatewayStandalone(t *testing.T) {
	state := t.TempDir()
	url, ca, pw, stop := startDevGateway(t, state)
	s := seededStack(t, url, ca, "admin", pw)
	stop()

	// The restarted Gateway keeps its port, so the config bootstrap wrote
	// still reaches it.
	if url2, _, _, _ := startDevGateway(t, state); url2 != url {
		t.Fatalf("the restarted Gateway serves %s, not %s", url2, url)
	}
	run(t, "grant", "--manifest", s.manifest, "--all-approved", "--out", s.grant)
	cs := s.connect(t)
	m, isErr := call(t, cs, "read_protected_document", map[string]any{"documentId": "evaluation-criteria"})
	if isErr || !strings.HasPrefix(m["text"].(string), "Evaluation criteria") {
		t.Fatalf("read after the Gateway restarted: %v", m)
	}
	out := run(t, "seed", "--config", s.config, "--cleanup", "--seed-record", s.record())
	if !strings.Contains(out, "SEED CLEANUP: OK") {
		t.Fatalf("cleanup: %s", out)
	}
	m, isErr = call(t, cs, "read_protected_document", map[string]any{"documentId": "evaluation-criteria"})
	if !isErr || m["layer"] != "keyserver" || m["code"] != "KEY_NOT_FOUND" {
		t.Fatalf("read after cleanup removed the key: %v", m)
	}
}

func TestSessionRevokedWhenTheHostLeaves(t *testing.T) {
	for _, how := range []string{"stdin closed", "SIGTERM", "SIGINT"} {
		t.Run(how, func(t *testing.T) {
			s := newStack(t)
			cmd := s.serveCmd(t)
			cmd.Stderr = &testLog{t: t}
			c := mcp.NewClient(&mcp.Implementation{Name: "leaving-host", Version: "1"}, nil)
			cs, err := c.Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if m, isErr := call(t, cs, "read_protected_document", map[string]any{"documentId": "evaluation-criteria"}); isErr {
				t.Fatal(m)
			}
			revokes := s.env.Gateway.Count(api.RouteRevoke)
			switch how {
			case "stdin closed":
				_ = cs.Close()
			case "SIGTERM":
				_ = cmd.Process.Signal(syscall.SIGTERM)
			case "SIGINT":
				_ = cmd.Process.Signal(syscall.SIGINT)
			}
			testutil.WaitFor(t, "the session's revoke", func() bool { return s.env.Gateway.Count(api.RouteRevoke) == revokes+1 })
			_ = cs.Close()
		})
	}
}

func TestCleanEnvPassesOnlyWhatItKeeps(t *testing.T) {
	cmd := pdmcpCmd(t, "clean-env", "--keep", "KEEP_ME", "--", "env")
	cmd.Env = append(cmd.Env, "KEEP_ME=1", "ANTHROPIC_API_KEY=sk-x", "OTHER=2")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		k, _, _ := strings.Cut(line, "=")
		names = append(names, k)
	}
	slices.Sort(names)
	if want := []string{"HOME", "KEEP_ME", "PATH", "TMPDIR"}; !slices.Equal(names, want) {
		t.Fatalf("environment after clean-env: %v, want %v", names, want)
	}
}
