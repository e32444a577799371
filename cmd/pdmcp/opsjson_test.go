package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pdmcp/pdmcp/grant"
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

// TestExportManifestOutputs: export-manifest --out FILE leaves FILE and
// nothing else new in the folder (no lock file); --out - writes the
// manifest to standard output and creates no file; --json prints the
// documented object. Its refusals are worded and have their exit status.
func TestExportManifestOutputs(t *testing.T) {
	manifest, dir := grantFixture(t)
	before := dirNames(t, dir)
	out := filepath.Join(dir, "merged.json")
	stdout, stderr, code := opsRun(t, "export-manifest", "--manifest", manifest, "--out", out)
	if code != 0 || !strings.HasSuffix(stdout, "EXPORT-MANIFEST: OK\n") {
		t.Fatalf("exit %d: %s%s", code, stdout, stderr)
	}
	if got, want := dirNames(t, dir), slices.Sorted(slices.Values(append(before, "merged.json"))); !slices.Equal(got, want) {
		t.Fatalf("the folder holds %v, want %v", got, want)
	}
	if _, err := grant.LoadManifest(out); err != nil {
		t.Fatalf("the export is not a manifest: %v", err)
	}

	t.Chdir(dir)
	before = dirNames(t, dir)
	stdout, stderr, code = opsRun(t, "export-manifest", "--manifest", manifest, "--out", "-")
	if code != 0 || stderr != "" {
		t.Fatalf("--out -: exit %d: %s", code, stderr)
	}
	var m grant.Manifest
	opsDecode(t, stdout, &m)
	if want, _ := os.ReadFile(out); stdout != string(want) {
		t.Fatalf("--out - printed another manifest than the file:\n%s", stdout)
	}
	if after := dirNames(t, dir); !slices.Equal(after, before) {
		t.Fatalf("--out - changed the folder: %v, was %v", after, before)
	}

	out2 := filepath.Join(dir, "merged2.json")
	stdout, stderr, code = opsRun(t, "export-manifest", "--manifest", manifest, "--out", out2, "--json")
	if code != 0 {
		t.Fatalf("--json: exit %d: %s", code, stderr)
	}
	var rep exportJSON
	opsDecode(t, stdout, &rep)
	if rep.Out != out2 || rep.Orphans == nil || len(rep.Orphans) != 0 {
		t.Fatalf("--json: %+v", rep)
	}

	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"over the manifest", []string{"--manifest", manifest, "--out", manifest}, exitRefused, "would replace the manifest or journal it is made from"},
		{"json to stdout", []string{"--manifest", manifest, "--out", "-", "--json"}, exitUsage, "--json and --out - both write to standard output"},
		{"no journal", []string{"--manifest", manifest, "--journal", filepath.Join(dir, "nosuch.sqlite"), "--out", out}, exitUsage, "nosuch.sqlite"},
		{"no manifest", []string{"--manifest", filepath.Join(dir, "nosuch.json"), "--out", out}, exitUsage, "nosuch.json"},
		{"no --out", []string{"--manifest", manifest}, exitUsage, `required flag(s) "out" not set`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, code := opsRun(t, append([]string{"export-manifest"}, tc.args...)...)
			if code != tc.code || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, want %d; stderr %q, want %q", code, tc.code, stderr, tc.want)
			}
		})
	}
}
