package serve_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/internal/mcptest"
	"github.com/pdmcp/pdmcp/server"
	"github.com/pdmcp/pdmcp/server/refusal"
)

// rawMCP posts one JSON-RPC message to the MCP endpoint with the headers
// given (nothing else but the token, content type and accept), over
// HTTP/1.1 or HTTP/2, and returns the status and the body's JSON-RPC
// message (the first SSE event's data when the answer is a stream).
func rawMCP(t *testing.T, hs *httpStack, h2 bool, tok, body string, headers map[string]string) (int, map[string]any) {
	t.Helper()
	base := hs.hc.Transport.(*http.Transport).Clone()
	base.ForceAttemptHTTP2 = h2
	if !h2 {
		base.TLSClientConfig = base.TLSClientConfig.Clone()
		base.TLSClientConfig.NextProtos = []string{"http/1.1"}
		base.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	req, err := http.NewRequest("POST", hs.url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range headers {
		req.Header[http.CanonicalHeaderKey(k)] = []string{v}
	}
	resp, err := (&http.Client{Transport: base}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if want := map[bool]int{true: 2, false: 1}[h2]; resp.ProtoMajor != want {
		t.Fatalf("answered over %s, want HTTP/%d", resp.Proto, want)
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	text := string(b)
	if i := strings.Index(text, "data: "); i >= 0 && !strings.HasPrefix(strings.TrimSpace(text), "{") {
		text = text[i+len("data: "):]
		if j := strings.Index(text, "\n"); j >= 0 {
			text = text[:j]
		}
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(text), &m); err != nil {
		t.Logf("status %d, body %.300q is not a JSON-RPC message", resp.StatusCode, b)
		return resp.StatusCode, nil
	}
	return resp.StatusCode, m
}

const newMeta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}`

// TestHTTPHeaderRules holds the header rules of 2026-07-28 (SEP-2243,
// SEP-2575) over HTTP/1.1 and HTTP/2: whitespace around a value is not part
// of it (HTTP/2 delivers it as sent), and a header that disagrees with the
// body, or is missing where the body names a value, is refused 400 with
// JSON-RPC error -32020 (HeaderMismatch) for that message's id.
func TestHTTPHeaderRules(t *testing.T) {
	hs := newHTTPStack(t, 4)
	tok := hs.token(t, "alice", "pw-a")
	list := `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{` + newMeta + `}}`
	call := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"list_approved_documents","arguments":{},` + newMeta + `}}`
	const v = "2026-07-28"
	for _, h2 := range []bool{false, true} {
		for _, tc := range []struct {
			name, body string
			h          map[string]string
			mismatch   bool
		}{
			{"as sent by a client", list, map[string]string{"Mcp-Protocol-Version": v, "Mcp-Method": "tools/list"}, false},
			{"Mcp-Method with spaces and a tab", list, map[string]string{"Mcp-Protocol-Version": v, "Mcp-Method": "  tools/list \t"}, false},
			{"Mcp-Protocol-Version with spaces", list, map[string]string{"Mcp-Protocol-Version": " " + v + "  ", "Mcp-Method": "tools/list"}, false},
			{"Mcp-Name with spaces", call, map[string]string{"Mcp-Protocol-Version": v, "Mcp-Method": "tools/call", "Mcp-Name": "  list_approved_documents "}, false},
			{"Mcp-Method disagrees", list, map[string]string{"Mcp-Protocol-Version": v, "Mcp-Method": "prompts/list"}, true},
			{"Mcp-Method in capitals", list, map[string]string{"Mcp-Protocol-Version": v, "Mcp-Method": "TOOLS/LIST"}, true},
			{"Mcp-Name disagrees", call, map[string]string{"Mcp-Protocol-Version": v, "Mcp-Method": "tools/call", "Mcp-Name": "read_protected_document"}, true},
			{"Mcp-Protocol-Version older than the body's", list, map[string]string{"Mcp-Protocol-Version": "2025-11-25", "Mcp-Method": "tools/list"}, true},
			{"no Mcp-Protocol-Version though the body names one", list, map[string]string{"Mcp-Method": "tools/list"}, true},
		} {
			status, m := rawMCP(t, hs, h2, tok, tc.body, tc.h)
			var in struct {
				ID    float64 `json:"id"`
				Error *struct {
					Code    int    `json:"code"`
					Message string `json:"message"`
				} `json:"error"`
				Result map[string]any `json:"result"`
			}
			b, _ := json.Marshal(m)
			_ = json.Unmarshal(b, &in)
			what := fmt.Sprintf("HTTP/2 %v, %s: %d %.300s", h2, tc.name, status, b)
			if tc.mismatch {
				if status != http.StatusBadRequest || in.Error == nil || in.Error.Code != -32020 || in.ID == 0 {
					t.Errorf("%s; want 400 with error -32020 for the message's id", what)
				}
				continue
			}
			if status != http.StatusOK || in.Error != nil || in.Result == nil || in.Result["resultType"] != "complete" {
				t.Errorf("%s; want 200 with a complete result", what)
			}
		}
	}
}

// resultOf posts one 2026-07-28 request and returns its result object (the
// test fails on anything else).
func resultOf(t *testing.T, hs *httpStack, tok, method, name, params string) map[string]any {
	t.Helper()
	h := map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": method}
	if name != "" {
		h["Mcp-Name"] = name
	}
	status, m := rawMCP(t, hs, false, tok, `{"jsonrpc":"2.0","id":9,"method":"`+method+`","params":{`+params+newMeta+`}}`, h)
	res, ok := m["result"].(map[string]any)
	if status != http.StatusOK || !ok {
		t.Fatalf("%s: %d %v, want a result", method, status, m)
	}
	return res
}

// TestHTTPToolNotInGrantCarriesResultType: on 2026-07-28 every result
// carries resultType, the refusal the tool gate answers for a tool outside
// the grant too (a client that validates results would otherwise fail
// instead of showing the model why), as a granted tool's result does.
func TestHTTPToolNotInGrantCarriesResultType(t *testing.T) {
	hs := newHTTPStack(t, 4)
	tok := hs.token(t, "alice", "pw-a")
	for _, name := range []string{"no_such_tool", "test_simple_text", "list_approved_documents"} {
		res := resultOf(t, hs, tok, "tools/call", name, `"name":"`+name+`","arguments":{},`)
		if res["resultType"] != "complete" {
			t.Errorf("%s: resultType %v, want complete: %v", name, res["resultType"], res)
		}
		if name == "list_approved_documents" {
			continue
		}
		content, _ := res["content"].([]any)
		b, _ := json.Marshal(content)
		if res["isError"] != true || !strings.Contains(string(b), string(refusal.ToolNotInGrant)) {
			t.Errorf("%s: %v, want the TOOL_NOT_IN_GRANT refusal", name, res)
		}
	}
}

// TestUndeclaredCapabilitiesAreNotAnswered: pdmcp declares tools (and
// logging) only, at initialize and at server/discover; the methods of
// prompts, resources and completion answer -32601 on every revision
// rather than empty lists that contradict the declaration.
func TestUndeclaredCapabilitiesAreNotAnswered(t *testing.T) {
	hs := newHTTPStack(t, 8)
	tok := hs.token(t, "alice", "pw-a")
	disc := resultOf(t, hs, tok, "server/discover", "", "")
	caps, _ := disc["capabilities"].(map[string]any)
	if caps["tools"] == nil {
		t.Errorf("server/discover declares no tools: %v", disc)
	}
	for _, c := range []string{"prompts", "resources", "completions"} {
		if _, ok := caps[c]; ok {
			t.Errorf("server/discover declares %s: %v", c, caps)
		}
	}
	for _, v := range mcp.SupportedProtocolVersions() {
		t.Run(v, func(t *testing.T) {
			cs := hs.dial(t, "caps-"+v, hs.as(tok, nil), nil, &mcp.ClientSessionOptions{ProtocolVersion: v})
			ic := cs.InitializeResult().Capabilities
			if ic.Tools == nil || ic.Prompts != nil || ic.Resources != nil || ic.Completions != nil {
				t.Errorf("initialize declares %+v, want tools only", ic)
			}
			ctx := context.Background()
			for method, call := range map[string]func() error{
				"prompts/list":   func() error { _, err := cs.ListPrompts(ctx, nil); return err },
				"prompts/get":    func() error { _, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "p"}); return err },
				"resources/list": func() error { _, err := cs.ListResources(ctx, nil); return err },
				"resources/templates/list": func() error {
					_, err := cs.ListResourceTemplates(ctx, nil)
					return err
				},
				"resources/read": func() error {
					_, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "file:///etc/passwd"})
					return err
				},
				"completion/complete": func() error {
					_, err := cs.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "p"},
						Argument: mcp.CompleteParamsArgument{Name: "a", Value: "b"}})
					return err
				},
			} {
				var rpc *jsonrpc.Error
				if err := call(); !errors.As(err, &rpc) || rpc.Code != jsonrpc.CodeMethodNotFound {
					t.Errorf("%s answered %v, want JSON-RPC error -32601", method, err)
				}
			}
			if m, isErr := mcptest.Call(t, cs, "list_approved_documents", map[string]any{}); isErr {
				t.Errorf("tools no longer served: %v", m)
			}
		})
	}
}

// TestInstructionsReadAsASentence: the instructions name the task's tools
// as a sentence for a model does ("the tools a, b and c"), not as a Go
// slice, in the order tools/list gives them sorted.
func TestInstructionsReadAsASentence(t *testing.T) {
	hs := newHTTPStack(t, 4)
	cs := hs.connect(t, hs.token(t, "alice", "pw-a"))
	names := mcptest.ToolNames(t, cs)
	if len(names) < 3 {
		t.Fatalf("the grant has %d tools; the test needs three or more", len(names))
	}
	want := "This task may use the tools " + strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1] + ". "
	got := cs.InitializeResult().Instructions
	if !strings.Contains(got, want) || strings.ContainsAny(got, "[]") {
		t.Errorf("instructions %q, want them to say %q", got, want)
	}
}

// TestHTTPUnsupportedProtocolVersion holds SEP-2575's refusal of a revision
// the server does not serve: whatever the header or _meta names (an older
// date, a later one, no date at all, a handshake revision named per
// request), the answer is 400 with UnsupportedProtocolVersionError (-32022)
// for the message's id, listing every revision served, newest first, so a
// client that speaks both eras retries instead of taking this server for
// an old one. Nothing reaches the tool or the Gateway.
func TestHTTPUnsupportedProtocolVersion(t *testing.T) {
	hs := newHTTPStack(t, 4)
	tok := hs.token(t, "alice", "pw-a")
	meta := func(v string) string {
		return `"_meta":{"io.modelcontextprotocol/protocolVersion":"` + v +
			`","io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}`
	}
	read := func(v string) string {
		m := ""
		if v != "" {
			m = "," + meta(v)
		}
		return `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"read_protected_document","arguments":{"documentId":"evaluation-criteria"}` + m + `}}`
	}
	long := strings.Repeat("9", 500)
	supported := mcp.SupportedProtocolVersions()
	before := hs.env.Gateway.Counts()
	for _, tc := range []struct {
		name, header, body, requested string
	}{
		{"an older date in the header, no _meta", "2000-01-01", read(""), "2000-01-01"},
		{"a later date in the header, no _meta", "2099-01-01", read(""), "2099-01-01"},
		{"no date in the header, no _meta", "invalid-protocol-version", read(""), "invalid-protocol-version"},
		{"an older date in both", "2000-01-01", read("2000-01-01"), "2000-01-01"},
		{"a later date in both", "2099-01-01", read("2099-01-01"), "2099-01-01"},
		{"a handshake revision named per request", "2025-11-25", read("2025-11-25"), "2025-11-25"},
		{"a long header, echoed in part", long, read(""), long[:64]},
	} {
		h := map[string]string{"Mcp-Protocol-Version": tc.header, "Mcp-Method": "tools/call", "Mcp-Name": "read_protected_document"}
		status, m := rawMCP(t, hs, false, tok, tc.body, h)
		b, _ := json.Marshal(m)
		var in struct {
			ID    float64 `json:"id"`
			Error *struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
				Data    struct {
					Supported []string `json:"supported"`
					Requested string   `json:"requested"`
				} `json:"data"`
			} `json:"error"`
		}
		_ = json.Unmarshal(b, &in)
		if status != http.StatusBadRequest || in.Error == nil || in.Error.Code != -32022 || in.ID != 7 {
			t.Errorf("%s: %d %.300s; want 400 with error -32022 for id 7", tc.name, status, b)
			continue
		}
		if fmt.Sprint(in.Error.Data.Supported) != fmt.Sprint(supported) || in.Error.Data.Requested != tc.requested {
			t.Errorf("%s: data %+v; want supported %v, requested %q", tc.name, in.Error.Data, supported, tc.requested)
		}
	}
	// A GET (the stream a session opens) is refused the same way, with no id.
	req, _ := http.NewRequest("GET", hs.url, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2000-01-01")
	resp, err := hs.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var get struct {
		ID    any `json:"id"`
		Error struct {
			Code int `json:"code"`
		} `json:"error"`
	}
	if resp.StatusCode != http.StatusBadRequest || json.Unmarshal(body, &get) != nil || get.Error.Code != -32022 || get.ID != nil {
		t.Errorf("GET with an older revision: %d %.300s; want 400 with error -32022 and a null id", resp.StatusCode, body)
	}
	if after := hs.env.Gateway.Counts(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("a refused revision reached the Gateway: %v -> %v", before, after)
	}
	// The revisions served still are.
	status, m := rawMCP(t, hs, false, tok, read(server.NewestProtocol),
		map[string]string{"Mcp-Protocol-Version": server.NewestProtocol, "Mcp-Method": "tools/call", "Mcp-Name": "read_protected_document"})
	if res, _ := m["result"].(map[string]any); status != http.StatusOK || res == nil || res["isError"] == true {
		t.Fatalf("a read over %s after the refusals: %d %v", server.NewestProtocol, status, m)
	}
	hs.stop()
	for _, l := range hs.auditLines(t) {
		if l["tool"] == "read_protected_document" && l["outcome"] != "ok" {
			t.Errorf("a refused revision reached the tool: %v", l)
		}
	}
}
