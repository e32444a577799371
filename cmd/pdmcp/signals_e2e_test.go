package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/internal/testutil"
)

// auditEvents reads the audit file at path: each line's event and, for a
// tool line, its tool (for a shutdown line, its reason).
func auditEvents(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("%s: a line is not JSON: %v", path, err)
		}
		ev, _ := m["event"].(string)
		switch ev {
		case "tool":
			ev += ":" + m["tool"].(string)
		case "shutdown":
			ev += ":" + m["reason"].(string)
		}
		out = append(out, ev)
	}
	return out
}

// Why 5: logrotate renames the audit file and sends SIGHUP. The server
// keeps serving, the calls after the hang-up go to a new file at the
// path, and SIGTERM still revokes the session and writes the shutdown line
// (to the new file).
func TestSIGHUPReopensTheAuditFileAndKeepsServing(t *testing.T) {
	s := newStack(t)
	cmd := s.serveCmd(t)
	cmd.Stderr = &testLog{t: t}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "rotating-host", Version: "1"}, nil).
		Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	if m, isErr := call(t, cs, "list_approved_documents", nil); isErr {
		t.Fatal(m)
	}
	rotated := s.audit + ".1"
	if err := os.Rename(s.audit, rotated); err != nil {
		t.Fatal(err)
	}
	for range 2 { // twice: the first rotation does not use up the handler
		if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		testutil.WaitFor(t, "the new audit file", func() bool { _, err := os.Stat(s.audit); return err == nil })
	}
	if m, isErr := call(t, cs, "read_protected_document", map[string]any{"documentId": "evaluation-criteria"}); isErr {
		t.Fatalf("after SIGHUP: %v", m)
	}
	revokes := s.env.Gateway.Count(api.RouteRevoke)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the session's revoke", func() bool { return s.env.Gateway.Count(api.RouteRevoke) == revokes+1 })
	testutil.WaitFor(t, "the shutdown line", func() bool {
		ev := auditEvents(t, s.audit)
		return len(ev) > 0 && ev[len(ev)-1] == "shutdown:signal"
	})
	old := strings.Join(auditEvents(t, rotated), " ")
	if !strings.Contains(old, "tool:list_approved_documents") || strings.Contains(old, "read_protected_document") ||
		strings.Contains(old, "shutdown") {
		t.Fatalf("the renamed file holds %q; want the calls before the hang-up only", old)
	}
	if cur := strings.Join(auditEvents(t, s.audit), " "); cur != "tool:read_protected_document shutdown:signal" {
		t.Fatalf("the new file holds %q; want the call after the hang-up and the shutdown", cur)
	}
	// The hash chain goes on from the renamed file into the new one.
	if out, stderr, code := auditVerify(t, rotated, s.audit); code != 0 || strings.Contains(out, "NOTE") {
		t.Fatalf("pdmcp audit verify of the renamed and the new file: status %d\n%s%s", code, out, stderr)
	}
	if out, _, code := auditVerify(t, s.audit, rotated); code != 3 {
		t.Fatalf("the two files out of order: status %d, want 3\n%s", code, out)
	}
}
