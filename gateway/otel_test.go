package gateway_test

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/reference"
)

// TestGatewayRequestsCarryTheTrace: with a tracer, each Gateway request is
// a CLIENT span under the caller's span, naming its route, status and
// refusal code; its W3C trace context reaches the reference Gateway, whose
// key-server rows then carry the caller's trace id, so a tool call's trace
// joins the key server's row. No span carries the key's t-Tag, the text,
// the ciphertext or a principal's name.
func TestGatewayRequestsCarryTheTrace(t *testing.T) {
	w := newWorld(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	cc := w.svc.ClientConfig()
	cc.BaseURL, cc.TrustFile = w.env.URL, w.env.CAFile
	cc.Tracer = tp.Tracer("test")
	c, err := gateway.New(cc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, parent := tp.Tracer("test").Start(context.Background(), "tools/call read_protected_document", trace.WithSpanKind(trace.SpanKindServer))
	s, err := c.Mint(ctx, gateway.MintRequest{ActingAs: w.reader.Name, Objects: []string{w.ttag}, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Decrypt(ctx, w.ttag, w.iv, w.ct); err != nil {
		t.Fatal(err)
	}
	// A refused request: its span says so by code.
	_, err = s.Decrypt(ctx, "not-a-ttag-in-scope", w.iv, w.ct)
	if err == nil {
		t.Fatal("decrypt of a key out of scope was not refused")
	}
	parent.End()
	want := parent.SpanContext().TraceID()

	spans := exp.GetSpans()
	byRoute := map[string][]tracetest.SpanStub{}
	for _, sp := range spans {
		if sp.SpanKind != trace.SpanKindClient {
			continue
		}
		if sp.SpanContext.TraceID() != want || sp.Parent.SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("span %s is not a child of the caller's span", sp.Name)
		}
		for _, a := range sp.Attributes {
			if a.Key == gateway.AttrGatewayRoute {
				byRoute[a.Value.AsString()] = append(byRoute[a.Value.AsString()], sp)
			}
		}
	}
	dec := byRoute[api.RouteDecrypt]
	if len(dec) != 2 || dec[0].Name != "POST "+api.RouteDecrypt {
		t.Fatalf("decrypt spans = %d (%v); want 2 named POST %s", len(dec), byRoute, api.RouteDecrypt)
	}
	attr := func(sp tracetest.SpanStub, key string) string {
		for _, a := range sp.Attributes {
			if string(a.Key) == key {
				return a.Value.String()
			}
		}
		return ""
	}
	if attr(dec[0], "http.response.status_code") != "200" || attr(dec[0], gateway.AttrGatewayCode) != "" {
		t.Errorf("the good decrypt's span: status %s code %s", attr(dec[0], "http.response.status_code"), attr(dec[0], gateway.AttrGatewayCode))
	}
	if attr(dec[1], gateway.AttrGatewayCode) == "" || attr(dec[1], "error.type") == "" {
		t.Errorf("the refused decrypt's span has no code: %v", dec[1].Attributes)
	}
	if len(byRoute[api.RouteScoped]) == 0 {
		t.Error("the mint has no span")
	}

	forbidden := []string{w.ttag, string(w.plaintext), base64.StdEncoding.EncodeToString(w.ct), w.reader.Name, w.svc.Prefix, "DPoP", "eyJ"}
	for _, sp := range spans {
		for _, a := range sp.Attributes {
			for _, f := range forbidden {
				if f != "" && strings.Contains(a.Value.String(), f) {
					t.Errorf("span %s attribute %s carries a forbidden value", sp.Name, a.Key)
				}
			}
		}
	}

	rows, err := w.env.Gateway.KeyServerAudit(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	joined := 0
	for _, r := range rows {
		if r.Operation == reference.OpDecrypt && r.TraceID == want.String() {
			joined++
		}
	}
	if joined == 0 {
		t.Fatalf("no key-server decrypt row carries the trace id %s: %+v", want, rows)
	}
	// The world's own set-up traced nothing: its rows carry no trace id.
	if rows[0].TraceID != "" {
		t.Errorf("an untraced request's row has trace id %q", rows[0].TraceID)
	}
}
