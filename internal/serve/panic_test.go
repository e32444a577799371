package serve_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/crashpoint"
	"github.com/pdmcp/pdmcp/internal/handofftest"
	"github.com/pdmcp/pdmcp/internal/mcptest"
	"github.com/pdmcp/pdmcp/internal/serve"
	"github.com/pdmcp/pdmcp/internal/testutil"
	"github.com/pdmcp/pdmcp/server"
	"github.com/pdmcp/pdmcp/server/refusal"
)

// panicSecret is what the injected panic carries: it must reach neither
// the caller nor the log.
const panicSecret = "Bearer eyJhbGciOiJFUzI1NiJ9.secret-token-text"

// panicAt returns a crash-point hook (serve.Options.CrashPoint, the hook
// tests already kill the process with) that panics once at point when
// armed, and the switch that arms it.
func panicAt(point crashpoint.Point) (func(crashpoint.Point), *atomic.Bool) {
	armed := &atomic.Bool{}
	return func(p crashpoint.Point) {
		if p == point && armed.CompareAndSwap(true, false) {
			panic(panicSecret)
		}
	}, armed
}

// wantPanicAnswer checks that a tool call that panicked was answered
// INTERNAL_ERROR in the refusal shape, with nothing of the panic.
func wantPanicAnswer(t *testing.T, res *mcp.CallToolResult, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("the panicking call was not answered: %v", err)
	}
	r, ok := server.RefusalOf(res)
	if !ok || r.Code != string(refusal.Internal) || r.Status != 500 || r.Layer != "adapter" {
		t.Fatalf("the panicking call: %+v, want an INTERNAL_ERROR refusal", res)
	}
	for _, c := range res.Content {
		if tc, isText := c.(*mcp.TextContent); isText && strings.Contains(tc.Text, "secret") {
			t.Fatalf("the answer carries the panic's value: %q", tc.Text)
		}
	}
}

// sessionOf is the handle digest on the last audit line of a tool call
// acting as the principal whose name ends with user.
func sessionOf(lines []map[string]any, user string) string {
	digest := ""
	for _, m := range lines {
		actingAs, _ := m["actingAs"].(string)
		if m["event"] == "tool" && strings.HasSuffix(actingAs, user) {
			digest, _ = m["handleDigest"].(string)
		}
	}
	return digest
}

// TestHTTPPanicInAToolEndsThatCallOnly (issue 31 scenario 6): a tool
// that panics behind the real HTTP handler (alice's save, at a step after
// its Gateway encrypt) no longer ends the process. Alice's call is
// answered INTERNAL_ERROR and her Gateway session is replaced; her next
// call works on a fresh session, and her save retried with the same
// idempotencyKey finishes; bob's calls go on on his own session; the
// panic is counted in /metrics and logged without its value; and the
// shutdown clean-up still runs: every session revoked, the shutdown
// audit line written. Alice speaks the newest protocol (served
// statelessly) in one run and 2025-11-25 (an MCP session) in the other:
// the go-sdk runs the tool's handler on a goroutine of its own either way.
func TestHTTPPanicInAToolEndsThatCallOnly(t *testing.T) {
	for _, proto := range []string{"", "2025-11-25"} {
		t.Run("protocol "+cmp.Or(proto, "newest"), func(t *testing.T) { httpPanicInATool(t, proto) })
	}
}

func httpPanicInATool(t *testing.T, proto string) {
	hook, armed := panicAt(crashpoint.SaveEncrypted)
	hs := newHTTPStack(t, 8, func(_ *testing.T, hs *httpStack, _ string, _ *grant.LaunchOptions) { hs.crashPoint = hook })
	alice := hs.dial(t, "http-panic", hs.as(hs.token(t, "alice", "pw-a"), nil), nil, &mcp.ClientSessionOptions{ProtocolVersion: proto})
	bob := hs.connect(t, hs.token(t, "bob", "pw-b"))
	read := func(who string, cs *mcp.ClientSession) {
		t.Helper()
		if m, isErr := mcptest.Call(t, cs, grant.ToolReadProtectedDocument, map[string]any{"documentId": "proposal-aurora"}); isErr {
			t.Fatalf("%s's read: %v", who, m)
		}
	}
	read("alice", alice)
	read("bob", bob)
	aliceBefore, bobBefore := sessionOf(hs.auditLines(t), ".alice"), sessionOf(hs.auditLines(t), ".bob")
	if aliceBefore == "" || bobBefore == "" {
		t.Fatal("no session named in the audit lines of the first reads")
	}

	armed.Store(true)
	save := map[string]any{"destinationId": "evaluation-summary", "text": "saved after a panic", "idempotencyKey": "panic-1"}
	res, err := alice.CallTool(context.Background(), &mcp.CallToolParams{Name: grant.ToolSaveProtectedResult, Arguments: save})
	wantPanicAnswer(t, res, err)

	// The server goes on: alice on a fresh session, bob on his own.
	read("alice", alice)
	read("bob", bob)
	all := hs.auditLines(t)
	if after := sessionOf(all, ".alice"); after == "" || after == aliceBefore {
		t.Errorf("alice's session after the panic: %q, before it %q; want a fresh one", after, aliceBefore)
	}
	if after := sessionOf(all, ".bob"); after != bobBefore {
		t.Errorf("bob's session changed from %q to %q; another user's panic must not touch it", bobBefore, after)
	}
	if m, isErr := mcptest.Call(t, alice, grant.ToolSaveProtectedResult, save); isErr || m["version"] != float64(1) {
		t.Fatalf("the save retried after the panic: %v", m)
	}
	if got := hs.metric(t, `pdmcp_panics_total{where="tool"}`); got != 1 {
		t.Errorf("pdmcp_panics_total{where=\"tool\"} = %v, want 1", got)
	}
	logs := hs.stderr.String()
	if strings.Contains(logs, "secret-token-text") || !strings.Contains(logs, "a panic was recovered") {
		t.Fatalf("the log does not report the panic, or holds its value:\n%s", logs)
	}

	// The shutdown clean-up runs as on any stop.
	revokes := hs.env.Gateway.Count(api.RouteRevoke)
	// Alice's host leaves first: an MCP session's open stream would hold
	// the stop for its five-second grace, which is not what this tests.
	alice.Close()
	if err := hs.st.StopMCP(); err != nil {
		t.Fatalf("serve.Run after the panic: %v", err)
	}
	if got := hs.env.Gateway.Count(api.RouteRevoke) - revokes; got != 2 {
		t.Errorf("revokes at shutdown: %d, want 2 (alice's fresh session and bob's)", got)
	}
	if live, _ := hs.env.Gateway.LiveScopedSessions(); live != 0 {
		t.Errorf("%d scoped sessions live after the stop", live)
	}
	lines := hs.auditLines(t)
	if last := lines[len(lines)-1]; last["event"] != "shutdown" || last["reason"] != "signal" {
		t.Errorf("the audit file's last line: %v, want the shutdown line", last)
	}
}

// TestStdioPanicInAToolEndsThatCallOnly (issue 31 scenario 6), over
// stdio through serve.Run: the go-sdk runs the call's handler on its own
// goroutine there too. The panicking save is answered INTERNAL_ERROR, the
// task's session is replaced, the next calls work (the save retried with
// the same idempotencyKey finishes), and when the host leaves, the
// shutdown clean-up runs: the session revoked, the shutdown line written,
// and serve.Run returns without error.
func TestStdioPanicInAToolEndsThatCallOnly(t *testing.T) {
	ctx := context.Background()
	f := newSeededFolder(t)
	grantPath := filepath.Join(f.data, "grant.json")
	if _, err := grant.Launch(grant.LaunchOptions{ManifestPath: f.manifest, AllApproved: true, LocalUser: f.rec.AgentUser,
		TTL: time.Hour, Out: grantPath}); err != nil {
		t.Fatal(err)
	}
	hook, armed := panicAt(crashpoint.SaveEncrypted)
	auditPath := filepath.Join(f.dir, "audit.jsonl")
	logs := &testutil.LogBuffer{}
	ct, st := mcp.NewInMemoryTransports()
	done := make(chan error, 1)
	go func() {
		done <- serve.Run(ctx, serve.Options{ConfigPath: f.cfgPath, ManifestPath: f.manifest, GrantPath: grantPath,
			AuditPath: auditPath, StdioTransport: st, CrashPoint: hook, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	}()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "stdio-host", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	gw := f.env.Gateway
	read := func() {
		t.Helper()
		if m, isErr := mcptest.Call(t, cs, grant.ToolReadProtectedDocument, map[string]any{"documentId": "proposal-aurora"}); isErr {
			t.Fatalf("read: %v", m)
		}
	}
	read()
	mints, revokes := gw.Count(api.RouteScoped), gw.Count(api.RouteRevoke)

	armed.Store(true)
	save := map[string]any{"destinationId": "evaluation-summary", "text": "saved after a panic", "idempotencyKey": "panic-1"}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: grant.ToolSaveProtectedResult, Arguments: save})
	wantPanicAnswer(t, res, err)
	if got := gw.Count(api.RouteRevoke) - revokes; got != 1 {
		t.Errorf("revokes after the panic: %d, want 1 (the task's session ended)", got)
	}
	read()
	if got := gw.Count(api.RouteScoped) - mints; got != 1 {
		t.Errorf("sessions minted after the panic: %d, want 1 (a fresh one for the next call)", got)
	}
	if m, isErr := mcptest.Call(t, cs, grant.ToolSaveProtectedResult, save); isErr || m["version"] != float64(1) {
		t.Fatalf("the save retried after the panic: %v", m)
	}
	if l := logs.String(); strings.Contains(l, "secret-token-text") || !strings.Contains(l, "a panic was recovered") {
		t.Fatalf("the log does not report the panic, or holds its value:\n%s", l)
	}

	// The host leaves: serve.Run cleans up as on any stop.
	revokes = gw.Count(api.RouteRevoke)
	cs.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve.Run after the panic: %v", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("serve.Run did not return after the host left")
	}
	if got := gw.Count(api.RouteRevoke) - revokes; got != 1 {
		t.Errorf("revokes at shutdown: %d, want 1", got)
	}
	lines := mcptest.AuditLines(t, auditPath)
	if last := lines[len(lines)-1]; last["event"] != "shutdown" || last["reason"] != "stdin-closed" {
		t.Errorf("the audit file's last line: %v, want the shutdown line", last)
	}
}

// TestHTTPPanicAnswerCarriesResultType: on 2026-07-28 the INTERNAL_ERROR
// a panicking call is answered with is a complete result like any other
// (resultType), in the refusal shape: isError, no structuredContent that
// the tool's output schema would reject.
func TestHTTPPanicAnswerCarriesResultType(t *testing.T) {
	hook, armed := panicAt(crashpoint.SaveEncrypted)
	hs := newHTTPStack(t, 4, func(_ *testing.T, hs *httpStack, _ string, _ *grant.LaunchOptions) { hs.crashPoint = hook })
	armed.Store(true)
	res := resultOf(t, hs, hs.token(t, "alice", "pw-a"), "tools/call", grant.ToolSaveProtectedResult,
		`"name":"save_protected_result","arguments":{"destinationId":"evaluation-summary","text":"t","idempotencyKey":"k"},`)
	b, _ := json.Marshal(res["content"])
	if res["resultType"] != "complete" || res["isError"] != true || res["structuredContent"] != nil ||
		!strings.Contains(string(b), string(refusal.Internal)) || strings.Contains(string(b), "secret") {
		t.Fatalf("the panicking call's result: %v", res)
	}
	if armed.Load() {
		t.Fatal("the call never reached the panic")
	}
}

// TestHTTPPanicLeavesTheShutdownToRevokeHandOffs (issue 31 scenario 6:
// "open hand-offs stayed open"): after a panic in one of alice's calls
// the server still serves, the hand-off she opened before it is still in
// force for the doctor, and stopping the server revokes it as any stop
// does.
func TestHTTPPanicLeavesTheShutdownToRevokeHandOffs(t *testing.T) {
	var w *handofftest.World
	hook, armed := panicAt(crashpoint.FragmentEncrypted)
	hs := newHTTPStack(t, 8, withSteps(&w, handofftest.Options{}),
		func(_ *testing.T, hs *httpStack, _ string, _ *grant.LaunchOptions) { hs.crashPoint = hook })
	alice := hs.connect(t, hs.token(t, "alice", "pw-a"))
	ctx := context.Background()
	doctorReads := func() string {
		t.Helper()
		ttag, iv, ct := w.Fragment(t, "problems")
		s := w.As(t, w.Doctor.Name)
		defer s.Revoke(ctx)
		_, err := s.Decrypt(ctx, ttag, iv, ct)
		var ae *api.Error
		if errors.As(err, &ae) {
			return ae.Code
		}
		if err != nil {
			return err.Error()
		}
		return ""
	}
	if m, isErr := mcptest.Call(t, alice, grant.ToolHandOff, map[string]any{"stepId": handofftest.StepReferral}); isErr {
		t.Fatalf("alice's hand_off: %v", m)
	}

	armed.Store(true)
	res, err := alice.CallTool(ctx, &mcp.CallToolParams{Name: grant.ToolSaveProtectedFragment, Arguments: map[string]any{
		"documentId": handofftest.DocID, "fragmentId": "results", "text": `<section><text>saved at a panic</text></section>`,
		"idempotencyKey": "panic-1"}})
	wantPanicAnswer(t, res, err)
	if armed.Load() {
		t.Fatal("the save never reached the panic")
	}
	if code := doctorReads(); code != "" {
		t.Fatalf("the doctor after alice's panic: %q, want the hand-off still in force", code)
	}
	if m, isErr := mcptest.Call(t, alice, grant.ToolListApprovedDocuments, nil); isErr {
		t.Fatalf("alice after the panic: %v", m)
	}
	alice.Close()
	if err := hs.st.StopMCP(); err != nil {
		t.Fatalf("serve.Run after the panic: %v", err)
	}
	if code := doctorReads(); code != "ACL_DENIED" {
		t.Fatalf("the doctor after the server stopped: %q, want the hand-off revoked", code)
	}
}
