package serve

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/pdmcp/pdmcp/auth"
	"github.com/pdmcp/pdmcp/internal/telemetry"
)

// Attribute names of the token check's span: the refusal's class and
// reason, both constants of package auth, never anything of the token.
const (
	AttrAuthClass  = "pdmcp.auth.class"
	AttrAuthReason = "pdmcp.auth.reason"
	// SpanTokenCheck names the token check's span.
	SpanTokenCheck = "pdmcp.token_check"
)

// httpTrace reads and writes the W3C trace context of an HTTP request.
var httpTrace = propagation.TraceContext{}

// tracedHTTP makes each request to the MCP endpoint a SERVER span (named
// "POST /mcp"), under the caller's traceparent header if it sent one. It
// then puts its own span's traceparent in the request's header, which the
// MCP layer reads (server.traceRequests) to link each MCP request's span
// to this one: the go-sdk does not hand a session's requests the HTTP
// request's context, but it does hand them its header. The span carries
// the method, the route, the protocol header and the answer's status;
// never a header's value beyond those, the body or the token.
func tracedHTTP(tracer trace.Tracer, route string, next http.Handler) http.Handler {
	// Each method's span name and attributes known before the answer are
	// made once, here; the attributes are set when the span ends, with
	// the answer's, in one slice.
	type start struct {
		name  string
		attrs []attribute.KeyValue
	}
	starts := map[string]start{}
	for _, method := range []string{http.MethodGet, http.MethodPost, http.MethodDelete, http.MethodOptions, http.MethodHead, "_OTHER"} {
		name := method + " " + route
		if method == "_OTHER" {
			name = "HTTP " + route
		}
		starts[method] = start{name: name, attrs: []attribute.KeyValue{
			attribute.String("http.request.method", method),
			attribute.String("http.route", route),
			attribute.String("url.path", route),
			attribute.String("url.scheme", "https"),
			attribute.String("network.transport", "tcp"),
		}}
	}
	serverKind := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := httpTrace.Extract(r.Context(), telemetry.HeaderCarrier(r.Header))
		st, ok := starts[r.Method]
		if !ok {
			st = starts["_OTHER"]
		}
		ctx, span := tracer.Start(ctx, st.name, serverKind...)
		defer span.End()
		answered := false
		defer func() {
			// A panic passing through: the span still names the request.
			if !answered {
				span.SetAttributes(st.attrs...)
			}
		}()
		r.Header.Del("Traceparent")
		r.Header.Del("Tracestate")
		httpTrace.Inject(ctx, telemetry.HeaderCarrier(r.Header))
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r.WithContext(ctx))
		answered = true
		status := sw.status
		if status == 0 {
			status = http.StatusOK
		}
		if !span.IsRecording() {
			return
		}
		attrs := make([]attribute.KeyValue, len(st.attrs), len(st.attrs)+2)
		copy(attrs, st.attrs)
		attrs = append(attrs, attribute.Int("http.response.status_code", status))
		if status >= 500 {
			attrs = append(attrs, attribute.String("error.type", strconv.Itoa(status)))
			span.SetStatus(codes.Error, "")
		}
		span.SetAttributes(attrs...)
	})
}

// statusWriter notes the answer's status. Unwrap and Flush keep the
// SDK's http.ResponseController and streams working through it.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 && code >= 200 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusWriter) Flush() { _ = http.NewResponseController(s.ResponseWriter).Flush() }

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// tracingVerifier is a token check as a span of its own: a refusal
// carries its class and reason; the caller is never named (the MCP span
// names them by digest).
type tracingVerifier struct {
	next   auth.TokenVerifier
	tracer trace.Tracer
}

func (v tracingVerifier) Verify(ctx context.Context, token string) (*auth.Caller, error) {
	ctx, span := v.tracer.Start(ctx, SpanTokenCheck)
	defer span.End()
	c, err := v.next.Verify(ctx, token)
	if err != nil {
		var te *auth.TokenError
		class, reason := string(auth.ClassInvalid), "VERIFIER_FAILED"
		if errors.As(err, &te) {
			class, reason = string(te.Class), te.Reason
		}
		span.SetAttributes(attribute.String(AttrAuthClass, class), attribute.String(AttrAuthReason, reason),
			attribute.String("error.type", class))
		// The error's text may quote a claim: only the class is kept.
		span.SetStatus(codes.Error, class)
	}
	return c, err
}
