package telemetry

import (
	"context"
	"net/http"
	"slices"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// HeaderCarrier reads and writes what propagation.HeaderCarrier does,
// whatever the key's case, and the trace context's keys cost nothing.
func TestHeaderCarrierMatchesOtels(t *testing.T) {
	for _, key := range []string{"traceparent", "Traceparent", "tracestate", "baggage", "x-other", "X-Other"} {
		t.Run(key, func(t *testing.T) {
			ours, theirs := http.Header{}, http.Header{}
			HeaderCarrier(ours).Set(key, "v1")
			propagation.HeaderCarrier(theirs).Set(key, "v1")
			if !equalHeaders(ours, theirs) {
				t.Fatalf("Set(%q): %v, otel's %v", key, ours, theirs)
			}
			ours.Add(key, "v2")
			theirs.Add(key, "v2")
			if g, w := HeaderCarrier(ours).Get(key), propagation.HeaderCarrier(theirs).Get(key); g != w {
				t.Errorf("Get(%q) = %q, otel's %q", key, g, w)
			}
			if g, w := HeaderCarrier(ours).Values(key), propagation.HeaderCarrier(theirs).Values(key); !slices.Equal(g, w) {
				t.Errorf("Values(%q) = %q, otel's %q", key, g, w)
			}
			if g := HeaderCarrier(ours).Get(key + "-absent"); g != "" {
				t.Errorf("Get of an absent key = %q", g)
			}
		})
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled})
	h := http.Header{}
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), HeaderCarrier(h))
	got := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), HeaderCarrier(h)))
	if got.TraceID() != sc.TraceID() || got.SpanID() != sc.SpanID() || !got.IsSampled() {
		t.Fatalf("round trip: %v, want %v", got, sc)
	}
	if n := testing.AllocsPerRun(100, func() { _ = HeaderCarrier(h).Get("traceparent") }); n != 0 {
		t.Errorf("Get(traceparent) allocates %v times", n)
	}
}

func equalHeaders(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}
