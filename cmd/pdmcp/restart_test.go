package main

import (
	"encoding/json"
	"net/url"
	"os"
	"strings"
	"testing"
)

// TestStdioSurvivesGatewayProcessRestart runs the reference Gateway as its
// own process, serves a task over stdio from another, and restarts the
// Gateway process on the same state and port between two reads. The
// restarted Gateway knows neither the service's session nor the task's;
// the running server signs in again, mints a new session and answers the
// read and the save as if nothing happened, and its audit says so.
func TestStdioSurvivesGatewayProcessRestart(t *testing.T) {
	state := t.TempDir()
	gwURL, ca, pw, stop := startDevGateway(t, state)
	s := seededStack(t, gwURL, ca, "admin", pw)
	run(t, "grant", "--manifest", s.manifest, "--all-approved", "--ttl", "15m", "--out", s.grant)
	cs := s.connect(t)
	read := map[string]any{"documentId": "evaluation-criteria"}
	if m, isErr := call(t, cs, "read_protected_document", read); isErr {
		t.Fatalf("read before the restart: %v", m)
	}

	stop()
	u, err := url.Parse(gwURL)
	if err != nil {
		t.Fatal(err)
	}
	again, _, _, _ := startDevGateway(t, state, "--port", u.Port())
	if again != gwURL {
		t.Fatalf("the Gateway came back at %s, not %s", again, gwURL)
	}

	m, isErr := call(t, cs, "read_protected_document", read)
	if isErr || !strings.HasPrefix(m["text"].(string), "Evaluation criteria") {
		t.Fatalf("read after the Gateway process restarted: %v", m)
	}
	line := lastToolLine(t, s.audit)
	if line["sessionReplaced"] != true || line["serviceRelogin"] != true {
		t.Fatalf("audit line after the restart: %v; want sessionReplaced and serviceRelogin", line)
	}
	reqs, _ := line["gatewayRequests"].([]any)
	if len(reqs) == 0 || reqs[0].(map[string]any)["code"] != "SESSION_MISSING" {
		t.Fatalf("first Gateway request after the restart: %v; want the old session refused SESSION_MISSING", reqs)
	}
	m, isErr = call(t, cs, "save_protected_result", map[string]any{"destinationId": "evaluation-summary",
		"text": "after the restart", "idempotencyKey": "restart-1"})
	if isErr {
		t.Fatalf("save after the restart: %v", m)
	}
	if line := lastToolLine(t, s.audit); line["sessionReplaced"] == true {
		t.Fatalf("the save replaced the session again: %v", line)
	}
}

// lastToolLine is the audit file's last tool-call line.
func lastToolLine(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		var m map[string]any
		if err := json.Unmarshal([]byte(lines[i]), &m); err != nil {
			t.Fatalf("audit line %q: %v", lines[i], err)
		}
		if m["event"] == "tool" {
			return m
		}
	}
	t.Fatal("no tool line in the audit")
	return nil
}
