package server_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/audit"
	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/reference"
	"github.com/pdmcp/pdmcp/gateway/reference/reftest"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/mcptest"
	"github.com/pdmcp/pdmcp/internal/testutil"
	"github.com/pdmcp/pdmcp/server"
	"github.com/pdmcp/pdmcp/server/journal"
	"github.com/pdmcp/pdmcp/server/refusal"
)

// fixture is a real reference Gateway, a manifest of documents encrypted
// through it, and a server built from a grant over that manifest, reached
// by a go-sdk client over in-memory transports.
type fixture struct {
	env      *reftest.Env
	dir      string
	manifest string
	auditLog string
	cs       *mcp.ClientSession
	texts    map[string][]byte
	audit    *audit.Log
	logs     *testutil.LogBuffer // the server's log
	// client is the registered service, and owner the principal that made
	// the keys, for a test's second server acting for another user.
	client *gateway.Client
	owner  string
	srv    *server.Server
}

type doc struct {
	id, contentType string
	text            []byte
	approved        bool
	inGrant         bool
}

func newFixture(t testing.TB, docs []doc, mutate func(*grant.Grant, *grant.Manifest), configure ...func(*server.Config)) *fixture {
	t.Helper()
	ctx := context.Background()
	f := &fixture{env: reftest.Start(t, reference.Config{}), dir: t.TempDir(), texts: map[string][]byte{}}
	svc := f.env.Service(t, "svc", true)
	// A long timeout: 16 MiB through TLS and base64 under -race, beside the
	// other packages' tests on two shared cores, can overrun the default
	// 30 s; no test here is about the Gateway's timeout.
	cc := svc.ClientConfig()
	cc.BaseURL, cc.TrustFile, cc.Timeout = f.env.URL, f.env.CAFile, 5*time.Minute
	c, err := gateway.New(cc)
	if err != nil {
		t.Fatal(err)
	}
	owner := reftest.Principal(t, c, svc.Prefix+"owner")
	agent := reftest.Principal(t, c, svc.Prefix+"agent")
	owner_ := mustSession(t, c, owner.Name)
	f.client, f.owner = c, owner.Name
	m := &grant.Manifest{Version: grant.ManifestVersion, Documents: map[string]grant.Document{}, Destinations: map[string]grant.Destination{}}
	g := &grant.Grant{ID: "0123456789abcdef", Version: grant.GrantVersion, LocalUser: agent.Name,
		AllowedTools: grant.DocumentTools(), IssuedAt: time.Now().Add(-time.Minute).Truncate(time.Second),
		NotAfter: time.Now().Add(time.Hour).Truncate(time.Second)}
	if err := os.MkdirAll(filepath.Join(f.dir, "documents"), 0o700); err != nil {
		t.Fatal(err)
	}
	readGrant := func(ttag string) {
		if err := owner_.ACLGrant(ctx, api.ACLGrantRequest{TTag: ttag, SystemID: agent.SystemID, PrincipalID: agent.PrincipalID,
			Rights: []string{api.RightRead}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range docs {
		iv := bytes.Repeat([]byte{9}, 16)
		enc, err := owner_.Encrypt(ctx, gateway.EncryptInput{IV: iv, Plaintext: d.text})
		if err != nil {
			t.Fatal(err)
		}
		readGrant(enc.TTag)
		rel := "documents/" + d.id + ".bin"
		if err := os.WriteFile(filepath.Join(f.dir, rel), enc.Ciphertext, 0o600); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(d.text)
		m.Documents[d.id] = grant.Document{Label: d.id, Category: "test", Approved: d.approved, ContentType: d.contentType,
			Version: 1, Path: rel, TTag: enc.TTag, IV: base64.StdEncoding.EncodeToString(iv), SHA256: hex.EncodeToString(sum[:]),
			Size: int64(len(d.text))}
		f.texts[d.id] = d.text
		if d.inGrant {
			g.Documents = append(g.Documents, d.id)
		}
	}
	dest, err := owner_.Encrypt(ctx, gateway.EncryptInput{Plaintext: []byte("anchor")})
	if err != nil {
		t.Fatal(err)
	}
	readGrant(dest.TTag)
	m.Destinations["summary"] = grant.Destination{Label: "Summary", TTag: dest.TTag}
	m.Destinations["keyless"] = grant.Destination{Label: "No key yet"}
	g.Destinations = []string{"summary", "keyless"}
	if mutate != nil {
		mutate(g, m)
	}
	f.manifest = filepath.Join(f.dir, "manifest.json")
	if err := m.Save(f.manifest); err != nil {
		t.Fatal(err)
	}
	m, err = grant.LoadManifest(f.manifest)
	if err != nil {
		t.Fatal(err)
	}
	g.Manifest = f.manifest
	j, err := journal.Open(ctx, journal.DefaultPath(f.manifest))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	f.auditLog = filepath.Join(f.dir, "audit.jsonl")
	a, err := audit.Open(f.auditLog)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	f.audit, f.logs = a, &testutil.LogBuffer{}
	sessions := server.NewGrantSessions(c, g.LocalUser, grant.Keys(g, m), g.NotAfter, nil, nil)
	cfg := server.Config{Grant: g, Manifest: m, ManifestPath: f.manifest, Journal: j, Audit: a,
		Sessions: sessions, Version: "test", RunID: "run-test", Logger: slog.New(slog.NewTextHandler(f.logs, nil))}
	for _, c := range configure {
		c(&cfg)
	}
	if cfg.Tracer != nil {
		// A traced server's Gateway requests are traced by the same
		// tracer, as serve wires them.
		cc.Tracer = cfg.Tracer
		tc, err := gateway.New(cc)
		if err != nil {
			t.Fatal(err)
		}
		sessions = server.NewGrantSessions(tc, g.LocalUser, grant.Keys(g, m), g.NotAfter, nil, nil)
		cfg.Sessions = sessions
	}
	srv, err := server.New(cfg)
	if err != nil {
		t.Fatalf("server.New: %v", err)
	}
	t.Cleanup(func() { srv.Close() })
	f.srv = srv
	ct, st := mcp.NewInMemoryTransports()
	if _, err := srv.MCP().Connect(ctx, st, nil); err != nil {
		t.Fatal(err)
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "unit-host", Version: "0"},
		&mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{}}})
	f.cs, err = client.Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.cs.Close(); sessions.EndAll(context.Background()) })
	return f
}

func mustSession(t testing.TB, c *gateway.Client, who string) *gateway.Session {
	t.Helper()
	s, err := c.Mint(context.Background(), gateway.MintRequest{ActingAs: who, TTL: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (f *fixture) call(t *testing.T, name string, args map[string]any) (map[string]any, bool) {
	t.Helper()
	return mcptest.Call(t, f.cs, name, args)
}

var basicDocs = []doc{
	{id: "notes", contentType: "text/plain", text: []byte("plain synthetic notes"), approved: true, inGrant: true},
	{id: "scan", contentType: "application/octet-stream", text: []byte{0, 1, 2, 3}, approved: true, inGrant: true},
	{id: "huge", contentType: "text/plain", text: bytes.Repeat([]byte("z"), server.MaxTextBytes+1), approved: true, inGrant: true},
	{id: "latin1", contentType: "text/plain", text: []byte{'c', 'a', 'f', 0xe9}, approved: true, inGrant: true},
	{id: "other", contentType: "text/plain", text: []byte("not in grant"), approved: true, inGrant: false},
}

func TestAdapterRefusalsSendNothing(t *testing.T) {
	f := newFixture(t, basicDocs, nil)
	tests := []struct {
		name string
		tool string
		args map[string]any
		code string
	}{
		{"document not in grant", grant.ToolReadProtectedDocument, map[string]any{"documentId": "other"}, string(refusal.DocumentNotInGrant)},
		{"undeclared argument", grant.ToolReadProtectedDocument, map[string]any{"documentId": "notes", "path": "/etc/passwd"}, string(refusal.UnexpectedArgument)},
		{"missing argument", grant.ToolReadProtectedDocument, map[string]any{}, string(refusal.MissingArgument)},
		{"wrong type", grant.ToolReadProtectedDocument, map[string]any{"documentId": 5}, string(refusal.InvalidArgument)},
		{"not text", grant.ToolReadProtectedDocument, map[string]any{"documentId": "scan"}, string(refusal.NotText)},
		{"too large to read", grant.ToolReadProtectedDocument, map[string]any{"documentId": "huge"}, string(refusal.ResultTooLarge)},
		{"destination not in grant", grant.ToolSaveProtectedResult, map[string]any{"destinationId": "nope", "text": "x", "idempotencyKey": "k"}, string(refusal.DestinationNotInGrant)},
		{"destination has no key", grant.ToolSaveProtectedResult, map[string]any{"destinationId": "keyless", "text": "x", "idempotencyKey": "k"}, string(refusal.DestinationHasNoKey)},
		{"result too large", grant.ToolSaveProtectedResult, map[string]any{"destinationId": "summary", "text": strings.Repeat("r", server.MaxTextBytes+1), "idempotencyKey": "k"}, string(refusal.ResultTooLarge)},
		{"empty idempotency key", grant.ToolSaveProtectedResult, map[string]any{"destinationId": "summary", "text": "x", "idempotencyKey": ""}, string(refusal.InvalidArgument)},
		{"idempotency key of 129 characters", grant.ToolSaveProtectedResult, map[string]any{"destinationId": "summary", "text": "x", "idempotencyKey": strings.Repeat("é", 129)}, string(refusal.InvalidArgument)},
		{"tool not in grant", grant.ToolHandOff, map[string]any{"stepId": "s"}, string(refusal.ToolNotInGrant)},
		{"category of wrong type", grant.ToolListApprovedDocuments, map[string]any{"category": true}, string(refusal.InvalidArgument)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := f.env.Gateway.Counts()
			m, isErr := f.call(t, tc.tool, tc.args)
			if !isErr || m["layer"] != "adapter" || m["code"] != tc.code || m["refused"] != true {
				t.Fatalf("got %v (isError %v), want adapter %s", m, isErr, tc.code)
			}
			if after := f.env.Gateway.Counts(); !maps.Equal(before, after) {
				t.Fatalf("refusal reached the Gateway: %v -> %v", before, after)
			}
		})
	}
}

// TestReadRefusesWithdrawnApproval: a document the grant names but the
// manifest no longer approves is neither listed nor read, and the read
// sends nothing to the Gateway.
func TestReadRefusesWithdrawnApproval(t *testing.T) {
	docs := append(slices.Clone(basicDocs),
		doc{id: "withdrawn", contentType: "text/plain", text: []byte("under legal review"), approved: false, inGrant: true})
	f := newFixture(t, docs, nil)
	before := f.env.Gateway.Counts()
	m, isErr := f.call(t, grant.ToolReadProtectedDocument, map[string]any{"documentId": "withdrawn"})
	if !isErr || m["layer"] != "adapter" || m["code"] != string(refusal.DocumentNotApproved) || m["status"] != float64(403) {
		t.Fatalf("got %v (isError %v), want adapter DOCUMENT_NOT_APPROVED", m, isErr)
	}
	if after := f.env.Gateway.Counts(); !maps.Equal(before, after) {
		t.Fatalf("the refused read reached the Gateway: %v -> %v", before, after)
	}
	if strings.Contains(jsonOf(m), "legal review") {
		t.Fatal("text of the withdrawn document was returned")
	}
	list, _ := f.call(t, grant.ToolListApprovedDocuments, map[string]any{})
	if strings.Contains(jsonOf(list), "withdrawn") {
		t.Errorf("the withdrawn document is listed: %v", list)
	}
}

// TestIdempotencyKeyCountsCharacters: 128 characters of two bytes each
// are a valid key (256 bytes); the limit is in characters, not bytes.
func TestIdempotencyKeyCountsCharacters(t *testing.T) {
	f := newFixture(t, basicDocs, nil)
	key := strings.Repeat("é", 128)
	m, isErr := f.call(t, grant.ToolSaveProtectedResult, map[string]any{"destinationId": "summary", "text": "x", "idempotencyKey": key})
	if isErr || m["idempotencyKey"] != key || m["version"] != float64(1) {
		t.Fatalf("a key of 128 characters: %v", m)
	}
}

// TestConcurrentRetriesEncryptOnce: the same save sent twice at once (a
// host retrying before the first answer) is encrypted once and gets one
// version; one of the two answers is the replay.
func TestConcurrentRetriesEncryptOnce(t *testing.T) {
	f := newFixture(t, basicDocs, nil)
	encrypts := f.env.Gateway.Count(api.RouteEncrypt)
	args := map[string]any{"destinationId": "summary", "text": "one summary", "idempotencyKey": "twice"}
	results := make(chan map[string]any, 2)
	for range 2 {
		go func() {
			res, err := f.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: grant.ToolSaveProtectedResult, Arguments: args})
			if err != nil || res.IsError {
				results <- nil
				return
			}
			b, _ := json.Marshal(res.StructuredContent)
			var m map[string]any
			_ = json.Unmarshal(b, &m)
			results <- m
		}()
	}
	a, b := <-results, <-results
	if a == nil || b == nil || a["version"] != float64(1) || b["version"] != float64(1) || a["replayed"] == b["replayed"] {
		t.Fatalf("two concurrent sends of one save: %v and %v", a, b)
	}
	if n := f.env.Gateway.Count(api.RouteEncrypt) - encrypts; n != 1 {
		t.Errorf("%d encrypts for one save, want 1", n)
	}
}

func TestReadChecksUTF8AfterDecrypt(t *testing.T) {
	f := newFixture(t, basicDocs, nil)
	m, isErr := f.call(t, grant.ToolReadProtectedDocument, map[string]any{"documentId": "latin1"})
	if !isErr || m["code"] != string(refusal.NotText) {
		t.Fatalf("got %v", m)
	}
}

func TestReadDetectsTamperedManifest(t *testing.T) {
	f := newFixture(t, basicDocs, func(_ *grant.Grant, m *grant.Manifest) {
		d := m.Documents["notes"]
		d.SHA256 = strings.Repeat("0", 64)
		m.Documents["notes"] = d
	})
	m, isErr := f.call(t, grant.ToolReadProtectedDocument, map[string]any{"documentId": "notes"})
	if !isErr || m["code"] != string(refusal.IntegrityMismatch) {
		t.Fatalf("got %v", m)
	}
	if strings.Contains(jsonOf(m), "synthetic notes") {
		t.Fatal("text of a mismatching document was returned")
	}
}

func TestListFiltersByCategoryAndGrant(t *testing.T) {
	f := newFixture(t, basicDocs, nil)
	m, isErr := f.call(t, grant.ToolListApprovedDocuments, map[string]any{})
	if isErr {
		t.Fatal(m)
	}
	if n := len(m["documents"].([]any)); n != 4 {
		t.Errorf("listed %d documents, want the 4 in the grant", n)
	}
	m, _ = f.call(t, grant.ToolListApprovedDocuments, map[string]any{"category": "none-such"})
	if n := len(m["documents"].([]any)); n != 0 {
		t.Errorf("category filter listed %d", n)
	}
}

func TestAuditClientLineAndNoSecrets(t *testing.T) {
	f := newFixture(t, basicDocs, nil)
	if _, isErr := f.call(t, grant.ToolReadProtectedDocument, map[string]any{"documentId": "notes"}); isErr {
		t.Fatal("read refused")
	}
	b, err := os.ReadFile(f.auditLog)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"event":"client"`) || !strings.Contains(string(b), `"elicitation":true`) ||
		!strings.Contains(string(b), `"name":"unit-host"`) {
		t.Errorf("no client line with the host's name and elicitation:\n%s", b)
	}
	if strings.Contains(string(b), "synthetic notes") {
		t.Error("document text in the audit file")
	}
}

func TestToolSchemasAreClosed(t *testing.T) {
	f := newFixture(t, basicDocs, nil)
	res, err := f.cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Tools) != 3 {
		t.Fatalf("tools %d, want the grant's 3", len(res.Tools))
	}
	for _, tl := range res.Tools {
		schema := tl.InputSchema.(map[string]any)
		if schema["additionalProperties"] != false {
			t.Errorf("%s: input schema is not closed: %v", tl.Name, schema)
		}
		if len(tl.Description) < 80 {
			t.Errorf("%s: description too thin for a model: %q", tl.Name, tl.Description)
		}
	}
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestReadStaysInTheManifestFolder: a symbolic link planted in the
// manifest's folder cannot redirect a read outside it.
func TestReadStaysInTheManifestFolder(t *testing.T) {
	f := newFixture(t, basicDocs, nil)
	inside := filepath.Join(f.dir, "documents", "notes.bin")
	ct, err := os.ReadFile(inside)
	if err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "elsewhere.bin")
	if err := os.WriteFile(outside, ct, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(inside); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, inside); err != nil {
		t.Fatal(err)
	}
	before := f.env.Gateway.Counts()
	m, isErr := f.call(t, grant.ToolReadProtectedDocument, map[string]any{"documentId": "notes"})
	if !isErr || m["code"] != string(refusal.CiphertextUnavailable) {
		t.Fatalf("read through a link out of the folder: %v", m)
	}
	if after := f.env.Gateway.Counts(); !maps.Equal(before, after) {
		t.Error("the refused read reached the Gateway")
	}
}

// TestSaveStepsOverStrayFilesAndLogsThem (issue 17 item 6): files already
// at a destination's next version names that are not this save's (an
// empty one and a partial one, as a crash of an older release leaves) are
// left untouched, each is named in a warning of the server's log, and the
// save takes the first free version; one encrypt is sent.
func TestSaveStepsOverStrayFilesAndLogsThem(t *testing.T) {
	f := newFixture(t, basicDocs, nil)
	results := filepath.Join(f.dir, "results")
	if err := os.MkdirAll(results, 0o700); err != nil {
		t.Fatal(err)
	}
	strays := map[string]string{"summary.v1.bin": "", "summary.v2.bin": "partial"}
	for name, body := range strays {
		if err := os.WriteFile(filepath.Join(results, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	encrypts := f.env.Gateway.Count(api.RouteEncrypt)
	m, isErr := f.call(t, "save_protected_result", map[string]any{"destinationId": "summary", "text": "a summary", "idempotencyKey": "k1"})
	if isErr || m["version"] != float64(3) {
		t.Fatalf("save over two stray files: %v", m)
	}
	if fi, err := os.Stat(filepath.Join(results, "summary.v3.bin")); err != nil || fi.Size() == 0 {
		t.Errorf("version 3's file: %v", err)
	}
	if n := f.env.Gateway.Count(api.RouteEncrypt) - encrypts; n != 1 {
		t.Errorf("%d encrypts, want 1", n)
	}
	logs := f.logs.String()
	for name, body := range strays {
		if b, err := os.ReadFile(filepath.Join(results, name)); err != nil || string(b) != body {
			t.Errorf("the stray %s was touched: %q, %v", name, b, err)
		}
		if !strings.Contains(logs, "level=WARN") || !strings.Contains(logs, "path=results/"+name) {
			t.Errorf("no warning names the stray %s; the log:\n%s", name, logs)
		}
	}
}
