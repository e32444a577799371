package gateway

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/internal/telemetry"
)

// Attribute names of a Gateway request's span beyond the HTTP client
// conventions: the api route and the Gateway's refusal code.
const (
	AttrGatewayRoute = "pdmcp.gateway.route"
	AttrGatewayCode  = "pdmcp.gateway.code"
)

// The pool's spans, children of the tool call's, and its events: the
// caller's subject token (the exchange, or the one held), the wait for a
// place (an eviction or a wait for one freed is an event on it), and the
// mint of the caller's session (its Gateway request is the mint's child).
const (
	SpanPoolSubject   = "pdmcp.pool.subject_token"
	SpanPoolPlace     = "pdmcp.pool.place"
	SpanPoolMint      = "pdmcp.pool.mint"
	EventPoolEviction = "pdmcp.pool.eviction"
	EventPoolWait     = "pdmcp.pool.wait"
)

// endPoolSpan ends a pool step's span, failed with the refusal's code when
// err is one (a constant of the contract), else with no detail at all.
func endPoolSpan(span trace.Span, err error) {
	if err != nil {
		code := ""
		var ae *api.Error
		if errors.As(err, &ae) {
			code = ae.Code
		}
		telemetry.Fail(span, code)
	}
	span.End()
}

// traceHeaders is what crosses to the Gateway: the W3C traceparent and
// tracestate only. Baggage stays here: it is the host's, and the key
// server has no use for it.
var traceHeaders = propagation.TraceContext{}

// clientKind is the start option of every request's span, made once.
var clientKind = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}

// spanNames are the span names of the routes a tool call sends, made
// once; any other route's is made when it is sent.
var spanNames = func() map[string]string {
	m := map[string]string{}
	for _, r := range []string{api.RouteServiceLogin, api.RouteScoped, api.RouteWiden, api.RouteRevoke,
		api.RouteEncrypt, api.RouteDecrypt} {
		m[r] = http.MethodPost + " " + r
	}
	return m
}()

// requestSpan is the CLIENT span of one request and what its attributes
// are made of: they are set once, when it ends, in one slice.
type requestSpan struct {
	span        trace.Span
	route, host string
	port        int
}

// startSpan starts the CLIENT span of one request to route and puts its
// trace context in req's headers. It carries the method, the route (the
// URL's template: no handle, proof or body is in it) and the server's
// address, never a header's value. Its span is nil when the client does
// not trace.
func (c *Client) startSpan(ctx context.Context, route string, req *http.Request) requestSpan {
	if c.tracer == nil {
		return requestSpan{}
	}
	name, ok := spanNames[route]
	if !ok {
		name = http.MethodPost + " " + route
	}
	ctx, span := c.tracer.Start(ctx, name, clientKind...)
	rs := requestSpan{span: span, route: route, host: req.URL.Hostname()}
	if p := req.URL.Port(); p != "" {
		if n, err := strconv.Atoi(p); err == nil {
			rs.port = n
		}
	}
	traceHeaders.Inject(ctx, telemetry.HeaderCarrier(req.Header))
	return rs
}

// endSpan ends the request's span with its attributes, the answer's status
// and the refusal code: a refusal or a failure to reach the Gateway is an
// error of this request (error.type is the code), and the span's status
// says so.
func endSpan(rs requestSpan, status int, code string) {
	span := rs.span
	if span == nil {
		return
	}
	if span.IsRecording() {
		attrs := make([]attribute.KeyValue, 0, 8)
		attrs = append(attrs,
			attribute.String("http.request.method", http.MethodPost),
			attribute.String("url.template", rs.route),
			attribute.String(AttrGatewayRoute, rs.route),
			attribute.String("server.address", rs.host),
		)
		if rs.port != 0 {
			attrs = append(attrs, attribute.Int("server.port", rs.port))
		}
		if status != 0 {
			attrs = append(attrs, attribute.Int("http.response.status_code", status))
		}
		if code != "" {
			attrs = append(attrs, attribute.String(AttrGatewayCode, code), attribute.String("error.type", code))
		}
		span.SetAttributes(attrs...)
	}
	if code != "" {
		span.SetStatus(codes.Error, code)
	}
	span.End()
}
