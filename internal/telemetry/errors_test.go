package telemetry

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
)

// syncBuffer is a log sink the exporter's goroutine and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestExportErrorsAreLoggedWithoutTheURLsSecrets: a collector that refuses
// the export, reached through a URL with a token in its query and a
// password in its user information (Start does not check the URL;
// Resolve refuses both), is reported in the process's log at WARN, naming
// the collector's host and path but neither secret; so is an error otel
// hands its global handler.
func TestExportErrorsAreLoggedWithoutTheURLsSecrets(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no", http.StatusBadRequest)
	}))
	defer srv.Close()
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	u := strings.Replace(srv.URL, "://", "://user:secret-password@", 1) + "/v1/traces?token=secret-query&x=1#secret-fragment"
	tr, err := Start(context.Background(), Config{Enabled: true, URL: u}, "v-test", log)
	if err != nil {
		t.Fatal(err)
	}
	_, span := tr.Tracer().Start(context.Background(), "a-span")
	span.End()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = tr.Flush(ctx)
	otel.Handle(errors.New(`Post "https://collector.example/v1/traces?api_key=secret-handled": refused`))
	_ = tr.Shutdown(ctx)

	text := logs.String()
	if !strings.Contains(text, "level=WARN") || !strings.Contains(text, "spans could not be exported") ||
		!strings.Contains(text, strings.TrimPrefix(srv.URL, "http://")+"/v1/traces") {
		t.Errorf("the failed export is not logged as it should be:\n%s", text)
	}
	if !strings.Contains(text, "kind="+ErrorKindSDK) || !strings.Contains(text, "https://collector.example/v1/traces?[redacted]") {
		t.Errorf("otel's handled error is not logged:\n%s", text)
	}
	if strings.Contains(text, "secret") {
		t.Errorf("the log carries a URL's secret:\n%s", text)
	}
}

// TestExportersOwnEnvironmentErrorsAreRedacted: the exporter reads the
// OTEL_* variables itself too, and logs one it cannot parse with its text
// through otel's logger; that line reaches the process's log at WARN with
// the URL's secret removed, not on stderr as otel's default logger would.
func TestExportersOwnEnvironmentErrorsAreRedacted(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://h:badport/?token=secret-env")
	var logs syncBuffer
	tr, err := Start(context.Background(), Config{Enabled: true, URL: "http://127.0.0.1:1/v1/traces"}, "v-test",
		slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	_ = tr.Shutdown(context.Background())
	text := logs.String()
	if !strings.Contains(text, "level=WARN") || !strings.Contains(text, "parse url") || !strings.Contains(text, "[a URL]") {
		t.Errorf("the exporter's parse error is not logged redacted:\n%s", text)
	}
	if strings.Contains(text, "secret") {
		t.Errorf("the log carries the URL's secret:\n%s", text)
	}
}

// TestErrorReporterOneLinePerKindAMinute: the first error of a kind is
// logged, the next within ErrorEvery are counted and said in the first
// line after it; each kind has its own minute.
func TestErrorReporterOneLinePerKindAMinute(t *testing.T) {
	var logs bytes.Buffer
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := newErrorReporter(slog.New(slog.NewTextHandler(&logs, nil)), func() time.Time { return now })
	for range 5 {
		r.report(ErrorKindExport, "failed to send to http://c/v1/traces: 503")
	}
	r.report(ErrorKindSDK, "something else")
	now = now.Add(ErrorEvery - time.Second)
	r.report(ErrorKindExport, "still failing")
	if got := strings.Count(logs.String(), "\n"); got != 2 {
		t.Fatalf("%d lines within the minute, want 2 (one per kind):\n%s", got, logs.String())
	}
	now = now.Add(time.Second)
	r.report(ErrorKindExport, "failed again")
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[2], "leftOut=5") || !strings.Contains(lines[2], "failed again") {
		t.Fatalf("after the minute: %q, want a third line saying 5 were left out", lines)
	}
}

func TestRedact(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`Post "http://h:4318/v1/traces?token=s": refused`, `Post "http://h:4318/v1/traces?[redacted]": refused`},
		{`failed to send to https://u:p@h/v1/traces?k=s: 400 Bad Request`, `failed to send to https://h/v1/traces?[redacted]: 400 Bad Request`},
		{`https://h/x#frag.`, `https://h/x.`},
		{`no url here: dial tcp 127.0.0.1:4318`, `no url here: dial tcp 127.0.0.1:4318`},
		{`two http://a/?x=1 and http://b:1/p`, `two http://a/?[redacted] and http://b:1/p`},
		{`bad http://h:port/?s=1`, `bad [a URL]`},
	} {
		if got := Redact(tc.in); got != tc.want {
			t.Errorf("Redact(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
