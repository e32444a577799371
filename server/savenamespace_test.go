package server_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/mcptest"
	"github.com/pdmcp/pdmcp/internal/testutil"
	"github.com/pdmcp/pdmcp/server"
	"github.com/pdmcp/pdmcp/server/journal"
)

// TestStdioUsersKeepTheirOwnIdempotencyKeys: two stdio servers on one task
// folder, one with a grant for the agent and one for the owner. Over stdio
// the caller was "" for both, so the owner's first save under a key the
// agent had used came back replayed with the agent's receipt and saved
// nothing, or was refused IDEMPOTENCY_CONFLICT for a key the owner never
// used. Now each user's keys are their own, as over HTTP.
func TestStdioUsersKeepTheirOwnIdempotencyKeys(t *testing.T) {
	ctx := context.Background()
	var cfgAgent server.Config
	f := newFixture(t, basicDocs, nil, func(c *server.Config) { cfgAgent = *c })
	owner := ownerServer(t, f, cfgAgent)

	tests := []struct {
		name, key, agentText, ownerText string
	}{
		{"same key, same text", "summary-1", "the same result", "the same result"},
		{"same key, other text", "summary-2", "the agent's result", "the owner's result"},
	}
	version := 0
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := func(text string) map[string]any {
				return map[string]any{"destinationId": "summary", "text": text, "idempotencyKey": tc.key}
			}
			a, isErr := f.call(t, grant.ToolSaveProtectedResult, args(tc.agentText))
			version++
			if isErr || a["version"] != float64(version) || a["replayed"] != false {
				t.Fatalf("the agent's save: %v", a)
			}
			o, isErr := mcptest.Call(t, owner, grant.ToolSaveProtectedResult, args(tc.ownerText))
			version++
			if isErr || o["version"] != float64(version) || o["replayed"] != false {
				t.Fatalf("the owner's first save under the agent's key %q: %v; want a save of its own at version %d", tc.key, o, version)
			}
			// Each user's retry replays their own receipt.
			if again, _ := mcptest.Call(t, owner, grant.ToolSaveProtectedResult, args(tc.ownerText)); again["replayed"] != true || again["version"] != o["version"] {
				t.Errorf("the owner's retry: %v, want a replay of version %v", again, o["version"])
			}
			if again, _ := f.call(t, grant.ToolSaveProtectedResult, args(tc.agentText)); again["replayed"] != true || again["version"] != a["version"] {
				t.Errorf("the agent's retry: %v, want a replay of version %v", again, a["version"])
			}
		})
	}
	// The record names whose each save is.
	j, err := journal.Open(ctx, journal.DefaultPath(f.manifest))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	vs, err := j.Versions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	callers := map[string]int{}
	for _, v := range vs {
		callers[v.Caller]++
	}
	if len(vs) != 4 || callers[journal.LocalCaller(f.owner)] != 2 || callers[journal.LocalCaller(cfgAgent.Grant.LocalUser)] != 2 {
		t.Errorf("the record's callers: %v", callers)
	}
}

// ownerServer starts a second stdio server on f's folder, as another
// process would (its own journal handle), with a grant like f's for the
// principal that owns the keys, and connects a host to it.
func ownerServer(t *testing.T, f *fixture, like server.Config) *mcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	g := *like.Grant
	g.LocalUser = f.owner
	j, err := journal.Open(ctx, journal.DefaultPath(f.manifest))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	sessions := server.NewGrantSessions(f.client, g.LocalUser, grant.Keys(&g, like.Manifest), g.NotAfter, nil, nil)
	cfg := like
	cfg.Grant, cfg.Journal, cfg.Sessions = &g, j, sessions
	cfg.Logger = slog.New(slog.NewTextHandler(&testutil.LogBuffer{}, nil))
	srv, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	ct, st := mcp.NewInMemoryTransports()
	if _, err := srv.MCP().Connect(ctx, st, nil); err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "owner-host", Version: "0"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close(); sessions.EndAll(context.Background()) })
	return cs
}
