package server_test

import (
	"strings"
	"testing"

	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/mcptest"
	"github.com/pdmcp/pdmcp/server/refusal"
)

// toolLines reads the audit file's tool lines, in order.
func (f *fixture) toolLines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, m := range mcptest.AuditLines(t, f.auditLog) {
		if m["event"] == "tool" {
			out = append(out, m)
		}
	}
	return out
}

// TestAuditLinesNameTheSession: once the caller holds a session, a list
// and an adapter refusal (which send nothing) name it as a read does; a
// save line names the version it wrote, and its replay the same version.
func TestAuditLinesNameTheSession(t *testing.T) {
	f := newFixture(t, basicDocs, nil)
	if m, isErr := f.call(t, grant.ToolListApprovedDocuments, map[string]any{}); isErr {
		t.Fatal(m)
	}
	if m, isErr := f.call(t, grant.ToolReadProtectedDocument, map[string]any{"documentId": "notes"}); isErr {
		t.Fatal(m)
	}
	f.call(t, grant.ToolListApprovedDocuments, map[string]any{})
	f.call(t, grant.ToolReadProtectedDocument, map[string]any{"documentId": "other"})
	f.call(t, "no_such_tool", map[string]any{})
	save := map[string]any{"destinationId": "summary", "text": "a summary", "idempotencyKey": "k1"}
	f.call(t, grant.ToolSaveProtectedResult, save)
	f.call(t, grant.ToolSaveProtectedResult, save)

	lines := f.toolLines(t)
	if len(lines) != 7 {
		t.Fatalf("%d tool lines, want 7", len(lines))
	}
	first, read := lines[0], lines[1]
	if first["actingAs"] != nil || first["jkt"] != nil {
		t.Errorf("a list before any session names one: %v", first)
	}
	for _, k := range []string{"actingAs", "jkt", "handleDigest"} {
		if s, _ := read[k].(string); s == "" {
			t.Fatalf("the read line has no %s: %v", k, read)
		}
	}
	for i, want := range []struct{ tool, code string }{
		{grant.ToolListApprovedDocuments, ""},
		{grant.ToolReadProtectedDocument, string(refusal.DocumentNotInGrant)},
		{"unknown", string(refusal.ToolNotInGrant)},
	} {
		l := lines[2+i]
		if want.tool != "unknown" && l["tool"] != want.tool {
			t.Errorf("line %d is %v, want %s", 2+i, l["tool"], want.tool)
		}
		if code, _ := l["code"].(string); code != want.code {
			t.Errorf("line %d code %q, want %q", 2+i, code, want.code)
		}
		for _, k := range []string{"actingAs", "jkt", "handleDigest"} {
			if l[k] != read[k] {
				t.Errorf("line %d (%v) %s = %v, want the session's %v", 2+i, l["tool"], k, l[k], read[k])
			}
		}
	}
	for i, l := range lines[5:] {
		if l["tool"] != grant.ToolSaveProtectedResult || l["version"] != float64(1) {
			t.Errorf("save line %d: %v, want version 1", i, l)
		}
	}
}

// TestRefusedToolNameNeverLogged: when the audit line cannot be written,
// the log names the tool only if this build knows it; a made-up name is
// the model's text and stays out.
func TestRefusedToolNameNeverLogged(t *testing.T) {
	f := newFixture(t, basicDocs, nil)
	f.audit.Close()
	f.call(t, "exfiltrate\nSECRET-IN-NAME", map[string]any{})
	f.call(t, grant.ToolListApprovedDocuments, map[string]any{})
	logs := f.logs.String()
	if strings.Contains(logs, "SECRET-IN-NAME") {
		t.Fatalf("a refused tool name reached the log:\n%s", logs)
	}
	if !strings.Contains(logs, "audit write failed") || !strings.Contains(logs, "tool=unknown") ||
		!strings.Contains(logs, "tool=list_approved_documents") {
		t.Fatalf("the audit failures are not logged with a safe tool name:\n%s", logs)
	}
}
