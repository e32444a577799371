package serve_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/serve"
	"github.com/pdmcp/pdmcp/internal/telemetry"
	"github.com/pdmcp/pdmcp/internal/testutil"
	"github.com/pdmcp/pdmcp/server"
)

// TestStdioRequestIDsAndOperationMetric: through serve.Run over stdio with
// tracing on, each request's span carries the JSON-RPC id the host sent (a
// string one and a number one), and /metrics counts the call under
// network_transport="pipe".
func TestStdioRequestIDsAndOperationMetric(t *testing.T) {
	ctx := context.Background()
	f := newSeededFolder(t)
	grantPath := filepath.Join(f.data, "grant.json")
	if _, err := grant.Launch(grant.LaunchOptions{ManifestPath: f.manifest, AllApproved: true, LocalUser: f.rec.AgentUser,
		TTL: time.Hour, Out: grantPath}); err != nil {
		t.Fatal(err)
	}
	exp := tracetest.NewInMemoryExporter()
	tr := telemetry.WithExporter(exp, telemetry.Config{Enabled: true}, "test")
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	ct, st := mcp.NewInMemoryTransports()
	opsURL := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- serve.Run(ctx, serve.Options{ConfigPath: f.cfgPath, ManifestPath: f.manifest, GrantPath: grantPath,
			AuditPath: filepath.Join(f.dir, "audit.jsonl"), StdioTransport: st, Tracing: tr,
			OpsAddr: "127.0.0.1:0", OpsReady: func(u string) { opsURL <- u },
			Logger: slog.New(slog.NewTextHandler(&testutil.LogBuffer{}, nil))})
	}()
	conn, err := ct.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	initID, _ := jsonrpc.MakeID("stdio init")
	callID, _ := jsonrpc.MakeID(float64(77))
	for _, m := range []*jsonrpc.Request{
		{ID: initID, Method: "initialize",
			Params: []byte(`{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}`)},
		{Method: "notifications/initialized", Params: []byte(`{}`)},
		{ID: callID, Method: "tools/call",
			Params: []byte(`{"name":"` + grant.ToolReadProtectedDocument + `","arguments":{"documentId":"proposal-aurora"}}`)},
	} {
		if err := conn.Write(ctx, m); err != nil {
			t.Fatal(err)
		}
		if !m.IsCall() {
			continue
		}
		msg, err := conn.Read(ctx)
		if resp, ok := msg.(*jsonrpc.Response); err != nil || !ok || resp.ID != m.ID || resp.Error != nil {
			t.Fatalf("%s: answer %#v, %v", m.Method, msg, err)
		}
	}
	u := <-opsURL
	resp, err := http.Get(u + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	conn.Close()
	if err := <-done; err != nil {
		t.Fatalf("serve.Run: %v", err)
	}

	if err := tr.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	for _, sp := range exp.GetSpans() {
		if id, ok := spanAttr(sp, server.AttrJSONRPCRequestID); ok {
			ids[sp.Name] = id
		}
	}
	if ids["initialize"] != "stdio init" || ids["tools/call "+grant.ToolReadProtectedDocument] != "77" {
		t.Errorf("span ids %v, want initialize's %q and the call's 77", ids, "stdio init")
	}
	if _, ok := ids["notifications/initialized"]; ok {
		t.Error("the notification's span has an id")
	}
	want := `mcp_server_operation_duration_seconds_count{error_type="",gen_ai_tool_name="` + grant.ToolReadProtectedDocument +
		`",mcp_method_name="tools/call",mcp_protocol_version="2025-11-25",network_transport="pipe"} 1`
	if !strings.Contains(string(metrics), want) {
		t.Errorf("/metrics has no %s", want)
	}
}
