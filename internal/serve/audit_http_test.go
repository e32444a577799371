package serve_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/pdmcp/pdmcp/internal/mcptest"
)

// TestHTTPListLineNamesThePooledSession: over HTTP, a list after a read
// names the caller's pooled Gateway session, as the read does.
func TestHTTPListLineNamesThePooledSession(t *testing.T) {
	hs := newHTTPStack(t, 8)
	alice := hs.connect(t, hs.token(t, "alice", "pw-a"))
	if m, isErr := mcptest.Call(t, alice, "read_protected_document", map[string]any{"documentId": "proposal-aurora"}); isErr {
		t.Fatal(m)
	}
	if m, isErr := mcptest.Call(t, alice, "list_approved_documents", map[string]any{}); isErr {
		t.Fatal(m)
	}
	hs.stop()
	b, err := os.ReadFile(hs.audit)
	if err != nil {
		t.Fatal(err)
	}
	byTool := map[string]map[string]any{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m map[string]any
		_ = json.Unmarshal([]byte(l), &m)
		if m["event"] == "tool" {
			byTool[m["tool"].(string)] = m
		}
	}
	read, list := byTool["read_protected_document"], byTool["list_approved_documents"]
	if read == nil || list == nil {
		t.Fatalf("audit lacks the read or the list:\n%s", b)
	}
	for _, k := range []string{"actingAs", "jkt", "handleDigest"} {
		if s, _ := read[k].(string); s == "" || list[k] != read[k] {
			t.Errorf("%s: read %v, list %v", k, read[k], list[k])
		}
	}
}
