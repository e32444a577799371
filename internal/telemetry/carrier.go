package telemetry

import (
	"net/http"

	"go.opentelemetry.io/otel/propagation"
)

// HeaderCarrier is propagation.HeaderCarrier without its cost: otel asks
// for its keys in lower case ("traceparent"), which net/http turns into
// the canonical form in a new string on every Get and Set. The keys the
// W3C propagators use are mapped to their canonical form here, once;
// any other key is passed to http.Header as before.
type HeaderCarrier http.Header

var _ propagation.TextMapCarrier = HeaderCarrier(nil)

// canonical is key in its canonical header form, without allocating for
// the keys of the trace context and baggage.
func canonical(key string) string {
	switch key {
	case "traceparent", "Traceparent":
		return "Traceparent"
	case "tracestate", "Tracestate":
		return "Tracestate"
	case "baggage", "Baggage":
		return "Baggage"
	}
	return http.CanonicalHeaderKey(key)
}

// Get is the key's first value, "" when it has none.
func (h HeaderCarrier) Get(key string) string {
	if v := h[canonical(key)]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Set replaces the key's values with value.
func (h HeaderCarrier) Set(key, value string) { h[canonical(key)] = []string{value} }

// Values is every value of key.
func (h HeaderCarrier) Values(key string) []string { return h[canonical(key)] }

// Keys lists the header's keys.
func (h HeaderCarrier) Keys() []string { return propagation.HeaderCarrier(h).Keys() }
