package telemetry

import (
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// collectorConfig is the part of an OpenTelemetry collector's (and Jaeger
// v2's) configuration these checks read.
type collectorConfig struct {
	Receivers  map[string]any `yaml:"receivers"`
	Processors map[string]any `yaml:"processors"`
	Exporters  map[string]any `yaml:"exporters"`
	Extensions map[string]any `yaml:"extensions"`
	Service    struct {
		Extensions []string `yaml:"extensions"`
		Pipelines  map[string]struct {
			Receivers  []string `yaml:"receivers"`
			Processors []string `yaml:"processors"`
			Exporters  []string `yaml:"exporters"`
		} `yaml:"pipelines"`
	} `yaml:"service"`
}

// envDefault is the collector's ${env:NAME:-default}: the default is what
// a run without the variable listens on.
var envDefault = regexp.MustCompile(`^\$\{env:[A-Z_]+:-(.*)\}$`)

// endpoints is every "endpoint" value in v, with ${env:…:-default} read as
// its default.
func endpoints(v any, out *[]string) {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			if s, ok := x.(string); ok && k == "endpoint" {
				if m := envDefault.FindStringSubmatch(s); m != nil {
					s = m[1]
				}
				*out = append(*out, s)
				continue
			}
			endpoints(x, out)
		}
	case []any:
		for _, x := range t {
			endpoints(x, out)
		}
	}
}

// TestDeployTracingConfigs parses the example Jaeger and collector
// configurations in deploy/tracing: each pipeline names only components
// the file defines (the type's name before any "/"), each extension used
// is defined, and every endpoint, listening or forwarding, is on loopback.
func TestDeployTracingConfigs(t *testing.T) {
	for _, name := range []string{"jaeger.yaml", "otel-collector.yaml"} {
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join("..", "..", "deploy", "tracing", name))
			if err != nil {
				t.Fatal(err)
			}
			var c collectorConfig
			if err := yaml.Unmarshal(raw, &c); err != nil {
				t.Fatalf("not YAML: %v", err)
			}
			traces, ok := c.Service.Pipelines["traces"]
			if !ok || len(traces.Receivers) == 0 || len(traces.Exporters) == 0 {
				t.Fatalf("no traces pipeline with receivers and exporters")
			}
			for _, p := range c.Service.Pipelines {
				for kind, list := range map[string][]string{"receiver": p.Receivers, "processor": p.Processors, "exporter": p.Exporters} {
					defined := map[string]map[string]any{"receiver": c.Receivers, "processor": c.Processors, "exporter": c.Exporters}[kind]
					for _, n := range list {
						if _, ok := defined[n]; !ok {
							t.Errorf("the pipeline names %s %q, which the file does not define", kind, n)
						}
					}
				}
			}
			for _, n := range c.Service.Extensions {
				if _, ok := c.Extensions[n]; !ok {
					t.Errorf("service names extension %q, which the file does not define", n)
				}
			}
			var all map[string]any
			if err := yaml.Unmarshal(raw, &all); err != nil {
				t.Fatal(err)
			}
			var eps []string
			endpoints(all, &eps)
			if len(eps) == 0 {
				t.Fatal("no endpoint")
			}
			for _, e := range eps {
				host := e
				if i := strings.Index(host, "://"); i >= 0 {
					host = host[i+3:]
				}
				h, _, err := net.SplitHostPort(host)
				if err != nil {
					t.Errorf("endpoint %q has no host:port", e)
					continue
				}
				if ip := net.ParseIP(h); h != "localhost" && (ip == nil || !ip.IsLoopback()) {
					t.Errorf("endpoint %q is not on loopback", e)
				}
			}
		})
	}
}
