package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
)

// opsRun runs pdmcp in this process, as main does, and returns what it
// wrote and its exit status.
func opsRun(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var o, e strings.Builder
	code = runMain(context.Background(), args, &o, &e)
	return o.String(), e.String(), code
}

// opsDecode decodes s, one JSON object and nothing after it, into v,
// refusing members v does not have: the documented shape, exactly.
func opsDecode(t *testing.T, s string, v any) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("not the documented JSON object: %v\n%s", err, s)
	}
	var rest json.RawMessage
	if err := dec.Decode(&rest); err == nil || !bytes.Equal(bytes.TrimSpace([]byte(s[dec.InputOffset():])), nil) {
		t.Fatalf("more after the JSON object: %s", s)
	}
}

// dirNames lists dir's entries, sorted.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	slices.Sort(out)
	return out
}
