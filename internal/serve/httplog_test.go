package serve

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/internal/testutil"
)

// TestHTTPErrorLogAggregatesHandshakes: a flood of failed handshakes is one
// line a minute with its count; other lines of the server pass through.
func TestHTTPErrorLogAggregatesHandshakes(t *testing.T) {
	buf := &testutil.LogBuffer{}
	clock := time.Date(2026, 12, 5, 1, 0, 0, 0, time.UTC)
	l := newHTTPErrorLog(slog.New(slog.NewTextHandler(buf, nil)), func() time.Time { return clock })
	for range 500 {
		l.Printf("http: TLS handshake error from 127.0.0.1:%d: EOF", 40000)
	}
	l.Printf("http: Accept error: accept tcp: too many open files; retrying in 5ms")
	clock = clock.Add(handshakeLogEvery)
	l.Printf("http: TLS handshake error from 127.0.0.1:40001: EOF")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	want := []string{"count=1 ", "too many open files", "count=500 "}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), buf.String())
	}
	for i, w := range want {
		if !strings.Contains(lines[i]+" ", w) {
			t.Errorf("line %d %q lacks %q", i+1, lines[i], w)
		}
	}
	if strings.Contains(buf.String(), "40001") {
		t.Error("a handshake's peer address was logged")
	}
}
