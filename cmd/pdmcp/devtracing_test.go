package main

import (
	"slices"
	"testing"
)

// TestDevHandsOnlyOTELVariablesToItsServer: pdmcp dev's server reads its
// tracing from the OTEL_* variables and sees nothing else of the shell's
// environment (a model key there must neither reach it nor stop dev).
func TestDevHandsOnlyOTELVariablesToItsServer(t *testing.T) {
	got := otelEnviron([]string{"PATH=/bin", "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318", "ANTHROPIC_API_KEY=sk",
		"OTEL_SERVICE_NAME=pdmcp-dev", "XOTEL_Y=1", "otel_lower=1"})
	want := []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318", "OTEL_SERVICE_NAME=pdmcp-dev"}
	if !slices.Equal(got, want) {
		t.Fatalf("otelEnviron = %v, want %v", got, want)
	}
}
