package telemetry

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestResolve(t *testing.T) {
	for _, tc := range []struct {
		name     string
		file     *Settings
		env      []string
		enabled  bool
		url      string
		service  string
		sampler  string
		headers  map[string]string
		errMatch string
	}{
		{name: "nothing configured is off", env: []string{"PATH=/bin"}},
		{name: "exporter none is off", env: []string{"OTEL_TRACES_EXPORTER=none", "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318"}},
		{name: "an endpoint turns it on", env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318/"},
			enabled: true, url: "http://127.0.0.1:4318/v1/traces", service: "pdmcp", sampler: "ParentBased{root:AlwaysOnSampler"},
		{name: "otlp alone takes the default endpoint", env: []string{"OTEL_TRACES_EXPORTER=otlp"},
			enabled: true, url: "http://localhost:4318/v1/traces", service: "pdmcp"},
		{name: "traces endpoint is used as it is", env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://a:1", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=https://b:2/x"},
			enabled: true, url: "https://b:2/x", service: "pdmcp"},
		{name: "disabled wins", env: []string{"OTEL_SDK_DISABLED=true", "OTEL_TRACES_EXPORTER=otlp"}},
		{name: "service name, sampler and headers", env: []string{"OTEL_TRACES_EXPORTER=otlp", "OTEL_SERVICE_NAME=ops-pdmcp",
			"OTEL_TRACES_SAMPLER=traceidratio", "OTEL_TRACES_SAMPLER_ARG=0.25", "OTEL_EXPORTER_OTLP_HEADERS=api-key=a%20b,x=1"},
			enabled: true, url: "http://localhost:4318/v1/traces", service: "ops-pdmcp", sampler: "TraceIDRatioBased{0.25}",
			headers: map[string]string{"api-key": "a b", "x": "1"}},
		{name: "the file alone", file: &Settings{Endpoint: "http://127.0.0.1:9", ServiceName: "f", Headers: map[string]string{"k": "v"}},
			enabled: true, url: "http://127.0.0.1:9/v1/traces", service: "f", headers: map[string]string{"k": "v"}},
		{name: "the environment overrides the file", file: &Settings{Endpoint: "http://127.0.0.1:9", ServiceName: "f"},
			env:     []string{"OTEL_SERVICE_NAME=e", "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:8"},
			enabled: true, url: "http://127.0.0.1:8/v1/traces", service: "e"},
		{name: "the environment turns the file off", file: &Settings{Endpoint: "http://127.0.0.1:9"}, env: []string{"OTEL_SDK_DISABLED=true"}},
		{name: "console refused", env: []string{"OTEL_TRACES_EXPORTER=console"}, errMatch: "standard output is the MCP channel"},
		{name: "unknown exporter refused", env: []string{"OTEL_TRACES_EXPORTER=zipkin"}, errMatch: `"zipkin" is not offered`},
		{name: "grpc refused", env: []string{"OTEL_TRACES_EXPORTER=otlp", "OTEL_EXPORTER_OTLP_PROTOCOL=grpc"}, errMatch: `protocol "grpc"`},
		{name: "bad endpoint refused", env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT=ftp://x"}, errMatch: "not an http:// or https:// URL with a host (and no user or password); it is given by OTEL_EXPORTER_OTLP_ENDPOINT"},
		{name: "endpoint with a password refused, not echoed", env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT=https://u:secretpw@x"}, errMatch: "no user or password"},
		{name: "endpoint with a query refused, not echoed", env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT=https://x/?token=secret1"},
			errMatch: "has a query or a fragment (after ? or #), which the exporter does not send; it is given by OTEL_EXPORTER_OTLP_ENDPOINT:"},
		{name: "traces endpoint with a query refused, not echoed", env: []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=https://x/v1/traces?token=secret2"},
			errMatch: "given by OTEL_EXPORTER_OTLP_TRACES_ENDPOINT:"},
		{name: "the file's endpoint with a query refused", file: &Settings{Endpoint: "https://x:4318?k=secret3"},
			errMatch: "given by the tracing block's endpoint:"},
		{name: "the file's traces endpoint with a fragment refused", file: &Settings{TracesEndpoint: "https://x/v1/traces#secret4"},
			errMatch: "a fragment (after ? or #), which the exporter does not send; it is given by the tracing block's tracesEndpoint:"},
		{name: "an empty query refused too", env: []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=https://x/v1/traces?"},
			errMatch: "has a query"},
		{name: "the environment's good endpoint over the file's bad one", file: &Settings{Endpoint: "https://x:4318?k=secret5"},
			env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:8"}, enabled: true, url: "http://127.0.0.1:8/v1/traces", service: "pdmcp"},
		{name: "bad sampler refused", env: []string{"OTEL_TRACES_EXPORTER=otlp", "OTEL_TRACES_SAMPLER=sometimes"}, errMatch: `"sometimes" is not one of`},
		{name: "bad ratio refused", env: []string{"OTEL_TRACES_EXPORTER=otlp", "OTEL_TRACES_SAMPLER=traceidratio", "OTEL_TRACES_SAMPLER_ARG=2"}, errMatch: "not a ratio"},
		{name: "bad disabled refused", env: []string{"OTEL_SDK_DISABLED=maybe"}, errMatch: "true or false"},
		{name: "bad header refused, not echoed", env: []string{"OTEL_TRACES_EXPORTER=otlp", "OTEL_EXPORTER_OTLP_HEADERS=secretvalue"}, errMatch: "key=value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Resolve(tc.file, tc.env)
			if tc.errMatch != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errMatch) {
					t.Fatalf("err = %v, want one saying %q", err, tc.errMatch)
				}
				if strings.Contains(err.Error(), "secret") {
					t.Fatalf("the error echoes a secret: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Enabled != tc.enabled {
				t.Fatalf("enabled = %v, want %v", cfg.Enabled, tc.enabled)
			}
			if !tc.enabled {
				return
			}
			if cfg.URL != tc.url || cfg.ServiceName != tc.service {
				t.Fatalf("url, service = %q, %q; want %q, %q", cfg.URL, cfg.ServiceName, tc.url, tc.service)
			}
			if tc.sampler != "" && !strings.HasPrefix(cfg.Sampler.Description(), tc.sampler) {
				t.Fatalf("sampler = %s, want %s", cfg.Sampler.Description(), tc.sampler)
			}
			for k, v := range tc.headers {
				if cfg.Headers[k] != v {
					t.Fatalf("header %s = %q, want %q", k, cfg.Headers[k], v)
				}
			}
		})
	}
}

// TestStartExportsToTheEndpointAndFlushesAtShutdown runs the real OTLP/HTTP
// exporter against an HTTP server on loopback: a span ended before
// Shutdown reaches it, with the configured header.
func TestStartExportsToTheEndpointAndFlushesAtShutdown(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, r.URL.Path+" "+r.Header.Get("Api-Key")+" "+string(b))
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	cfg, err := Resolve(nil, []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + srv.URL, "OTEL_EXPORTER_OTLP_HEADERS=api-key=k1"})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := Start(context.Background(), cfg, "v-test", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !tr.Enabled() {
		t.Fatal("not enabled")
	}
	_, span := tr.Tracer().Start(context.Background(), "a-span-name")
	span.End()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := tr.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) == 0 {
		t.Fatal("nothing exported")
	}
	if !strings.HasPrefix(got[0], "/v1/traces k1 ") || !strings.Contains(got[0], "a-span-name") || !strings.Contains(got[0], "v-test") {
		t.Fatalf("export = %q", got[0])
	}
}

func TestOffIsANoOp(t *testing.T) {
	tr := Off()
	_, span := tr.Tracer().Start(context.Background(), "x")
	if span.IsRecording() || span.SpanContext().IsValid() || tr.Enabled() {
		t.Fatal("an off tracer records")
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestMethodLabel: an MCP method a server receives is its own label;
// anything else, however it is spelled, is the one bounded _OTHER.
func TestMethodLabel(t *testing.T) {
	for _, tc := range []struct{ method, want string }{
		{"tools/call", "tools/call"},
		{"initialize", "initialize"},
		{"notifications/initialized", "notifications/initialized"},
		{"server/discover", "server/discover"},
		{"tools/call2", OtherValue},
		{"Tools/Call", OtherValue},
		{"secret/" + strings.Repeat("x", 100), OtherValue},
		{"", OtherValue},
	} {
		if got := MethodLabel(tc.method); got != tc.want {
			t.Errorf("MethodLabel(%.20q) = %q, want %q", tc.method, got, tc.want)
		}
	}
}
