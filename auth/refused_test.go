package auth

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// refuseAll is a verifier that takes no token.
type refuseAll struct{}

func (refuseAll) Verify(context.Context, string) (*Caller, error) {
	return nil, refuse(ClassBadSignature, ReasonSignatureInvalid)
}

// TestRefusedDecidesTheLogLines: with Refused set, the middleware hands it
// every refusal (and Audit none) and writes its own log line only for
// those Refused reports own; the rest are Refused's to count.
func TestRefusedDecidesTheLogLines(t *testing.T) {
	var mu sync.Mutex
	var logs strings.Builder
	var got []RefusalRecord
	audits := 0
	logger := slog.New(slog.NewJSONHandler(safeWriterFor(&mu, &logs), nil))
	mw := Middleware(refuseAll{}, MiddlewareOptions{Logger: logger,
		Refused: func(r RefusalRecord) bool {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, r)
			return len(got) == 1 // the first is its own, the rest counted
		},
		Audit: func(RefusalRecord) { mu.Lock(); audits++; mu.Unlock() },
	})
	srv := newMuxServer(t, "/mcp", mw)
	const n = 50
	for i := range n {
		h := http.Header{}
		if i%2 == 1 {
			h.Set("Authorization", "Bearer not-a-token")
		}
		if status := send(t, srv, "POST", "/mcp", h); status != http.StatusUnauthorized {
			t.Fatalf("status %d, want 401", status)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != n || audits != 0 {
		t.Errorf("Refused saw %d refusals and Audit %d, want %d and 0", len(got), audits, n)
	}
	if lines := strings.Count(logs.String(), `"msg":"request refused"`); lines != 1 {
		t.Errorf("%d log lines for %d refusals of which one is own, want 1:\n%s", lines, n, logs.String())
	}
}

// TestRefusalsNameNothingAsSent: the method and path in a refusal's
// record and log line are the standard method (else OTHER) and the route
// the mux matched, never what the sender wrote.
func TestRefusalsNameNothingAsSent(t *testing.T) {
	tests := []struct {
		name, pattern, method, path string
		wantMethod, wantPath        string
	}{
		{"plain", "/mcp", "POST", "/mcp", "POST", "/mcp"},
		{"invented method", "/mcp", "EXFILTRATE", "/mcp", "OTHER", "/mcp"},
		{"a path under a subtree", "/mcp/", "GET", "/mcp/Patient-has-X", "GET", "/mcp/"},
		{"a wildcard", "/files/{name...}", "GET", "/files/secret-report.docx", "GET", "/files/{name...}"},
		{"a method in the pattern", "POST /mcp", "POST", "/mcp", "POST", "/mcp"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var logs strings.Builder
			var rec RefusalRecord
			mw := Middleware(refuseAll{}, MiddlewareOptions{Logger: slog.New(slog.NewJSONHandler(safeWriterFor(&mu, &logs), nil)),
				Audit: func(r RefusalRecord) { mu.Lock(); rec = r; mu.Unlock() }})
			srv := newMuxServer(t, tc.pattern, mw)
			send(t, srv, tc.method, tc.path, nil)
			mu.Lock()
			defer mu.Unlock()
			if rec.Method != tc.wantMethod || rec.Path != tc.wantPath {
				t.Errorf("record names %s %s, want %s %s", rec.Method, rec.Path, tc.wantMethod, tc.wantPath)
			}
			var line map[string]any
			if err := json.Unmarshal([]byte(logs.String()), &line); err != nil {
				t.Fatalf("log %q: %v", logs.String(), err)
			}
			if line["method"] != tc.wantMethod || line["path"] != tc.wantPath {
				t.Errorf("log line names %v %v, want %s %s", line["method"], line["path"], tc.wantMethod, tc.wantPath)
			}
		})
	}
	// Outside a mux there is no matched route.
	r := httptest.NewRequest("DELETE", "/anything/at/all", nil)
	if m, p := RefusedRequest(r); m != "DELETE" || p != "other" {
		t.Errorf("RefusedRequest outside a mux: %s %s, want DELETE other", m, p)
	}
}

func safeWriterFor(mu *sync.Mutex, b *strings.Builder) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return b.Write(p)
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// newMuxServer serves pattern behind mw on a real TLS server on 127.0.0.1.
func newMuxServer(t *testing.T, pattern string, mw func(http.Handler) http.Handler) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(pattern, mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		t.Error("a refused request reached the handler")
	})))
	srv := httptest.NewTLSServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func send(t *testing.T, srv *httptest.Server, method, path string, h http.Header) int {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range h {
		req.Header[k] = vs
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}
