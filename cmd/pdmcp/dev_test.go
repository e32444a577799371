package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/testutil"
)

// devRun is a running `pdmcp dev`.
type devRun struct {
	cmd   *exec.Cmd
	state string
	info  map[string]any
	out   *testutil.LogBuffer // what it printed
	// printed is the object dev --json printed.
	printed map[string]any
}

func startDev(t *testing.T, state string, args ...string) *devRun {
	t.Helper()
	_ = os.Remove(filepath.Join(state, "dev.json"))
	cmd := pdmcpCmd(t, append([]string{"dev", "--state", state}, args...)...)
	cmd.Stderr = &testLog{t: t}
	out := &testutil.LogBuffer{}
	cmd.Stdout = out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &devRun{cmd: cmd, state: state, out: out}
	t.Cleanup(func() { d.stop(t) })
	testutil.WaitFor(t, "dev.json", func() bool {
		b, err := os.ReadFile(filepath.Join(state, "dev.json"))
		return err == nil && json.Unmarshal(b, &d.info) == nil
	})
	if slices.Contains(args, "--json") {
		testutil.WaitFor(t, "the printed JSON", func() bool { return json.Unmarshal([]byte(out.String()), &d.printed) == nil })
		return d
	}
	testutil.WaitFor(t, "the printed instructions", func() bool { return strings.Contains(out.String(), "claude mcp add --transport http") })
	return d
}

func (d *devRun) stop(t *testing.T) {
	if d.cmd.ProcessState != nil {
		return
	}
	_ = d.cmd.Process.Signal(os.Interrupt)
	done := make(chan error, 1)
	go func() { done <- d.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("pdmcp dev did not stop cleanly on Ctrl-C: %v", err)
		}
	case <-time.After(30 * time.Second):
		_ = d.cmd.Process.Kill()
		t.Error("pdmcp dev did not stop on Ctrl-C")
	}
}

// curl runs the real curl and returns headers and body.
func curl(t *testing.T, args ...string) (headers, body string) {
	t.Helper()
	dir := t.TempDir()
	hfile := filepath.Join(dir, "headers")
	out, err := exec.Command("curl", append([]string{"-sS", "-D", hfile}, args...)...).Output()
	if err != nil {
		// The arguments hold a token: name only the URL.
		t.Fatalf("curl %s: %v", args[len(args)-1], err)
	}
	h, _ := os.ReadFile(hfile)
	return string(h), string(out)
}

func header(headers, name string) string {
	for _, line := range strings.Split(headers, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && strings.EqualFold(k, name) {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// TestDevWithCurl runs `pdmcp dev` on a fresh state folder and drives it
// as the README says: a token from `pdmcp dev token`, then curl.
func TestDevWithCurl(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	d := startDev(t, state)
	url := d.info["mcpUrl"].(string)
	ca := d.info["caFile"].(string)

	h, _ := curl(t, "--cacert", ca, "-H", "Content-Type: application/json", "-d", `{}`, url)
	challenge := header(h, "WWW-Authenticate")
	if !strings.HasPrefix(h, "HTTP/2 401") && !strings.HasPrefix(h, "HTTP/1.1 401") || !strings.Contains(challenge, "resource_metadata=") {
		t.Fatalf("no token: %s", h)
	}
	_, meta := curl(t, "--cacert", ca, strings.TrimSuffix(url, "/mcp")+"/.well-known/oauth-protected-resource/mcp")
	var md map[string]any
	if err := json.Unmarshal([]byte(meta), &md); err != nil {
		t.Fatal(err)
	}
	if md["resource"] != url || md["authorization_servers"].([]any)[0] != d.info["issuer"] {
		t.Fatalf("metadata %v", md)
	}

	token := strings.TrimSpace(run(t, "dev", "token", "alice", "--state", state))
	base := []string{"--cacert", ca, "-H", "Authorization: Bearer " + token, "-H", "Content-Type: application/json",
		"-H", "Accept: application/json, text/event-stream"}
	h, _ = curl(t, append(base, "-d", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}`, url)...)
	sid := header(h, "Mcp-Session-Id")
	if sid == "" {
		t.Fatalf("initialize gave no session: %s", h)
	}
	sess := append(base, "-H", "Mcp-Session-Id: "+sid, "-H", "Mcp-Protocol-Version: 2025-11-25")
	curl(t, append(sess, "-d", `{"jsonrpc":"2.0","method":"notifications/initialized"}`, url)...)
	_, body := curl(t, append(sess, "-d", `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`, url)...)
	if !strings.Contains(body, "read_protected_document") {
		t.Fatalf("tools/list: %s", body)
	}
	_, body = curl(t, append(sess, "-d", `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"read_protected_document","arguments":{"documentId":"proposal-cirrus"}}}`, url)...)
	if !strings.Contains(body, "Cirrus Precision") {
		t.Fatalf("alice's read: %s", body)
	}
	h, _ = curl(t, append(sess, "-X", "DELETE", url)...)
	if !strings.Contains(strings.SplitN(h, "\n", 2)[0], "20") {
		t.Fatalf("DELETE: %s", h)
	}

	bob := strings.TrimSpace(run(t, "dev", "token", "bob", "--state", state))
	_, body = curl(t, "--cacert", ca, "-H", "Authorization: Bearer "+bob, "-H", "Content-Type: application/json",
		"-H", "Accept: application/json, text/event-stream", "-H", "Mcp-Protocol-Version: 2025-11-25",
		"-d", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}`, url)
	if !strings.Contains(body, `"serverInfo"`) || !strings.Contains(body, `"pdmcp"`) {
		t.Fatalf("bob's initialize: %s", body)
	}

	// A second run reuses the state: same CA, same URL, same service.
	// With --json it prints where everything is as one object, as
	// dev.json has it.
	d.stop(t)
	cfgBefore, _ := os.ReadFile(filepath.Join(state, "config.json"))
	d2 := startDev(t, state, "--json")
	if d2.info["caFile"] != ca || d2.info["mcpUrl"] != url {
		t.Errorf("second run: %v, first: %s %s", d2.info, ca, url)
	}
	for _, k := range []string{"mcpUrl", "caFile", "issuer", "fileRoot", "hostClientId", "callbackPort", "serverName"} {
		if d2.printed[k] == nil || d2.printed[k] != d2.info[k] {
			t.Errorf("dev --json %s = %v, dev.json has %v", k, d2.printed[k], d2.info[k])
		}
	}
	if users, _ := d2.printed["users"].([]any); len(users) != 5 || users[0] != "alice" ||
		d2.printed["state"] != state || d2.printed["infoFile"] != filepath.Join(state, "dev.json") {
		t.Errorf("dev --json: %v", d2.printed)
	}
	cfgAfter, _ := os.ReadFile(filepath.Join(state, "config.json"))
	if string(cfgAfter) != string(cfgBefore) && !strings.Contains(string(cfgAfter), `"serviceId"`) {
		t.Error("the service registration was not reused")
	}
	token = strings.TrimSpace(run(t, "dev", "token", "alice", "--state", state))
	_, body = curl(t, "--cacert", ca, "-H", "Authorization: Bearer "+token, "-H", "Content-Type: application/json",
		"-H", "Accept: application/json, text/event-stream",
		"-d", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}`, url)
	if !strings.Contains(body, `"serverInfo"`) {
		t.Fatalf("second run initialize: %s", body)
	}

	// A task folder that lost its manifest after a task ran in it (a
	// journal, results, an audit file beside the seed record) is not a
	// stopped seed: the next run removes nothing, at the Gateway or on
	// disk, and says what to do.
	d2.stop(t)
	data := filepath.Join(state, "task-data")
	old, err := grant.LoadSeedRecord(filepath.Join(data, "seed-record.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(data, "manifest.json")); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadDir(data)
	if err != nil {
		t.Fatal(err)
	}
	refused := pdmcpCmd(t, "dev", "--state", state)
	out, err := refused.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "a task ran here and its manifest is gone; nothing was removed") {
		t.Fatalf("dev on a folder that lost its manifest: %v\n%s", err, out)
	}
	after, err := os.ReadDir(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) {
		t.Fatalf("the refused run changed the folder: %d entries, %d before", len(after), len(before))
	}
	if kept, err := grant.LoadSeedRecord(filepath.Join(data, "seed-record.json")); err != nil || !slices.Equal(kept.Keys, old.Keys) {
		t.Fatalf("the refused run changed the seed record (%v): %d keys, %d before", err, len(kept.Keys), len(old.Keys))
	}

	// A seed that stopped before its manifest (its record and the first
	// versions of some documents, nothing else) is undone from its record
	// and made again by the next run. The operator moved the task that
	// lost its manifest away and left what a stopped seed leaves.
	if err := os.Rename(data, data+".kept"); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(data, "documents"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{"seed-record.json", "documents/proposal-aurora.v1.bin"} {
		b, err := os.ReadFile(filepath.Join(data+".kept", rel))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(data, rel), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	startDev(t, state)
	fresh, err := grant.LoadSeedRecord(filepath.Join(data, "seed-record.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(fresh.Keys) != len(old.Keys) || slices.ContainsFunc(fresh.Keys, func(k string) bool { return slices.Contains(old.Keys, k) }) {
		t.Fatalf("third run: %d keys, %d before; want the same number, none of the old", len(fresh.Keys), len(old.Keys))
	}
	token = strings.TrimSpace(run(t, "dev", "token", "alice", "--state", state))
	base = []string{"--cacert", ca, "-H", "Authorization: Bearer " + token, "-H", "Content-Type: application/json",
		"-H", "Accept: application/json, text/event-stream"}
	h, _ = curl(t, append(base, "-d", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}`, url)...)
	sess = append(base, "-H", "Mcp-Session-Id: "+header(h, "Mcp-Session-Id"), "-H", "Mcp-Protocol-Version: 2025-11-25")
	curl(t, append(sess, "-d", `{"jsonrpc":"2.0","method":"notifications/initialized"}`, url)...)
	_, body = curl(t, append(sess, "-d", `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"read_protected_document","arguments":{"documentId":"proposal-cirrus"}}}`, url)...)
	if !strings.Contains(body, "Cirrus Precision") {
		t.Fatalf("alice's read after the seed was made again: %s", body)
	}
}
