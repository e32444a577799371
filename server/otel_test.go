package server_test

import (
	"context"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/mcptest"
	"github.com/pdmcp/pdmcp/server"
	"github.com/pdmcp/pdmcp/server/journal"
)

// The host's trace, as a traceparent in _meta names it.
const (
	hostTraceID  = "4bf92f3577b34da6a3ce929d0e0e4736"
	hostSpanID   = "00f067aa0ba902b7"
	hostParent   = "00-" + hostTraceID + "-" + hostSpanID + "-01"
	secretMarker = "never-in-a-span"
)

func attrOf(sp tracetest.SpanStub, key string) (string, bool) {
	for _, a := range sp.Attributes {
		if string(a.Key) == key {
			return a.Value.String(), true
		}
	}
	return "", false
}

// tracedFixture is newFixture with an in-memory span exporter on the
// server and its Gateway client.
func tracedFixture(t *testing.T) (*fixture, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	docs := append([]doc{{id: "secret", contentType: "text/plain", text: []byte("synthetic " + secretMarker + " text"),
		approved: true, inGrant: true}}, basicDocs...)
	f := newFixture(t, docs, nil, func(c *server.Config) { c.Tracer = tp.Tracer("test"); c.Transport = "stdio" })
	return f, exp
}

func callWithMeta(t *testing.T, f *fixture, meta mcp.Meta, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	res, err := f.cs.CallTool(context.Background(), &mcp.CallToolParams{Meta: meta, Name: name, Arguments: args})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestToolCallSpans: each MCP request is a SERVER span named by method and
// tool, under the trace context of its _meta, with the MCP conventions'
// attributes; its Gateway requests are its children; a refusal is
// error.type tool_error with its layer and code and no error status; a
// tool name the build does not know never names a span.
func TestToolCallSpans(t *testing.T) {
	f, exp := tracedFixture(t)
	meta := mcp.Meta{"traceparent": hostParent, "tracestate": "host=1", "baggage": "k=v"}

	res := callWithMeta(t, f, meta, grant.ToolReadProtectedDocument, map[string]any{"documentId": "secret"})
	if res.IsError {
		t.Fatalf("read refused: %+v", res.Content)
	}
	spans := exp.GetSpans()
	var call tracetest.SpanStub
	for _, sp := range spans {
		if sp.Name == "tools/call "+grant.ToolReadProtectedDocument {
			call = sp
		}
	}
	if call.Name == "" {
		t.Fatalf("no tools/call span among %d", len(spans))
	}
	if call.SpanKind != trace.SpanKindServer || call.SpanContext.TraceID().String() != hostTraceID ||
		call.Parent.SpanID().String() != hostSpanID || !call.Parent.IsRemote() {
		t.Fatalf("the call's span is not a SERVER child of the host's: kind %v trace %s parent %s",
			call.SpanKind, call.SpanContext.TraceID(), call.Parent.SpanID())
	}
	if call.Parent.TraceState().Get("host") != "1" {
		t.Errorf("tracestate lost: %q", call.Parent.TraceState().String())
	}
	for k, want := range map[string]string{
		server.AttrMCPMethod: "tools/call", server.AttrToolName: grant.ToolReadProtectedDocument,
		server.AttrOperationName: "execute_tool", server.AttrNetworkTransport: "pipe",
		server.AttrOutcome: "ok", server.AttrDocumentID: "secret",
	} {
		if got, _ := attrOf(call, k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	if v, ok := attrOf(call, server.AttrMCPProtocol); !ok || v == "" {
		t.Errorf("no %s", server.AttrMCPProtocol)
	}
	// stdio has no session id (HTTP's is checked in internal/serve).
	if v, ok := attrOf(call, server.AttrMCPSession); ok {
		t.Errorf("a stdio request has %s %q", server.AttrMCPSession, v)
	}
	if _, ok := attrOf(call, server.AttrErrorType); ok || call.Status.Code == codes.Error {
		t.Errorf("a good call is marked an error")
	}
	// The call's audit line joins its span (audit.Trace).
	joined := false
	for _, l := range mcptest.AuditLines(t, f.auditLog) {
		if l["documentId"] == "secret" && l["traceId"] == hostTraceID && l["spanId"] == call.SpanContext.SpanID().String() {
			joined = true
		}
	}
	if !joined {
		t.Error("the read's audit line does not name its span")
	}
	decrypts := 0
	for _, sp := range spans {
		if r, _ := attrOf(sp, gateway.AttrGatewayRoute); r == api.RouteDecrypt {
			decrypts++
			if sp.Parent.SpanID() != call.SpanContext.SpanID() || sp.SpanContext.TraceID() != call.SpanContext.TraceID() {
				t.Errorf("the decrypt's span is not the call's child")
			}
		}
	}
	if decrypts != 1 {
		t.Errorf("%d decrypt spans, want 1", decrypts)
	}

	exp.Reset()
	res = callWithMeta(t, f, nil, grant.ToolReadProtectedDocument, map[string]any{"documentId": "other"})
	if !res.IsError {
		t.Fatal("a read of a document outside the grant was not refused")
	}
	refused := exp.GetSpans()
	if len(refused) != 1 {
		t.Fatalf("refused call: %d spans, want 1 (it sent nothing)", len(refused))
	}
	r := refused[0]
	if r.Parent.IsValid() {
		t.Errorf("a call without trace context has a parent")
	}
	for k, want := range map[string]string{server.AttrErrorType: server.ErrorTypeTool, server.AttrLayer: "adapter",
		server.AttrCode: "DOCUMENT_NOT_IN_GRANT", server.AttrOutcome: "refused"} {
		if got, _ := attrOf(r, k); got != want {
			t.Errorf("refused: %s = %q, want %q", k, got, want)
		}
	}
	if r.Status.Code == codes.Error {
		t.Error("a refusal's span has status ERROR")
	}

	exp.Reset()
	made := "made_up_" + secretMarker
	res = callWithMeta(t, f, mcp.Meta{"traceparent": hostParent}, made, map[string]any{"x": secretMarker})
	if !res.IsError {
		t.Fatal("an unknown tool was not refused")
	}
	for _, sp := range exp.GetSpans() {
		if sp.Name != "tools/call" {
			t.Errorf("an unknown tool's span is named %q", sp.Name)
		}
		if _, ok := attrOf(sp, server.AttrToolName); ok {
			t.Error("an unknown tool's name is recorded")
		}
	}

	exp.Reset()
	if _, err := f.cs.ListTools(context.Background(), &mcp.ListToolsParams{Meta: mcp.Meta{"traceparent": hostParent}}); err != nil {
		t.Fatal(err)
	}
	if got := exp.GetSpans(); len(got) != 1 || got[0].Name != "tools/list" || got[0].Parent.SpanID().String() != hostSpanID {
		t.Fatalf("tools/list spans: %+v", got)
	}
}

// TestSpansCarryNoForbiddenValue scans every attribute, event and status
// of every span of a read, a refused read, a save and a failed request
// for the fixture's texts, t-Tags, argument values and principal names.
func TestSpansCarryNoForbiddenValue(t *testing.T) {
	f, exp := tracedFixture(t)
	meta := mcp.Meta{"traceparent": hostParent}
	callWithMeta(t, f, meta, grant.ToolReadProtectedDocument, map[string]any{"documentId": "secret"})
	callWithMeta(t, f, meta, grant.ToolReadProtectedDocument, map[string]any{"documentId": "other", "extra": secretMarker})
	callWithMeta(t, f, meta, grant.ToolSaveProtectedResult, map[string]any{"destinationId": "summary",
		"text": "saved " + secretMarker, "idempotencyKey": "idem-" + secretMarker})
	m, err := grant.LoadManifest(f.manifest)
	if err != nil {
		t.Fatal(err)
	}
	forbidden := []string{secretMarker, "plain synthetic notes"}
	// Whom the calls acted as, and the session's holder key, as the audit
	// lines name them: neither may be in a span.
	acting := 0
	for _, l := range mcptest.AuditLines(t, f.auditLog) {
		for _, k := range []string{"actingAs", "jkt"} {
			if v, _ := l[k].(string); v != "" {
				forbidden = append(forbidden, v)
				acting++
			}
		}
	}
	if acting == 0 {
		t.Fatal("no audit line names whom a call acted as")
	}
	for _, d := range m.Documents {
		forbidden = append(forbidden, d.TTag)
	}
	for _, d := range m.Destinations {
		if d.TTag != "" {
			forbidden = append(forbidden, d.TTag)
		}
	}
	spans := exp.GetSpans()
	if len(spans) < 3 {
		t.Fatalf("%d spans", len(spans))
	}
	for _, sp := range spans {
		var values []string
		values = append(values, sp.Name, sp.Status.Description)
		for _, a := range sp.Attributes {
			values = append(values, a.Value.String())
		}
		for _, ev := range sp.Events {
			values = append(values, ev.Name)
			for _, a := range ev.Attributes {
				values = append(values, a.Value.String())
			}
		}
		for _, l := range sp.Links {
			for _, a := range l.Attributes {
				values = append(values, a.Value.String())
			}
		}
		for _, v := range values {
			for _, bad := range forbidden {
				if strings.Contains(v, bad) {
					t.Errorf("span %q carries a forbidden value (%q)", sp.Name, bad)
				}
			}
		}
	}
}

// TestSaveSpans: a save's journal transactions and its file steps (write,
// link, sync) are spans under the call's span.
func TestSaveSpans(t *testing.T) {
	f, exp := tracedFixture(t)
	res := callWithMeta(t, f, mcp.Meta{"traceparent": hostParent}, grant.ToolSaveProtectedResult,
		map[string]any{"destinationId": "summary", "text": "a synthetic summary", "idempotencyKey": "k1"})
	if res.IsError {
		t.Fatalf("save refused: %+v", res.Content)
	}
	spans := exp.GetSpans()
	var save tracetest.SpanStub
	for _, sp := range spans {
		if sp.Name == "tools/call "+grant.ToolSaveProtectedResult {
			save = sp
		}
	}
	if save.Name == "" {
		t.Fatalf("no save span among %d", len(spans))
	}
	under := map[string]int{}
	for _, sp := range spans {
		if sp.SpanContext.TraceID() == save.SpanContext.TraceID() && sp.Parent.SpanID() == save.SpanContext.SpanID() {
			under[sp.Name]++
		}
	}
	for _, name := range []string{journal.SpanTransaction, server.SpanFileWrite, server.SpanFileLink, server.SpanFileSync, "POST " + api.RouteEncrypt} {
		if under[name] == 0 {
			t.Errorf("no %s span under the save: %v", name, under)
		}
	}
}

// rawExchange sends each message on a raw connection to f's server, run on
// the transport serve runs it on (Server.Transport), and waits for the
// answer to each call.
func rawExchange(t *testing.T, f *fixture, msgs ...*jsonrpc.Request) {
	t.Helper()
	ctx := context.Background()
	ct, st := mcp.NewInMemoryTransports()
	ss, err := f.srv.MCP().Connect(ctx, f.srv.Transport(st), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	conn, err := ct.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	for _, m := range msgs {
		if err := conn.Write(ctx, m); err != nil {
			t.Fatal(err)
		}
		if !m.IsCall() {
			continue
		}
		msg, err := conn.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		resp, ok := msg.(*jsonrpc.Response)
		if !ok || resp.ID != m.ID || resp.Error != nil {
			t.Fatalf("%s: answer %#v", m.Method, msg)
		}
	}
}

func rpcID(t *testing.T, v any) jsonrpc.ID {
	t.Helper()
	id, err := jsonrpc.MakeID(v)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestSpansCarryTheJSONRPCRequestID: over stdio, in a session (2025-11-25)
// and without one (2026-07-28), each request's span carries the id the
// client sent, a string one as it is and a number one in decimal; a
// notification's carries none.
func TestSpansCarryTheJSONRPCRequestID(t *testing.T) {
	f, exp := tracedFixture(t)
	rawExchange(t, f,
		&jsonrpc.Request{ID: rpcID(t, "init-é 1"), Method: "initialize",
			Params: []byte(`{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}`)},
		&jsonrpc.Request{Method: "notifications/initialized", Params: []byte(`{}`)},
		&jsonrpc.Request{ID: rpcID(t, float64(42)), Method: "tools/list", Params: []byte(`{}`)})
	modern := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}`
	rawExchange(t, f,
		&jsonrpc.Request{ID: rpcID(t, "s-7"), Method: "tools/list", Params: []byte(`{` + modern + `}`)},
		&jsonrpc.Request{ID: rpcID(t, float64(9)), Method: "tools/call",
			Params: []byte(`{"name":"` + grant.ToolListApprovedDocuments + `","arguments":{},` + modern + `}`)})

	type want struct{ protocol, id string }
	wants := map[string]want{
		"initialize":                                    {"", "init-é 1"},
		"notifications/initialized":                     {"2025-11-25", ""},
		"tools/list 2025-11-25":                         {"2025-11-25", "42"},
		"tools/list 2026-07-28":                         {"2026-07-28", "s-7"},
		"tools/call " + grant.ToolListApprovedDocuments: {"2026-07-28", "9"},
	}
	seen := map[string]bool{}
	for _, sp := range exp.GetSpans() {
		key := sp.Name
		proto, _ := attrOf(sp, server.AttrMCPProtocol)
		if sp.Name == "tools/list" {
			key += " " + proto
		}
		w, ok := wants[key]
		if !ok {
			continue
		}
		seen[key] = true
		if w.protocol != "" && proto != w.protocol {
			t.Errorf("%s: protocol %q, want %q", key, proto, w.protocol)
		}
		got, has := attrOf(sp, server.AttrJSONRPCRequestID)
		if got != w.id || has != (w.id != "") {
			t.Errorf("%s: %s = %q (present %v), want %q", key, server.AttrJSONRPCRequestID, got, has, w.id)
		}
	}
	for key := range wants {
		if !seen[key] {
			t.Errorf("no span for %s", key)
		}
	}
}

// TestTransportKeepsTheRevisionsItServes: the traced transport still says
// which protocol revisions the wrapped one serves (server/discover lists
// them), and an untraced server's is the transport itself.
func TestTransportKeepsTheRevisionsItServes(t *testing.T) {
	f, _ := tracedFixture(t)
	inner := &mcp.StreamableServerTransport{}
	v, ok := f.srv.Transport(inner).(mcp.ProtocolVersionSupporter)
	if !ok {
		t.Fatal("the traced transport hides the revisions the wrapped one serves")
	}
	for _, rev := range []string{"2025-11-25", server.NewestProtocol, "1999-01-01"} {
		if v.SupportsProtocolVersion(rev) != inner.SupportsProtocolVersion(rev) {
			t.Errorf("%s: traced transport says %v, the wrapped one %v", rev, v.SupportsProtocolVersion(rev), inner.SupportsProtocolVersion(rev))
		}
	}
	plain := newFixture(t, basicDocs, nil)
	if got := plain.srv.Transport(inner); got != mcp.Transport(inner) {
		t.Errorf("an untraced server wraps its transport: %T", got)
	}
}
