package server_test

import (
	"context"
	"encoding/json"
	"maps"
	"strings"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/server"
	"github.com/pdmcp/pdmcp/server/refusal"
)

// outputValidators does what an SDK client does after tools/list: it keeps
// a validator for every tool's declared output schema.
func outputValidators(t *testing.T, cs *mcp.ClientSession) map[string]*jsonschema.Resolved {
	t.Helper()
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*jsonschema.Resolved{}
	for _, tl := range res.Tools {
		if tl.OutputSchema == nil {
			continue
		}
		b, err := json.Marshal(tl.OutputSchema)
		if err != nil {
			t.Fatal(err)
		}
		var s jsonschema.Schema
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatalf("%s: output schema: %v", tl.Name, err)
		}
		r, err := s.Resolve(nil)
		if err != nil {
			t.Fatalf("%s: output schema does not resolve: %v", tl.Name, err)
		}
		out[tl.Name] = r
	}
	return out
}

// checkAsSDKClient applies the TypeScript SDK client's checks of a
// tools/call result (Client.callTool, 1.32.2): a tool with an output schema
// must return structuredContent unless isError is set, and structuredContent,
// whenever present, must match the schema, or the client throws -32602
// instead of returning the result.
func checkAsSDKClient(t *testing.T, tools map[string]*jsonschema.Resolved, name string, res *mcp.CallToolResult) {
	t.Helper()
	v, ok := tools[name]
	if !ok {
		return
	}
	if res.StructuredContent == nil {
		if !res.IsError {
			t.Errorf("%s: result without structuredContent though the tool declares an output schema", name)
		}
		return
	}
	b, _ := json.Marshal(res.StructuredContent)
	var inst any
	_ = json.Unmarshal(b, &inst)
	if err := v.Validate(inst); err != nil {
		t.Errorf("%s: an SDK client would reject this result (isError %v): %v\n%s", name, res.IsError, err, b)
	}
}

// TestRefusalsReadableAfterToolsList: after tools/list, every refusal, from
// the adapter, the tool gate, the Gateway or the key server, reaches the
// client as an isError result whose text content is the refusal JSON and
// which carries no structuredContent to contradict the output schema; and
// every success result matches its schema.
func TestRefusalsReadableAfterToolsList(t *testing.T) {
	f := newFixture(t, basicDocs, func(g *grant.Grant, m *grant.Manifest) {
		// A document whose key the key server does not know: the refusal
		// comes from upstream, not from this server.
		d := m.Documents["notes"]
		d.TTag = strings.Repeat("A", len(d.TTag))
		m.Documents["lost-key"] = d
		g.Documents = append(g.Documents, "lost-key")
	})
	tools := outputValidators(t, f.cs)
	if len(tools) != 3 {
		t.Fatalf("%d tools declare an output schema, want 3", len(tools))
	}
	tests := []struct {
		name  string
		tool  string
		args  map[string]any
		layer string // "" for a success
		code  string
	}{
		{"list", grant.ToolListApprovedDocuments, map[string]any{}, "", ""},
		{"read", grant.ToolReadProtectedDocument, map[string]any{"documentId": "notes"}, "", ""},
		{"save", grant.ToolSaveProtectedResult, map[string]any{"destinationId": "summary", "text": "r", "idempotencyKey": "k1"}, "", ""},
		{"unknown document", grant.ToolReadProtectedDocument, map[string]any{"documentId": "no-such-doc"}, "adapter", string(refusal.DocumentNotInGrant)},
		{"undeclared argument", grant.ToolListApprovedDocuments, map[string]any{"bogus": 1}, "adapter", string(refusal.UnexpectedArgument)},
		{"save refused", grant.ToolSaveProtectedResult, map[string]any{"destinationId": "keyless", "text": "r", "idempotencyKey": "k2"}, "adapter", string(refusal.DestinationHasNoKey)},
		{"tool not in grant", grant.ToolHandOff, map[string]any{}, "adapter", string(refusal.ToolNotInGrant)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := f.env.Gateway.Counts()
			res, err := f.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tc.tool, Arguments: tc.args})
			if err != nil {
				t.Fatalf("protocol error instead of a result: %v", err)
			}
			checkAsSDKClient(t, tools, tc.tool, res)
			if tc.layer == "" {
				if res.IsError {
					t.Fatalf("refused: %+v", res.Content)
				}
				return
			}
			wantContentRefusal(t, res, tc.layer, tc.code)
			if after := f.env.Gateway.Counts(); !maps.Equal(before, after) {
				t.Fatalf("adapter refusal reached the Gateway: %v -> %v", before, after)
			}
		})
	}
	// A refusal from beyond the adapter keeps its layer and code, in the
	// same rendering.
	res, err := f.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: grant.ToolReadProtectedDocument,
		Arguments: map[string]any{"documentId": "lost-key"}})
	if err != nil {
		t.Fatal(err)
	}
	checkAsSDKClient(t, tools, grant.ToolReadProtectedDocument, res)
	wantContentRefusal(t, res, "keyserver", "KEY_NOT_FOUND")
}

// wantContentRefusal asserts the one refusal rendering: isError, no
// structuredContent, a first text block that is a sentence naming the code
// (not JSON: Gemini CLI would turn JSON there into structuredContent), then
// a text block holding the refusal JSON.
func wantContentRefusal(t *testing.T, res *mcp.CallToolResult, layer, code string) {
	t.Helper()
	if !res.IsError || res.StructuredContent != nil || len(res.Content) != 2 {
		t.Fatalf("want isError with two content blocks and no structuredContent, got %+v", res)
	}
	line, ok1 := res.Content[0].(*mcp.TextContent)
	tc, ok2 := res.Content[1].(*mcp.TextContent)
	if !ok1 || !ok2 {
		t.Fatalf("content is %T, %T, want text, text", res.Content[0], res.Content[1])
	}
	if json.Valid([]byte(line.Text)) || !strings.Contains(line.Text, code) || !strings.Contains(line.Text, layer) {
		t.Fatalf("first block %q: want a sentence (not JSON) naming %s and %s", line.Text, layer, code)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(tc.Text), &m); err != nil {
		t.Fatalf("refusal text is not JSON: %q", tc.Text)
	}
	if m["refused"] != true || m["layer"] != layer || m["code"] != code || m["detail"] == "" || m["status"] == nil {
		t.Fatalf("refusal %s, want %s %s with status and detail", tc.Text, layer, code)
	}
	// Copilot CLI joins the blocks with no separator: the sentence ends
	// with a newline, and the JSON is the whole last line of the join.
	joined := line.Text + tc.Text
	if !strings.HasSuffix(line.Text, "\n") || strings.Count(line.Text, "\n") != 1 {
		t.Fatalf("first block %q: want one sentence ending with a newline", line.Text)
	}
	last := joined[strings.LastIndex(joined, "\n")+1:]
	if err := json.Unmarshal([]byte(last), &m); err != nil || m["code"] != code {
		t.Fatalf("the blocks joined with no separator do not end in the refusal's JSON line: %q", joined)
	}
	r, ok := server.RefusalOf(res)
	if !ok || r.Code != code || r.Layer != layer {
		t.Fatalf("RefusalOf = %+v, %v", r, ok)
	}
}
