package serve

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/pdmcp/pdmcp/audit"
)

// TestLimitRefusalNamesTheActiveSpan: a request refused over a limit
// within an active span (put in its context as the tracing middleware
// does) is recorded with the span's trace and span ids; one without a
// span with neither.
func TestLimitRefusalNamesTheActiveSpan(t *testing.T) {
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid})
	var mu sync.Mutex
	var lines []audit.AuthRefused
	record := func(line audit.AuthRefused) bool {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, line)
		return true
	}
	// A body larger than the user's bound is refused before it is read.
	l := NewUserLimiter(UserLimits{MaxBodyBytesPerUser: 10}, record, nil, nil)
	spans := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		if r.Header.Get("X-Test-Traced") != "" {
			ctx = trace.ContextWithSpanContext(ctx, sc)
		}
		asUser("alice", l.Wrap(http.NotFoundHandler())).ServeHTTP(w, r.WithContext(ctx))
	})
	ts := httptest.NewTLSServer(spans)
	defer ts.Close()
	for _, traced := range []bool{true, false} {
		req, _ := http.NewRequest(http.MethodPost, ts.URL+"/mcp", strings.NewReader(strings.Repeat("x", 100)))
		if traced {
			req.Header.Set("X-Test-Traced", "1")
		}
		resp, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("status %d, want 429", resp.StatusCode)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(lines) != 2 {
		t.Fatalf("%d refusals recorded, want 2", len(lines))
	}
	if lines[0].TraceID != tid.String() || lines[0].SpanID != sid.String() {
		t.Errorf("refusal in a span: %q %q, want %s %s", lines[0].TraceID, lines[0].SpanID, tid, sid)
	}
	if lines[1].TraceID != "" || lines[1].SpanID != "" {
		t.Errorf("refusal without a span: %q %q, want neither", lines[1].TraceID, lines[1].SpanID)
	}
}
