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
	}{
		{slog.LevelError, "method invalid during initialization", []any{"method", "tools/list", "params", "secret"},
			`level=WARN msg="client protocol mistake: method invalid during initialization" method=tools/list cause=client`},
		{slog.LevelError, "duplicate initialize request", nil,
			`level=WARN msg="client protocol mistake: duplicate initialize request" method=initialize cause=client`},
		{slog.LevelError, "initialized before initialize", nil,
			`level=WARN msg="client protocol mistake: initialized before initialize" method=notifications/initialized cause=client`},
		{slog.LevelError, "server connect failed", []any{"error", "boom"}, `level=ERROR msg="server connect failed" error=boom`},
		{slog.LevelInfo, "server session connected", nil, `level=INFO msg="server session connected"`},
	}
	for _, tc := range tests {
		var buf bytes.Buffer
		l := sdkLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{
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
