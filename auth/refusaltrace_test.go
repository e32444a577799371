package auth

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

// TestRefusalRecordNamesTheActiveSpan: a request refused for its token
// within an active span is recorded with the span's trace and span ids;
// one without a span with neither.
func TestRefusalRecordNamesTheActiveSpan(t *testing.T) {
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid})
	var recs []RefusalRecord
	mw := Middleware(nil, MiddlewareOptions{ResourceMetadataURL: "https://127.0.0.1:1/.well-known/oauth-protected-resource/mcp",
		Audit: func(r RefusalRecord) { recs = append(recs, r) }})
	h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { t.Error("a request without a token got through") }))
	for _, ctx := range []context.Context{trace.ContextWithSpanContext(context.Background(), sc), context.Background()} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/mcp", nil).WithContext(ctx))
		if w.Code != http.StatusUnauthorized {
			t.Fatalf("status %d, want 401", w.Code)
		}
	}
	if len(recs) != 2 {
		t.Fatalf("%d records, want 2", len(recs))
	}
	if recs[0].Class != ClassNoToken || recs[0].TraceID != tid.String() || recs[0].SpanID != sid.String() {
		t.Errorf("refusal in a span: %+v, want no-token with %s %s", recs[0], tid, sid)
	}
	if recs[1].TraceID != "" || recs[1].SpanID != "" {
		t.Errorf("refusal without a span: %+v, want no ids", recs[1])
	}
}
