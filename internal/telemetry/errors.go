package telemetry

import (
	"context"
	"log/slog"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// ErrorEvery is how often one kind of tracing error is logged: a collector
// that is down fails every export, a few a second under load, and one
// line a minute (with how many were left out) says as much.
const ErrorEvery = time.Minute

// Kinds of tracing error, each rate-limited on its own.
const (
	ErrorKindExport = "export" // a batch of spans not delivered
	ErrorKindSDK    = "sdk"    // anything else the OpenTelemetry SDK reports
)

// errorReporter writes the OpenTelemetry SDK's errors to the process's log
// at WARN instead of otel's default (the standard log, on stderr, with the
// error's text as it is). An export error quotes the collector's URL, which
// may carry a token in its query or user information: every URL in a
// reported text loses both (Redact). At most one line per kind is written
// each ErrorEvery; the next says how many were left out.
type errorReporter struct {
	log   *slog.Logger
	now   func() time.Time
	mu    sync.Mutex
	kinds map[string]*errorKind
}

type errorKind struct {
	last       time.Time
	suppressed int
}

func newErrorReporter(log *slog.Logger, now func() time.Time) *errorReporter {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if now == nil {
		now = time.Now
	}
	return &errorReporter{log: log, now: now, kinds: map[string]*errorKind{}}
}

func (r *errorReporter) report(kind, text string) {
	now := r.now()
	r.mu.Lock()
	k := r.kinds[kind]
	if k != nil && now.Sub(k.last) < ErrorEvery {
		k.suppressed++
		r.mu.Unlock()
		return
	}
	if k == nil {
		k = &errorKind{}
		r.kinds[kind] = k
	}
	left := k.suppressed
	k.last, k.suppressed = now, 0
	r.mu.Unlock()
	attrs := []any{"kind", kind, "err", Redact(text)}
	if left > 0 {
		attrs = append(attrs, "leftOut", left)
	}
	msg := "tracing: the OpenTelemetry SDK reported an error"
	if kind == ErrorKindExport {
		msg = "tracing: spans could not be exported and were dropped"
	}
	r.log.Warn(msg, attrs...)
}

// install makes r otel's error handler and the sink of its internal
// logger's errors (which quote a malformed OTEL_* URL as it is). Both are
// process-wide in otel; the last tracing set-up started owns them.
func (r *errorReporter) install() {
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		if err != nil {
			r.report(ErrorKindSDK, err.Error())
		}
	}))
	otel.SetLogger(logr.FromSlogHandler(sdkLogHandler{r: r}))
}

// sdkLogHandler passes the records otel logs at error level to the
// reporter, their message and attributes as one text; the rest (its
// informational and debug lines) are dropped.
type sdkLogHandler struct{ r *errorReporter }

func (h sdkLogHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelError }

func (h sdkLogHandler) Handle(_ context.Context, rec slog.Record) error {
	var b strings.Builder
	b.WriteString(rec.Message)
	rec.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.Key + "=" + a.Value.String())
		return true
	})
	h.r.report(ErrorKindSDK, b.String())
	return nil
}

func (h sdkLogHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h sdkLogHandler) WithGroup(string) slog.Handler      { return h }

// reportingExporter reports a failed export itself and tells the batch
// processor it went well: the processor would hand the error to otel's
// global handler, and the spans are dropped either way.
type reportingExporter struct {
	sdktrace.SpanExporter
	r *errorReporter
}

func (e reportingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if err := e.SpanExporter.ExportSpans(ctx, spans); err != nil {
		e.r.report(ErrorKindExport, err.Error())
	}
	return nil
}

// urlInText finds URLs in an error's text; a quote, a space or an angle
// bracket ends one (url.Error quotes its URL).
var urlInText = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^\s"'<>]+`)

// Redact is text with every URL in it stripped of its user information,
// query and fragment, each of which may carry a credential; a query
// removed is marked "?[redacted]".
func Redact(text string) string {
	return urlInText.ReplaceAllStringFunc(text, func(raw string) string {
		trimmed := strings.TrimRight(raw, ".,;:)]}")
		tail := raw[len(trimmed):]
		u, err := url.Parse(trimmed)
		if err != nil {
			return "[a URL]" + tail
		}
		hadQuery := u.RawQuery != "" || u.ForceQuery
		u.User, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = nil, "", false, "", ""
		s := u.String()
		if hadQuery {
			s += "?[redacted]"
		}
		return s + tail
	})
}
