package serve

import (
	"context"
	"log/slog"
)

// clientMistake recognises the go-sdk's log messages for a client that
// broke the protocol (a request before initialize, a second initialize, ...)
// and names the method each is about when the record does not. The SDK logs
// them at ERROR; they are the client's error, not this server's, and an
// operator alerting on ERROR must not be woken by a misbehaving host.
func clientMistake(msg string) (method string, ok bool) {
	switch msg {
	case "method invalid during initialization", "method removed in the new protocol":
		return "", true
	case "initialized before initialize", "duplicate initialized notification":
		return "notifications/initialized", true
	case "duplicate initialize request":
		return "initialize", true
	}
	return "", false
}

// sdkLogger is the logger handed to the go-sdk: l, with the SDK's records
// of client protocol mistakes lowered to WARN, marked cause=client, and
// stripped to the method (never the request's payload), and its INFO
// records ("server session connected", "session initialized", ...)
// lowered to DEBUG: they come once or more per session, say nothing an
// operator acts on, and would bury the server's own INFO lines
// (--log-level debug shows them).
func sdkLogger(l *slog.Logger) *slog.Logger {
	return slog.New(&clientMistakeHandler{next: l.Handler()})
}

type clientMistakeHandler struct {
	next slog.Handler
}

func (h *clientMistakeHandler) Enabled(ctx context.Context, level slog.Level) bool {
	// An ERROR record may be lowered to WARN in Handle, which then asks
	// again.
	return h.next.Enabled(ctx, sdkLevel(level)) || level >= slog.LevelError
}

// sdkLevel is the level an SDK record is logged at: its INFO (and NOTICE)
// chatter at DEBUG, the rest as the SDK gave it.
func sdkLevel(l slog.Level) slog.Level {
	if l >= slog.LevelInfo && l < slog.LevelWarn {
		return slog.LevelDebug
	}
	return l
}

func (h *clientMistakeHandler) Handle(ctx context.Context, r slog.Record) error {
	if method, ok := clientMistake(r.Message); ok && r.Level >= slog.LevelError {
		lowered := slog.NewRecord(r.Time, slog.LevelWarn, "client protocol mistake: "+r.Message, r.PC)
		hasMethod := false
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "method" {
				hasMethod = true
				lowered.AddAttrs(a)
			}
			return true
		})
		if !hasMethod && method != "" {
			lowered.AddAttrs(slog.String("method", method))
		}
		lowered.AddAttrs(slog.String("cause", "client"))
		r = lowered
	}
	r.Level = sdkLevel(r.Level)
	if !h.next.Enabled(ctx, r.Level) {
		return nil
	}
	return h.next.Handle(ctx, r)
}

func (h *clientMistakeHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &clientMistakeHandler{next: h.next.WithAttrs(attrs)}
}

func (h *clientMistakeHandler) WithGroup(name string) slog.Handler {
	return &clientMistakeHandler{next: h.next.WithGroup(name)}
}
