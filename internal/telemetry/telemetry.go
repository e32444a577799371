// Package telemetry owns pdmcp's OpenTelemetry trace set-up: it reads the
// standard OTEL_* environment variables and the `tracing` block of
// mcp-http.json, builds the tracer provider and its OTLP exporter, and
// flushes it when the server stops. Tracing is off unless an exporter or
// an endpoint is named; off, every tracer it hands out is a no-op, so a
// span costs one interface call and nothing is exported.
//
// Nothing here is global: the provider and the propagator are passed to
// the parts that trace (package server's MCP spans, package gateway's
// requests, internal/serve's HTTP spans); otel's global provider is never
// set.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// InstrumentationName is the tracer name every pdmcp span is made under.
const InstrumentationName = "github.com/pdmcp/pdmcp"

// DefaultServiceName is service.name when none is set.
const DefaultServiceName = "pdmcp"

// ProtocolHTTPProtobuf is the one OTLP protocol this build exports with.
const ProtocolHTTPProtobuf = "http/protobuf"

// ShutdownTimeout bounds the flush of buffered spans at stop: a collector
// that does not answer must not hold the server's exit.
const ShutdownTimeout = 5 * time.Second

// Settings are what the `tracing` block of mcp-http.json may set; the
// OTEL_* environment variables of the same meaning override each field
// they set (see Resolve). All fields are optional.
type Settings struct {
	// Exporter is "otlp" or "none" (OTEL_TRACES_EXPORTER).
	Exporter string `json:"exporter,omitempty"`
	// Endpoint is the collector's base URL; /v1/traces is appended
	// (OTEL_EXPORTER_OTLP_ENDPOINT). TracesEndpoint is the full URL, used
	// as it is (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT).
	Endpoint       string `json:"endpoint,omitempty"`
	TracesEndpoint string `json:"tracesEndpoint,omitempty"`
	// Protocol is "http/protobuf" (OTEL_EXPORTER_OTLP_PROTOCOL).
	Protocol string `json:"protocol,omitempty"`
	// Headers are sent with each export, e.g. a collector's API key
	// (OTEL_EXPORTER_OTLP_HEADERS, "k=v,k2=v2"). Never logged.
	Headers map[string]string `json:"headers,omitempty"`
	// ServiceName is service.name (OTEL_SERVICE_NAME), "pdmcp" when unset.
	ServiceName string `json:"serviceName,omitempty"`
	// Sampler and SamplerArg are OTEL_TRACES_SAMPLER and _ARG; the default
	// is parentbased_always_on.
	Sampler    string `json:"sampler,omitempty"`
	SamplerArg string `json:"samplerArg,omitempty"`
	// Disabled turns tracing off whatever else is set (OTEL_SDK_DISABLED).
	Disabled bool `json:"disabled,omitempty"`

	// endpointFrom and tracesEndpointFrom name where Endpoint and
	// TracesEndpoint were given, for check's messages.
	endpointFrom, tracesEndpointFrom string
}

// Config is the resolved set-up: Enabled false means no tracing.
type Config struct {
	Enabled     bool
	URL         string // the full OTLP/HTTP traces URL
	Headers     map[string]string
	ServiceName string
	Sampler     sdktrace.Sampler
}

// Resolve merges the file's settings (nil when there is no block) with
// the environment (KEY=VALUE entries; the environment wins field by field,
// so an operator can turn tracing off with OTEL_SDK_DISABLED=true without
// editing the file) and checks the result. Tracing is on only when an
// exporter of "otlp" or an endpoint is named: the OpenTelemetry default of
// exporting to localhost:4318 unasked is not taken, so a server nobody
// configured for tracing sends nothing.
func Resolve(file *Settings, environ []string) (Config, error) {
	s := Settings{}
	if file != nil {
		s = *file
		s.Headers = map[string]string{}
		for k, v := range file.Headers {
			s.Headers[k] = v
		}
	}
	s.endpointFrom, s.tracesEndpointFrom = "the tracing block's endpoint", "the tracing block's tracesEndpoint"
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, "OTEL_") {
			env[k] = v
		}
	}
	set := func(dst *string, key string) bool {
		if v, ok := env[key]; ok && strings.TrimSpace(v) != "" {
			*dst = strings.TrimSpace(v)
			return true
		}
		return false
	}
	set(&s.Exporter, "OTEL_TRACES_EXPORTER")
	if set(&s.Endpoint, "OTEL_EXPORTER_OTLP_ENDPOINT") {
		s.endpointFrom = "OTEL_EXPORTER_OTLP_ENDPOINT"
	}
	if set(&s.TracesEndpoint, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
		s.tracesEndpointFrom = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	}
	set(&s.Protocol, "OTEL_EXPORTER_OTLP_PROTOCOL")
	set(&s.Protocol, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	set(&s.ServiceName, "OTEL_SERVICE_NAME")
	set(&s.Sampler, "OTEL_TRACES_SAMPLER")
	set(&s.SamplerArg, "OTEL_TRACES_SAMPLER_ARG")
	for _, key := range []string{"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"} {
		if v, ok := env[key]; ok && strings.TrimSpace(v) != "" {
			h, err := parseHeaders(v)
			if err != nil {
				return Config{}, fmt.Errorf("%s: %w", key, err)
			}
			if s.Headers == nil {
				s.Headers = map[string]string{}
			}
			for k, val := range h {
				s.Headers[k] = val
			}
		}
	}
	if v, ok := env["OTEL_SDK_DISABLED"]; ok && strings.TrimSpace(v) != "" {
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return Config{}, fmt.Errorf("OTEL_SDK_DISABLED is %q: it must be true or false", v)
		}
		s.Disabled = b
	}
	return s.check()
}

// check validates the merged settings.
func (s Settings) check() (Config, error) {
	exporter := strings.ToLower(s.Exporter)
	switch exporter {
	case "", "otlp", "none":
	case "console":
		// Over stdio the standard output is the MCP channel.
		return Config{}, errors.New("tracing exporter \"console\" is not offered: standard output is the MCP channel over stdio; use otlp")
	default:
		return Config{}, fmt.Errorf("tracing exporter %q is not offered: use otlp or none", s.Exporter)
	}
	if s.Disabled || exporter == "none" || (exporter == "" && s.Endpoint == "" && s.TracesEndpoint == "") {
		return Config{}, nil
	}
	switch s.Protocol {
	case "", ProtocolHTTPProtobuf:
	default:
		return Config{}, fmt.Errorf("tracing protocol %q is not offered by this build: use %s", s.Protocol, ProtocolHTTPProtobuf)
	}
	u, from := s.TracesEndpoint, s.tracesEndpointFrom
	if u == "" {
		base := s.Endpoint
		if base == "" {
			base = "http://localhost:4318"
		}
		if pu, err := url.Parse(base); err == nil && (pu.RawQuery != "" || pu.ForceQuery || pu.Fragment != "") {
			return Config{}, queryRefused(s.endpointFrom)
		}
		u, from = strings.TrimRight(base, "/")+"/v1/traces", s.endpointFrom
	}
	pu, err := url.Parse(u)
	if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" || pu.User != nil {
		// The URL is not echoed: it may carry credentials.
		return Config{}, fmt.Errorf("tracing endpoint is not an http:// or https:// URL with a host (and no user or password); it is given by %s", from)
	}
	if pu.RawQuery != "" || pu.ForceQuery || pu.Fragment != "" {
		return Config{}, queryRefused(from)
	}
	sampler, err := samplerOf(s.Sampler, s.SamplerArg)
	if err != nil {
		return Config{}, err
	}
	for k := range s.Headers {
		if k == "" || strings.ContainsAny(k, " \t\r\n:") {
			return Config{}, fmt.Errorf("tracing header name %q is not a header name", k)
		}
	}
	name := s.ServiceName
	if name == "" {
		name = DefaultServiceName
	}
	return Config{Enabled: true, URL: u, Headers: s.Headers, ServiceName: name, Sampler: sampler}, nil
}

// queryRefused is the refusal of an endpoint URL with a query or a
// fragment: a credential there would be quoted by every error that names
// the URL. The URL is not echoed.
func queryRefused(from string) error {
	return fmt.Errorf("tracing endpoint has a query or a fragment (after ? or #), which the exporter does not send; "+
		"it is given by %s: give the collector's URL without it, and a credential as a header "+
		"(OTEL_EXPORTER_OTLP_HEADERS, or the tracing block's headers)", from)
}

// parseHeaders reads OTEL_EXPORTER_OTLP_HEADERS: comma-separated
// key=value pairs, values percent-encoded.
func parseHeaders(v string) (map[string]string, error) {
	out := map[string]string{}
	for _, pair := range strings.Split(v, ",") {
		if strings.TrimSpace(pair) == "" {
			continue
		}
		k, val, ok := strings.Cut(pair, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			// The pair is not echoed: it may be a credential.
			return nil, errors.New("a header is not of the form key=value")
		}
		dec, err := url.PathUnescape(strings.TrimSpace(val))
		if err != nil {
			return nil, fmt.Errorf("the value of header %q is not percent-encoded", k)
		}
		out[k] = dec
	}
	return out, nil
}

// samplerOf is OTEL_TRACES_SAMPLER's sampler; the ratio samplers take
// their ratio from the argument (1 when unset).
func samplerOf(name, arg string) (sdktrace.Sampler, error) {
	ratio := 1.0
	if arg != "" {
		r, err := strconv.ParseFloat(arg, 64)
		if err != nil || r < 0 || r > 1 {
			return nil, fmt.Errorf("tracing sampler argument %q is not a ratio between 0 and 1", arg)
		}
		ratio = r
	}
	switch name {
	case "", "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(ratio), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio)), nil
	}
	return nil, fmt.Errorf("tracing sampler %q is not one of always_on, always_off, traceidratio, "+
		"parentbased_always_on, parentbased_always_off, parentbased_traceidratio", name)
}

// Tracing is a running set-up: its provider, and how to flush it.
type Tracing struct {
	provider trace.TracerProvider
	shutdown func(context.Context) error
	enabled  bool
}

// Off is tracing turned off: no-op tracers, nothing to flush.
func Off() *Tracing {
	return &Tracing{provider: noop.NewTracerProvider(), shutdown: func(context.Context) error { return nil }}
}

// Start builds the provider cfg describes; version is service.version.
// The exporter connects lazily, so an absent collector does not stop a
// start: its spans are dropped, and log says so at WARN, once a minute
// (see errorReporter; otel's own error output goes there too).
func Start(ctx context.Context, cfg Config, version string, log *slog.Logger) (*Tracing, error) {
	if !cfg.Enabled {
		return Off(), nil
	}
	// Before the exporter is made: it logs a malformed OTEL_* value of
	// its own reading through otel's logger.
	r := newErrorReporter(log, nil)
	r.install()
	opts := []otlptracehttp.Option{otlptracehttp.WithEndpointURL(cfg.URL)}
	if len(cfg.Headers) > 0 {
		opts = append(opts, otlptracehttp.WithHeaders(cfg.Headers))
	}
	exp, err := newOTLPExporter(ctx, otlptracehttp.NewClient(opts...))
	if err != nil {
		return nil, fmt.Errorf("tracing exporter: %w", err)
	}
	return WithExporter(reportingExporter{SpanExporter: exp, r: r}, cfg, version), nil
}

// WithExporter is Start with the exporter given (tests pass an in-memory
// one); spans are batched.
func WithExporter(exp sdktrace.SpanExporter, cfg Config, version string) *Tracing {
	sampler := cfg.Sampler
	if sampler == nil {
		sampler = sdktrace.ParentBased(sdktrace.AlwaysSample())
	}
	name := cfg.ServiceName
	if name == "" {
		name = DefaultServiceName
	}
	res := resource.NewSchemaless(attribute.String("service.name", name), attribute.String("service.version", version))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithSampler(sampler), sdktrace.WithResource(res))
	return &Tracing{provider: tp, shutdown: tp.Shutdown, enabled: true}
}

// Flush hands every span ended so far to the exporter.
func (t *Tracing) Flush(ctx context.Context) error {
	if tp, ok := t.provider.(*sdktrace.TracerProvider); ok {
		return tp.ForceFlush(ctx)
	}
	return nil
}

// Enabled reports whether spans are exported.
func (t *Tracing) Enabled() bool { return t != nil && t.enabled }

// Provider is the tracer provider (a no-op one when off).
func (t *Tracing) Provider() trace.TracerProvider {
	if t == nil {
		return noop.NewTracerProvider()
	}
	return t.provider
}

// Tracer is pdmcp's tracer.
func (t *Tracing) Tracer() trace.Tracer { return t.Provider().Tracer(InstrumentationName) }

// Shutdown flushes the spans still buffered and stops the exporter, within
// ShutdownTimeout.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownTimeout)
	defer cancel()
	return t.shutdown(ctx)
}

// Propagator is the W3C trace context and baggage, the formats traces
// cross into and out of pdmcp in (params._meta, the Gateway's headers).
func Propagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
}

// Child starts an INTERNAL span named name under ctx's span, made by the
// provider that made it: the parts a request passes through (the pool, the
// journal, the file steps) need no tracer of their own. Under no recording
// span it starts nothing and returns a no-op span, so it costs a lookup
// when tracing is off.
func Child(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, trace.SpanFromContext(context.Background())
	}
	return parent.TracerProvider().Tracer(InstrumentationName).Start(ctx, name, trace.WithAttributes(attrs...))
}

// Fail marks span failed with a constant code (a refusal code, an error
// class): error.type and the status both carry it, never an error's text,
// which may quote what a span must not hold.
func Fail(span trace.Span, code string) {
	if code == "" {
		code = "_OTHER"
	}
	span.SetAttributes(attribute.String("error.type", code))
	span.SetStatus(codes.Error, code)
}
