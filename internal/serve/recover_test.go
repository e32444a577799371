package serve

import (
	"bufio"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	logs "github.com/pdmcp/pdmcp/internal/testutil"
)

// TestRecoverHTTP (issue 31 item 5): a panic in the HTTP handler chain,
// on the request's own goroutine, is answered 500 with a JSON-RPC
// internal error when nothing was sent yet, and cuts the connection when
// the answer had started; either way the server goes on, the panic is
// counted, and the log has the stack but not the value. An
// http.ErrAbortHandler panic is net/http's own and passes through
// uncounted.
func TestRecoverHTTP(t *testing.T) {
	buf := &logs.LogBuffer{}
	m := NewMetrics(nil)
	mux := http.NewServeMux()
	mux.HandleFunc("/before", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("WWW-Authenticate", "Bearer kept-only-on-a-real-answer")
		panic("Bearer eyJhbGciOi.secret-token-text")
	})
	mux.HandleFunc("/after", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "partial")
		w.(http.Flusher).Flush()
		panic("Bearer eyJhbGciOi.secret-token-text")
	})
	mux.HandleFunc("/abort", func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) })
	mux.HandleFunc("/ok", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	srv := httptest.NewUnstartedServer(recoverHTTP(slog.New(slog.NewTextHandler(buf, nil)), m, mux))
	srv.Config.ErrorLog = slog.NewLogLogger(slog.NewTextHandler(buf, nil), slog.LevelWarn)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	hc := srv.Client()

	get := func(path string) (*http.Response, string, error) {
		t.Helper()
		resp, err := hc.Get(srv.URL + path)
		if err != nil {
			return nil, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp, string(b), err
	}
	resp, body, err := get("/before")
	if err != nil || resp.StatusCode != http.StatusInternalServerError || resp.Header.Get("WWW-Authenticate") != "" ||
		!strings.Contains(body, `"code":-32603`) || strings.Contains(body, "secret") {
		t.Fatalf("a panic before the answer: %v %v %q", resp, err, body)
	}
	if _, body, err := get("/after"); err == nil {
		t.Fatalf("a panic after the answer started: the body %q was ended as if whole", body)
	}
	if _, _, err := get("/abort"); err == nil {
		t.Fatal("http.ErrAbortHandler did not cut the answer")
	}
	if resp, body, err := get("/ok"); err != nil || resp.StatusCode != http.StatusOK || body != "ok" {
		t.Fatalf("the server after the panics: %v %v %q", resp, err, body)
	}
	if got := panicsCounted(t, m, PanicHTTP); got != 2 {
		t.Errorf("panics counted: %v, want 2 (the abort is not one)", got)
	}
	l := buf.String()
	if strings.Contains(l, "secret-token-text") {
		t.Fatalf("the log holds the panic's value:\n%s", l)
	}
	reports := 0
	for sc := bufio.NewScanner(strings.NewReader(l)); sc.Scan(); {
		if line := sc.Text(); strings.Contains(line, "a panic was recovered in the HTTP handler chain") {
			reports++
			if !strings.Contains(line, "panic=panic(string)") || !strings.Contains(line, "TestRecoverHTTP") {
				t.Errorf("a report without the value's type or the stack: %s", line)
			}
		}
	}
	if reports != 2 {
		t.Errorf("%d panic reports in the log, want 2:\n%s", reports, l)
	}
}

// panicsCounted reads pdmcp_panics_total{where} from m's registry.
func panicsCounted(t *testing.T, m *Metrics, where string) float64 {
	t.Helper()
	families, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "pdmcp_panics_total" {
			continue
		}
		for _, c := range f.GetMetric() {
			for _, l := range c.GetLabel() {
				if l.GetName() == "where" && l.GetValue() == where {
					return c.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no pdmcp_panics_total{where=%q}", where)
	return 0
}

// TestReportBackgroundPanic: a panic recovered on a goroutine of the
// token exchange or the session pool is logged without its value and
// counted at background.
func TestReportBackgroundPanic(t *testing.T) {
	buf := &logs.LogBuffer{}
	m := NewMetrics(nil)
	reportBackgroundPanic(slog.New(slog.NewTextHandler(buf, nil)), m, "the token exchange ahead of need", "Bearer secret-token-text")
	if got := panicsCounted(t, m, "background"); got != 1 {
		t.Errorf("counted %v at background, want 1", got)
	}
	if l := buf.String(); strings.Contains(l, "secret-token-text") || !strings.Contains(l, "panic=panic(string)") ||
		!strings.Contains(l, `in="the token exchange ahead of need"`) {
		t.Errorf("log:\n%s", l)
	}
}
