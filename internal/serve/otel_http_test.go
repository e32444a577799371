package serve_test

import (
	"context"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/serve"
	"github.com/pdmcp/pdmcp/internal/telemetry"
	"github.com/pdmcp/pdmcp/server"
)

// Two traces: the host's, in the MCP request's _meta, and the HTTP
// client's, in the request's own traceparent header.
const (
	metaTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	metaSpanID  = "00f067aa0ba902b7"
	httpTraceID = "0af7651916cd43dd8448eb211c80319c"
	httpSpanID  = "b7ad6b7169203331"
)

func withTracing(exp *tracetest.InMemoryExporter) stackOption {
	return func(t *testing.T, hs *httpStack, _ string, _ *grant.LaunchOptions) {
		hs.tracing = telemetry.WithExporter(exp, telemetry.Config{Enabled: true}, "test")
		t.Cleanup(func() { _ = hs.tracing.Shutdown(context.Background()) })
	}
}

func spanAttr(sp tracetest.SpanStub, key string) (string, bool) {
	for _, a := range sp.Attributes {
		if string(a.Key) == key {
			return a.Value.String(), true
		}
	}
	return "", false
}

// flushed is every span ended so far, once the batcher has handed them on.
func flushed(t *testing.T, hs *httpStack, exp *tracetest.InMemoryExporter) []tracetest.SpanStub {
	t.Helper()
	if err := hs.tracing.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	return exp.GetSpans()
}

// TestHTTPTraceFromHostToKeyServer: a stateless (2026-07-28) read over
// HTTP is one trace from the host's _meta traceparent to the key server:
// the MCP request's SERVER span is the host span's child and links the
// HTTP request's span (itself the child of the HTTP traceparent header);
// the token check is the HTTP span's child; the Gateway requests (the
// caller's mint and the decrypt) are the MCP span's children; the key
// server's decrypt row carries the host's trace id. No span carries the
// access token, a JWT, the document's text, the t-Tag or the subject.
func TestHTTPTraceFromHostToKeyServer(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	hs := newHTTPStack(t, 4, withTracing(exp))
	tok := hs.token(t, "alice", "pw-a")
	meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"},` +
		`"io.modelcontextprotocol/clientCapabilities":{},"traceparent":"00-` + metaTraceID + `-` + metaSpanID + `-01"}`
	call := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"read_protected_document","arguments":{"documentId":"proposal-aurora"},` + meta + `}}`
	status, msg := rawMCP(t, hs, false, tok, call, map[string]string{"Mcp-Protocol-Version": server.NewestProtocol,
		"Mcp-Method": "tools/call", "Mcp-Name": "read_protected_document", "traceparent": "00-" + httpTraceID + "-" + httpSpanID + "-01"})
	if status != 200 || msg == nil {
		t.Fatalf("read: status %d, %v", status, msg)
	}
	res, _ := msg["result"].(map[string]any)
	if res == nil || res["isError"] == true {
		t.Fatalf("read refused: %v", msg)
	}
	text := ""
	if content, _ := res["content"].([]any); len(content) > 0 {
		text, _ = content[0].(map[string]any)["text"].(string)
	}
	spans := flushed(t, hs, exp)

	var mcpSpan, httpSpan tracetest.SpanStub
	for _, sp := range spans {
		switch sp.Name {
		case "tools/call read_protected_document":
			mcpSpan = sp
		case "POST /mcp":
			if sp.SpanContext.TraceID().String() == httpTraceID {
				httpSpan = sp
			}
		}
	}
	if mcpSpan.Name == "" || httpSpan.Name == "" {
		t.Fatalf("spans %v: no MCP or no HTTP span", names(spans))
	}
	if mcpSpan.SpanContext.TraceID().String() != metaTraceID || mcpSpan.Parent.SpanID().String() != metaSpanID {
		t.Errorf("the MCP span is not the host span's child")
	}
	if httpSpan.Parent.SpanID().String() != httpSpanID || httpSpan.SpanKind != trace.SpanKindServer {
		t.Errorf("the HTTP span is not the HTTP client span's SERVER child")
	}
	if len(mcpSpan.Links) != 1 || mcpSpan.Links[0].SpanContext.SpanID() != httpSpan.SpanContext.SpanID() {
		t.Errorf("the MCP span does not link the HTTP span: %+v", mcpSpan.Links)
	}
	for k, want := range map[string]string{server.AttrNetworkTransport: "tcp", server.AttrMCPProtocol: server.NewestProtocol,
		server.AttrToolName: grant.ToolReadProtectedDocument, server.AttrOutcome: "ok", server.AttrDocumentID: "proposal-aurora"} {
		if got, _ := spanAttr(mcpSpan, k); got != want {
			t.Errorf("MCP span %s = %q, want %q", k, got, want)
		}
	}
	if v, ok := spanAttr(mcpSpan, server.AttrMCPSession); ok {
		t.Errorf("a stateless request has a session id %q", v)
	}
	if v, _ := spanAttr(mcpSpan, server.AttrCaller); len(v) != 12 {
		t.Errorf("caller = %q, want a 12-character digest", v)
	}
	if v, _ := spanAttr(httpSpan, "http.response.status_code"); v != "200" {
		t.Errorf("HTTP span status %q", v)
	}
	checked := false
	routes := map[string]bool{}
	byID := map[trace.SpanID]tracetest.SpanStub{}
	for _, sp := range spans {
		byID[sp.SpanContext.SpanID()] = sp
	}
	// under reports whether sp descends from the MCP span.
	under := func(sp tracetest.SpanStub) bool {
		for i := 0; i < 10 && sp.Parent.IsValid(); i++ {
			if sp.Parent.SpanID() == mcpSpan.SpanContext.SpanID() {
				return true
			}
			sp = byID[sp.Parent.SpanID()]
		}
		return false
	}
	steps := map[string]bool{}
	for _, sp := range spans {
		if sp.Name == serve.SpanTokenCheck && sp.Parent.SpanID() == httpSpan.SpanContext.SpanID() {
			checked = true
		}
		if !under(sp) {
			continue
		}
		steps[sp.Name] = true
		if r, ok := spanAttr(sp, gateway.AttrGatewayRoute); ok {
			routes[r] = true
		}
	}
	if !checked {
		t.Error("no token check span under the HTTP span")
	}
	if !routes[api.RouteDecrypt] || !routes[api.RouteScoped] {
		t.Errorf("Gateway spans under the call: %v; want the mint and the decrypt", routes)
	}
	for _, name := range []string{gateway.SpanPoolSubject, gateway.SpanPoolPlace, gateway.SpanPoolMint, server.SpanTokenExchange} {
		if !steps[name] {
			t.Errorf("no %s span under the call: %v", name, steps)
		}
	}

	rows, err := hs.env.Gateway.KeyServerAudit(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	joined := false
	for _, r := range rows {
		if r.Operation == "decrypt" && r.TraceID == metaTraceID {
			joined = true
		}
	}
	if !joined {
		t.Error("no key-server decrypt row carries the host's trace id")
	}

	forbidden := []string{tok, "eyJ", "alice"}
	if len(text) > 40 {
		// The document's text, framed by the read: a run from its middle.
		forbidden = append(forbidden, text[len(text)/2:len(text)/2+20])
	}
	m, err := grant.LoadManifest(hs.manifst)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range m.Documents {
		forbidden = append(forbidden, d.TTag)
	}
	for _, sp := range spans {
		vals := []string{sp.Name, sp.Status.Description}
		for _, a := range sp.Attributes {
			vals = append(vals, a.Value.String())
		}
		for _, v := range vals {
			for _, bad := range forbidden {
				if bad != "" && strings.Contains(v, bad) {
					t.Errorf("span %q carries a forbidden value (%.8q…)", sp.Name, bad)
				}
			}
		}
	}
}

// TestHTTPSessionSpansNameTheSessionByDigest: a request in an MCP session
// (2025-11-25) names it by digest, never the Mcp-Session-Id itself; a
// refused token is a token check span with its class, under a 401.
func TestHTTPSessionSpansNameTheSessionByDigest(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	hs := newHTTPStack(t, 4, withTracing(exp))
	cs := hs.dial(t, "session-host", hs.as(hs.token(t, "bob", "pw-b"), nil), nil, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: grant.ToolListApprovedDocuments, Arguments: map[string]any{}}); err != nil {
		t.Fatal(err)
	}
	var list tracetest.SpanStub
	for _, sp := range flushed(t, hs, exp) {
		if sp.Name == "tools/call "+grant.ToolListApprovedDocuments {
			list = sp
		}
	}
	sid, ok := spanAttr(list, server.AttrMCPSession)
	if cs.ID() == "" || !ok || len(sid) != 12 || strings.Contains(cs.ID(), sid) {
		t.Fatalf("session attribute %q for session %q", sid, cs.ID())
	}

	// A notification without params (the TypeScript SDK sends
	// notifications/initialized so) is traced, and the server goes on.
	tok := hs.token(t, "alice", "pw-a")
	rawSID := hs.initialize(t, tok)
	if resp := hs.rpc(t, tok, rawSID, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); resp.StatusCode != 202 {
		t.Fatalf("notifications/initialized without params: %d", resp.StatusCode)
	}
	if resp := hs.rpc(t, tok, rawSID, `{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}`); resp.StatusCode != 200 {
		t.Fatalf("tools/list after it: %d", resp.StatusCode)
	}
	seen := false
	for _, sp := range flushed(t, hs, exp) {
		seen = seen || sp.Name == "notifications/initialized"
	}
	if !seen {
		t.Error("no span for notifications/initialized")
	}

	exp.Reset()
	resp, _ := hs.post(t, "not-a-token", "", "2025-11-25", initBody)
	if resp.StatusCode != 401 {
		t.Fatalf("a bad token: %d", resp.StatusCode)
	}
	var check, req tracetest.SpanStub
	for _, sp := range flushed(t, hs, exp) {
		switch sp.Name {
		case serve.SpanTokenCheck:
			check = sp
		case "POST /mcp":
			req = sp
		}
	}
	if c, _ := spanAttr(check, serve.AttrAuthClass); c == "" {
		t.Errorf("the token check span has no class: %v", check.Attributes)
	}
	if s, _ := spanAttr(req, "http.response.status_code"); s != "401" {
		t.Errorf("the refused request's span: status %q", s)
	}
}

func names(spans []tracetest.SpanStub) []string {
	var out []string
	for _, sp := range spans {
		out = append(out, sp.Name)
	}
	return out
}

// TestHTTPSpansCarryTheJSONRPCRequestID: over HTTP, without a session
// (2026-07-28) and in one (2025-11-25), each request's MCP span carries the
// id the client sent, a string one as it is and a number one in decimal; a
// notification's carries none, and a client cannot set it by sending the
// header pdmcp passes it in.
func TestHTTPSpansCarryTheJSONRPCRequestID(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	hs := newHTTPStack(t, 4, withTracing(exp))
	tok := hs.token(t, "alice", "pw-a")
	forged := map[string]string{server.RequestIDHeader: "forged"}
	modern := func(id, method, params string) {
		t.Helper()
		h := map[string]string{"Mcp-Protocol-Version": server.NewestProtocol, "Mcp-Method": method}
		for k, v := range forged {
			h[k] = v
		}
		body := `{"jsonrpc":"2.0","id":` + id + `,"method":"` + method + `","params":{` + params + newMeta + `}}`
		if status, msg := rawMCP(t, hs, false, tok, body, h); status != 200 || msg["error"] != nil {
			t.Fatalf("%s: status %d, %v", method, status, msg)
		}
	}
	modern(`"stateless-1"`, "tools/list", "")
	modern(`17`, "tools/list", "")

	sid := hs.initialize(t, tok)
	session := func(body string, want int) {
		t.Helper()
		status, _ := rawMCP(t, hs, false, tok, body, map[string]string{"Mcp-Protocol-Version": "2025-11-25",
			"Mcp-Session-Id": sid, server.RequestIDHeader: "forged"})
		if status != want {
			t.Fatalf("%s: status %d, want %d", body, status, want)
		}
	}
	session(`{"jsonrpc":"2.0","method":"notifications/initialized","params":{}}`, 202)
	session(`{"jsonrpc":"2.0","id":"in session","method":"tools/list","params":{}}`, 200)
	session(`{"jsonrpc":"2.0","id":23,"method":"tools/list","params":{}}`, 200)

	ids := map[string]string{}
	notified := false
	for _, sp := range flushed(t, hs, exp) {
		id, has := spanAttr(sp, server.AttrJSONRPCRequestID)
		switch sp.Name {
		case "tools/list", "initialize":
			proto, _ := spanAttr(sp, server.AttrMCPProtocol)
			if !has {
				t.Errorf("a %s span (%s) has no %s", sp.Name, proto, server.AttrJSONRPCRequestID)
			}
			ids[id] = proto
		case "notifications/initialized":
			notified = true
			if has {
				t.Errorf("the notification's span has %s %q", server.AttrJSONRPCRequestID, id)
			}
		}
	}
	for id, proto := range map[string]string{"stateless-1": server.NewestProtocol, "17": server.NewestProtocol,
		"1": "", "in session": "2025-11-25", "23": "2025-11-25"} { // initialize's "1": no revision yet
		if got, ok := ids[id]; !ok || got != proto {
			t.Errorf("no span of revision %q with id %q (ids seen: %v)", proto, id, ids)
		}
	}
	if _, ok := ids["forged"]; ok || !notified {
		t.Errorf("ids %v, notification traced %v", ids, notified)
	}
}
