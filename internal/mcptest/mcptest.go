// Package mcptest holds the helpers that the MCP-level tests of server
// (over stdio), internal/serve (over HTTP), cmd/pdmcp (the built binary)
// and the Keycloak test share: a tool call and its result read as a client
// reads it, refusals included; the tools listed; the audit file's lines;
// the Gateway's key routes an adapter refusal must not reach; what the file
// and hand-off tools leave for a test to check; and the go-sdk's own OAuth
// sign-in through a scripted login (ConnectOAuth). Only tests import it.
package mcptest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/audit"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/reference"
	"github.com/pdmcp/pdmcp/server"
)

// Call calls a tool on cs and returns its result as Result reads it, and
// whether it is an error result; a failed call fails the test.
func Call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (map[string]any, bool) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return Result(t, res), res.IsError
}

// Result is a result as a map: a success's structured content, or the
// refusal a client reads from an isError result's text content (which then
// carries no structured content, so SDK clients do not validate it against
// the tool's output schema).
func Result(t *testing.T, res *mcp.CallToolResult) map[string]any {
	t.Helper()
	v := res.StructuredContent
	if res.IsError {
		r, ok := server.RefusalOf(res)
		if !ok || res.StructuredContent != nil {
			t.Fatalf("isError result is not a content-only refusal: %+v", res)
		}
		v = r
	}
	b, _ := json.Marshal(v)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return m
}

// ToolLine is what the tests read of an audit tool line.
type ToolLine struct {
	Event           string `json:"event"`
	Tool            string `json:"tool"`
	Outcome         string `json:"outcome"`
	Code            string `json:"code"`
	HandleDigest    string `json:"handleDigest"`
	JKT             string `json:"jkt"`
	SessionReplaced bool   `json:"sessionReplaced"`
	GatewayRequests []struct {
		Route  string `json:"route"`
		Status int    `json:"status"`
		Code   string `json:"code"`
	} `json:"gatewayRequests"`
}

// ToolLines reads the tool lines of the audit file at path, in order.
func ToolLines(t *testing.T, path string) []ToolLine {
	t.Helper()
	var out []ToolLine
	for _, tl := range jsonLines[ToolLine](t, path) {
		if tl.Event == "tool" {
			out = append(out, tl)
		}
	}
	return out
}

// AuditLines reads every line of the audit file at path, in order.
func AuditLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	return jsonLines[map[string]any](t, path)
}

// jsonLines reads the file at path as one JSON value a line; a line that
// is not one fails the test, and so does a break in the file's hash chain.
func jsonLines[T any](t *testing.T, path string) []T {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := audit.Verify(context.Background(), []string{path}, audit.VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Whole {
		t.Errorf("the audit file's chain breaks: %+v", rep.Breaks[0])
	}
	var out []T
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var v T
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatalf("audit line %q: %v", l, err)
		}
		out = append(out, v)
	}
	return out
}

// Routes lists a line's Gateway requests as "route status code".
func (l ToolLine) Routes() []string {
	var out []string
	for _, r := range l.GatewayRequests {
		out = append(out, strings.TrimSpace(r.Route+" "+strconv.Itoa(r.Status)+" "+r.Code))
	}
	return out
}

// KeyRoutes are the Gateway's crypto and key routes: an adapter refusal
// sends nothing to any of them.
var KeyRoutes = []string{api.RouteEncrypt, api.RouteDecrypt, api.RouteACLGet, api.RouteACLGrant, api.RouteACLUpdate,
	api.RouteACLRevoke, api.RouteKeyExpire, api.RouteKeyRemove}

// KeyRouteCounts is how many requests g has had on each of KeyRoutes.
func KeyRouteCounts(g *reference.Gateway) map[string]int {
	out := map[string]int{}
	for _, r := range KeyRoutes {
		out[r] = g.Count(r)
	}
	return out
}

// EnvelopeTTag is the ttag of the .pisoft envelope at p.
func EnvelopeTTag(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m["ttag"].(string)
}

// StepOpen says whether list_approved_documents' result shows hand-off
// step id open.
func StepOpen(list map[string]any, id string) bool {
	steps, _ := list["steps"].([]any)
	for _, s := range steps {
		if m, ok := s.(map[string]any); ok && m["stepId"] == id {
			return m["open"] == true
		}
	}
	return false
}

// FileRoot is a new temporary folder, its path with links resolved, for a
// grant's file root: the file tools refuse a root reached through a link.
func FileRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// SHA256 is the hex SHA-256 of b, as the file tools report it.
func SHA256(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// ToolNames is the names of the tools cs lists, sorted.
func ToolNames(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
	}
	slices.Sort(names)
	return names
}
