package audit

import (
	"context"
	"encoding/hex"

	"go.opentelemetry.io/otel/trace"

	"github.com/pdmcp/pdmcp/internal/lowerhex"
)

// Trace is the trace and span id of the span active in ctx, in their W3C
// form (32 and 16 lowercase hex digits), so a line joins the trace of the
// request it records; both empty when ctx holds no valid span context (no
// tracing, or a request that came without one and started none).
func Trace(ctx context.Context) (traceID, spanID string) {
	return SpanIDs(trace.SpanContextFromContext(ctx))
}

// SpanIDs is Trace of a span context already at hand.
func SpanIDs(sc trace.SpanContext) (traceID, spanID string) {
	if !sc.IsValid() {
		return "", ""
	}
	// Both in one string: one allocation, not two.
	var b [48]byte
	tid, sid := sc.TraceID(), sc.SpanID()
	hex.Encode(b[:32], tid[:])
	hex.Encode(b[32:], sid[:])
	both := string(b[:])
	return both[:32], both[32:]
}

func isTraceID(v string) bool { return isHexID(v, 32) }
func isSpanID(v string) bool  { return isHexID(v, 16) }

// isHexID: n lowercase hex digits, not all zero (the W3C invalid id).
func isHexID(v string, n int) bool {
	if !lowerhex.Valid(v, n) {
		return false
	}
	for i := 0; i < len(v); i++ {
		if v[i] != '0' {
			return true
		}
	}
	return false
}
