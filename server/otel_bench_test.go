package server

import (
	"context"
	"net/http"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/telemetry"
)

// BenchmarkTraceRequests: what the MCP span's middleware adds to one
// tools/call as the serving edge hands it on (its traceparent and
// JSON-RPC id in the header, a caller, a 2026-07-28 _meta), against the
// same call without it (untraced), in the same run. No span processor:
// the export is BenchmarkExport's (package telemetry).
func BenchmarkTraceRequests(b *testing.B) {
	tp := sdktrace.NewTracerProvider()
	s := &Server{cfg: Config{Tracer: tp.Tracer(telemetry.InstrumentationName), Transport: "http"}}
	next := func(context.Context, string, mcp.Request) (mcp.Result, error) { return &mcp.CallToolResult{}, nil }
	header := http.Header{"Traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}, RequestIDHeader: {"12"}}
	req := &mcp.ServerRequest[*mcp.CallToolParamsRaw]{
		Params: &mcp.CallToolParamsRaw{Name: grant.ToolReadProtectedDocument, Meta: mcp.Meta{mcp.MetaKeyProtocolVersion: "2026-07-28"}},
		Extra:  &mcp.RequestExtra{Header: header, TokenInfo: &auth.TokenInfo{UserID: "alice"}},
	}
	for _, tc := range []struct {
		name string
		h    mcp.MethodHandler
	}{{"untraced", next}, {"traced", s.traceRequests(next)}} {
		b.Run(tc.name, func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tc.h(ctx, "tools/call", req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
