package serve

import (
	"log"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// handshakeLogEvery is how often, at most, failed TLS handshakes are
// logged (with their count).
const handshakeLogEvery = time.Minute

// newHTTPErrorLog is the MCP listener's http.Server ErrorLog: each line
// at WARN, as before, except "TLS handshake error" lines, which anyone on
// the machine can cause at will (a connection that never shakes hands, or
// one closed to make room for a newer one). Those are counted and logged
// at most once per handshakeLogEvery, with the count since the last line,
// so that a flood of them does not bury the log.
func newHTTPErrorLog(logger *slog.Logger, now func() time.Time) *log.Logger {
	return log.New(&httpErrorLog{log: logger, now: now}, "", 0)
}

type httpErrorLog struct {
	log *slog.Logger
	now func() time.Time

	mu         sync.Mutex
	handshakes int
	last       time.Time
}

func (l *httpErrorLog) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	if !strings.HasPrefix(line, "http: TLS handshake error") {
		l.log.Warn(line)
		return len(p), nil
	}
	l.mu.Lock()
	l.handshakes++
	now := l.now()
	if !l.last.IsZero() && now.Sub(l.last) < handshakeLogEvery {
		l.mu.Unlock()
		return len(p), nil
	}
	n := l.handshakes
	l.handshakes, l.last = 0, now
	l.mu.Unlock()
	// The peer's address and the error are dropped: a loopback port says
	// nothing, and the count is what an operator needs.
	l.log.Warn("TLS handshakes failed (stalled, closed by the client, or closed to admit a newer connection)",
		"count", n, "window", handshakeLogEvery.String())
	return len(p), nil
}
