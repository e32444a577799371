package serve

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

func TestSDKLoggerLowersClientMistakes(t *testing.T) {
	tests := []struct {
		level slog.Level
		msg   string
		attrs []any
		want  string // "" for nothing logged
		// show is the handler's least level shown (INFO when zero).
		show slog.Level
	}{
		{slog.LevelError, "method invalid during initialization", []any{"method", "tools/list", "params", "secret"},
			`level=WARN msg="client protocol mistake: method invalid during initialization" method=tools/list cause=client`, 0},
		{slog.LevelError, "duplicate initialize request", nil,
			`level=WARN msg="client protocol mistake: duplicate initialize request" method=initialize cause=client`, 0},
		{slog.LevelError, "initialized before initialize", nil,
			`level=WARN msg="client protocol mistake: initialized before initialize" method=notifications/initialized cause=client`, 0},
		{slog.LevelError, "server connect failed", []any{"error", "boom"}, `level=ERROR msg="server connect failed" error=boom`, 0},
		// The SDK's per-session chatter is DEBUG: shown only when asked.
		{slog.LevelInfo, "server session connected", []any{"session_id", ""}, ``, 0},
		{slog.LevelInfo, "session initialized", nil, ``, 0},
		{slog.LevelInfo, "server session connected", []any{"session_id", "s1"}, `level=DEBUG msg="server session connected" session_id=s1`, slog.LevelDebug},
		{slog.LevelInfo, "session initialized", nil, `level=DEBUG msg="session initialized"`, slog.LevelDebug},
		{slog.LevelWarn, "something odd", nil, `level=WARN msg="something odd"`, 0},
	}
	for _, tc := range tests {
		var buf bytes.Buffer
		l := sdkLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{
			Level: tc.show,
			ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
				if a.Key == slog.TimeKey {
					return slog.Attr{}
				}
				return a
			}})))
		l.Log(t.Context(), tc.level, tc.msg, tc.attrs...)
		if got := strings.TrimSpace(buf.String()); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.msg, got, tc.want)
		}
	}
	// A handler that shows only errors no longer shows a lowered mistake.
	var buf bytes.Buffer
	l := sdkLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelError})))
	l.Error("method invalid during initialization", "method", "tools/list")
	if buf.Len() != 0 {
		t.Errorf("a lowered record passed an ERROR-only handler: %s", buf.String())
	}
}
