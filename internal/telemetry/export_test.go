package telemetry

import (
	"context"
	"errors"
	"sort"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// uploads keeps what an exporter hands its OTLP client.
type uploads struct {
	got     [][]*tracepb.ResourceSpans
	err     error
	stopped int
	discard bool // keep nothing (benchmarks)
}

func (u *uploads) Start(context.Context) error { return nil }
func (u *uploads) Stop(context.Context) error  { u.stopped++; return nil }
func (u *uploads) UploadTraces(_ context.Context, rs []*tracepb.ResourceSpans) error {
	if !u.discard {
		u.got = append(u.got, rs)
	}
	return u.err
}

// recorded is a batch of spans of every shape pdmcp's spans take and then
// some: two resources, two scopes, every attribute type, events, links,
// statuses, remote and local parents, a trace state.
func recorded(t *testing.T) []sdktrace.ReadOnlySpan {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	var spans []sdktrace.ReadOnlySpan
	for _, svc := range []string{"pdmcp", "other"} {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec),
			sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", svc), attribute.Int("n", 3))))
		ts, _ := trace.ParseTraceState("vendor=v1")
		remote := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{9, 9}, SpanID: trace.SpanID{7},
			TraceFlags: trace.FlagsSampled, TraceState: ts, Remote: true})
		ctx := trace.ContextWithRemoteSpanContext(context.Background(), remote)
		ctx, root := tp.Tracer(InstrumentationName, trace.WithInstrumentationVersion("1.2")).Start(ctx, "POST /mcp",
			trace.WithSpanKind(trace.SpanKindServer),
			trace.WithLinks(trace.Link{SpanContext: remote, Attributes: []attribute.KeyValue{attribute.String("l", "x")}}))
		root.SetAttributes(attribute.String("s", "v"), attribute.Int("i", -4), attribute.Bool("b", true),
			attribute.Float64("f", 1.5), attribute.StringSlice("ss", []string{"a", "b"}), attribute.IntSlice("is", []int{1, 2}),
			attribute.BoolSlice("bs", []bool{true}), attribute.Float64Slice("fs", []float64{2.5}), attribute.String("s", "again"))
		root.AddEvent("pdmcp.pool.wait", trace.WithAttributes(attribute.Int("w", 1)))
		root.AddEvent("bare")
		_, child := tp.Tracer("other/scope", trace.WithInstrumentationAttributes(attribute.String("k", "v"))).Start(ctx, "child",
			trace.WithSpanKind(trace.SpanKindClient))
		child.SetStatus(codes.Error, "REFUSED")
		child.End()
		_, ok := tp.Tracer(InstrumentationName, trace.WithInstrumentationVersion("1.2")).Start(ctx, "ok")
		ok.SetStatus(codes.Ok, "")
		ok.End()
		root.End()
		spans = append(spans, rec.Ended()...)
		rec.Reset()
	}
	spans = append(spans, nil)
	return spans
}

// protoSpans makes the very messages otlptrace's own transform makes.
func TestProtoSpansAsOtlptraceMakesThem(t *testing.T) {
	spans := recorded(t)
	theirs := &uploads{}
	if err := otlptrace.NewUnstarted(theirs).ExportSpans(context.Background(), spans); err != nil {
		t.Fatal(err)
	}
	ours := &uploads{}
	exp, err := newOTLPExporter(context.Background(), ours)
	if err != nil {
		t.Fatal(err)
	}
	if err := exp.ExportSpans(context.Background(), spans); err != nil {
		t.Fatal(err)
	}
	if len(theirs.got) != 1 || len(ours.got) != 1 {
		t.Fatalf("uploads: otlptrace %d, ours %d, want 1 each", len(theirs.got), len(ours.got))
	}
	want, got := theirs.got[0], ours.got[0]
	// otlptrace orders the resources by a map's iteration.
	byService := func(rs []*tracepb.ResourceSpans) {
		sort.Slice(rs, func(i, j int) bool {
			return rs[i].GetResource().String() < rs[j].GetResource().String()
		})
	}
	byService(want)
	byService(got)
	if len(got) != 2 || len(want) != len(got) {
		t.Fatalf("%d resources, otlptrace %d", len(got), len(want))
	}
	for i := range want {
		if !proto.Equal(want[i], got[i]) {
			t.Errorf("resource %d:\n got %v\nwant %v", i, got[i], want[i])
		}
	}
	if err := exp.ExportSpans(context.Background(), nil); err != nil || len(ours.got) != 1 {
		t.Errorf("no spans: err %v, %d uploads, want nothing sent", err, len(ours.got))
	}
	ours.err = errors.New("collector down")
	if err := exp.ExportSpans(context.Background(), spans); err == nil || err.Error() != "traces export: collector down" {
		t.Errorf("a failed upload: %v", err)
	}
	for range 2 {
		if err := exp.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if ours.stopped != 1 {
		t.Errorf("client stopped %d times, want once", ours.stopped)
	}
}

// readSpans is a batch of n traced reads' spans as pdmcp makes them: the
// HTTP span, the token check, the MCP tools/call span and the Gateway
// request's, with their attributes (the values are made up).
func readSpans(n int) []sdktrace.ReadOnlySpan {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", "pdmcp"), attribute.String("service.version", "dev"))))
	tr := tp.Tracer(InstrumentationName)
	for range n {
		ctx, h := tr.Start(context.Background(), "POST /mcp", trace.WithSpanKind(trace.SpanKindServer))
		_, tc := tr.Start(ctx, "pdmcp.token_check")
		tc.End()
		ctx, m := tr.Start(ctx, "tools/call read_protected_document", trace.WithSpanKind(trace.SpanKindServer))
		m.SetAttributes(attribute.String("mcp.method.name", "tools/call"), attribute.String("network.transport", "tcp"),
			attribute.String("network.protocol.name", "http"), attribute.String("gen_ai.operation.name", "execute_tool"),
			attribute.String("gen_ai.tool.name", "read_protected_document"), attribute.String("mcp.protocol.version", "2025-11-25"),
			attribute.String("jsonrpc.request.id", "12"), attribute.String("mcp.session.id", "0123456789ab"),
			attribute.String("pdmcp.caller", "ba9876543210"))
		_, g := tr.Start(ctx, "POST /api/v1/crypto/decrypt", trace.WithSpanKind(trace.SpanKindClient))
		g.SetAttributes(attribute.String("http.request.method", "POST"), attribute.String("url.template", "/api/v1/crypto/decrypt"),
			attribute.String("pdmcp.gateway.route", "/api/v1/crypto/decrypt"), attribute.String("server.address", "127.0.0.1"),
			attribute.Int("server.port", 8443), attribute.Int("http.response.status_code", 200))
		g.End()
		m.SetAttributes(attribute.String("pdmcp.outcome", "OK"), attribute.Int("pdmcp.gateway.requests", 1),
			attribute.String("pdmcp.document.id", "doc-1"), attribute.Int("pdmcp.version", 1))
		m.End()
		h.SetAttributes(attribute.String("http.request.method", "POST"), attribute.String("http.route", "/mcp"),
			attribute.String("url.path", "/mcp"), attribute.String("url.scheme", "https"), attribute.String("network.transport", "tcp"),
			attribute.Int("http.response.status_code", 200))
		h.End()
	}
	return rec.Ended()
}

// BenchmarkExport: a batch of 128 traced reads' spans (512, the batch
// processor's default batch) through otlptrace's transform and through
// protoSpans; the upload is dropped. Per op is per batch.
func BenchmarkExport(b *testing.B) {
	spans := readSpans(128)
	for _, tc := range []struct {
		name string
		exp  sdktrace.SpanExporter
	}{
		{"otlptrace", otlptrace.NewUnstarted(&uploads{discard: true})},
		{"protoSpans", &otlpExporter{client: &uploads{discard: true}}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := tc.exp.ExportSpans(context.Background(), spans); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
