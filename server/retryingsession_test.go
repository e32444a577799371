package server_test

import (
	"context"
	"strings"
	"testing"

	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/reference"
	"github.com/pdmcp/pdmcp/gateway/reference/reftest"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/mcptest"
)

// TestSessionReplacedAfterAdminRevoke: an operator revokes the task's
// session at the Gateway. The next read and the next save are each refused
// SESSION_REVOKED once, the server mints a new session and sends the call
// again, and the model sees only the result; the audit line says so.
func TestSessionReplacedAfterAdminRevoke(t *testing.T) {
	f := newFixture(t, basicDocs, nil)
	ctx := context.Background()
	admin := f.env.Client(t).Admin(reftest.AdminUser, reftest.AdminPassword)

	if m, isErr := f.call(t, grant.ToolReadProtectedDocument, map[string]any{"documentId": "notes"}); isErr {
		t.Fatalf("first read: %v", m)
	}
	first := mcptest.ToolLines(t, f.auditLog)
	before := first[len(first)-1]

	for i, tc := range []struct {
		tool  string
		args  map[string]any
		route string
	}{
		{grant.ToolReadProtectedDocument, map[string]any{"documentId": "notes"}, api.RouteDecrypt},
		{grant.ToolSaveProtectedResult, map[string]any{"destinationId": "summary", "text": "a result", "idempotencyKey": "k1"}, api.RouteEncrypt},
	} {
		if n, err := admin.RevokeSessions(ctx, ""); err != nil || n == 0 {
			t.Fatalf("admin revoke: %d, %v", n, err)
		}
		f.env.Gateway.ResetCounts()
		m, isErr := f.call(t, tc.tool, tc.args)
		if isErr {
			t.Fatalf("%s after the admin revoke: %v", tc.tool, m)
		}
		if tc.tool == grant.ToolReadProtectedDocument && m["text"] != string(f.texts["notes"]) {
			t.Fatalf("read returned %v", m["text"])
		}
		counts := f.env.Gateway.Counts()
		if counts[tc.route] != 2 || counts[api.RouteScoped] != 1 || counts[api.RouteRevoke] != 0 {
			t.Fatalf("%s: Gateway counts %v; want the call twice around one mint, and no revoke of a dead session", tc.tool, counts)
		}
		lines := mcptest.ToolLines(t, f.auditLog)
		got := lines[len(lines)-1]
		want := []string{tc.route + " 401 SESSION_REVOKED", api.RouteScoped + " 200", tc.route + " 200"}
		if !got.SessionReplaced || got.Outcome != "ok" || strings.Join(got.Routes(), "|") != strings.Join(want, "|") {
			t.Fatalf("%s audit line %+v; want sessionReplaced, ok, requests %v", tc.tool, got, want)
		}
		if got.HandleDigest == "" || got.HandleDigest == before.HandleDigest || got.JKT == before.JKT {
			t.Fatalf("call %d: audit names session %s (jkt %s), the revoked one was %s (%s)", i, got.HandleDigest, got.JKT,
				before.HandleDigest, before.JKT)
		}
		before = got
	}

	// A call on a live session is not marked.
	f.env.Gateway.ResetCounts()
	if m, isErr := f.call(t, grant.ToolReadProtectedDocument, map[string]any{"documentId": "notes"}); isErr {
		t.Fatalf("read: %v", m)
	}
	lines := mcptest.ToolLines(t, f.auditLog)
	if last := lines[len(lines)-1]; last.SessionReplaced || f.env.Gateway.Count(api.RouteScoped) != 0 {
		t.Fatalf("a call on a live session was marked replaced or minted: %+v", last)
	}
}

// TestSessionReplacedOnlyOnce: a request refused SESSION_MISSING is sent
// once more on a new session; when that is refused the same way, the
// refusal stands (no third request, no second mint) and reaches the model.
func TestSessionReplacedOnlyOnce(t *testing.T) {
	f := newFixture(t, basicDocs, nil)
	if m, isErr := f.call(t, grant.ToolReadProtectedDocument, map[string]any{"documentId": "notes"}); isErr {
		t.Fatalf("first read: %v", m)
	}
	for _, tc := range []struct {
		gone    int
		refused bool
	}{{1, false}, {2, true}} {
		f.env.Gateway.SetFaults(reference.Faults{SessionGoneNext: map[string]int{api.RouteDecrypt: tc.gone}})
		f.env.Gateway.ResetCounts()
		m, isErr := f.call(t, grant.ToolReadProtectedDocument, map[string]any{"documentId": "notes"})
		if tc.refused {
			if !isErr || m["layer"] != "gateway" || m["code"] != api.CodeSessionMissing {
				t.Fatalf("read with the session gone twice: %v", m)
			}
		} else if isErr {
			t.Fatalf("read with the session gone once: %v", m)
		}
		counts := f.env.Gateway.Counts()
		if counts[api.RouteDecrypt] != 2 || counts[api.RouteScoped] != 1 {
			t.Fatalf("gone %d times: Gateway counts %v; want two decrypts and one mint", tc.gone, counts)
		}
		lines := mcptest.ToolLines(t, f.auditLog)
		if last := lines[len(lines)-1]; !last.SessionReplaced {
			t.Fatalf("audit line %+v does not say sessionReplaced", last)
		}
	}
	f.env.Gateway.SetFaults(reference.Faults{})
}

// TestStdioMintAnsweringAnotherPrincipalIsRefused: over stdio the grant
// names the user; a session acting as anyone else is revoked at once and
// the read refused SESSION_IDENTITY_MISMATCH, nothing decrypted.
func TestStdioMintAnsweringAnotherPrincipalIsRefused(t *testing.T) {
	f := newFixture(t, basicDocs, nil)
	other := f.env.Service(t, "other", true)
	stranger := reftest.Principal(t, f.env.ServiceClient(t, other), other.Prefix+"stranger")
	f.env.Gateway.SetFaults(reference.Faults{MintAsPrincipal: stranger.Name})
	f.env.Gateway.ResetCounts()
	m, isErr := f.call(t, grant.ToolReadProtectedDocument, map[string]any{"documentId": "notes"})
	if !isErr || m["layer"] != "adapter" || m["code"] != api.CodeSessionIdentityMismatch {
		t.Fatalf("read with a Gateway answering another principal: %v", m)
	}
	counts := f.env.Gateway.Counts()
	if counts[api.RouteScoped] != 1 || counts[api.RouteRevoke] != 1 || counts[api.RouteDecrypt] != 0 {
		t.Fatalf("Gateway counts %v: want one mint and its revoke, no decrypt", counts)
	}
	f.env.Gateway.SetFaults(reference.Faults{})
	if m, isErr := f.call(t, grant.ToolReadProtectedDocument, map[string]any{"documentId": "notes"}); isErr {
		t.Fatalf("read once the Gateway answers rightly: %v", m)
	}
}
