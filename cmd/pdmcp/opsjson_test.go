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
	"time"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/reference"
	"github.com/pdmcp/pdmcp/gateway/reference/reftest"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/operator"
	"github.com/pdmcp/pdmcp/server/journal"
)

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
	code, stdout, stderr := runCLI(t, "export-manifest", "--manifest", manifest, "--out", out)
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
	code, stdout, stderr = runCLI(t, "export-manifest", "--manifest", manifest, "--out", "-")
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
	code, stdout, stderr = runCLI(t, "export-manifest", "--manifest", manifest, "--out", out2, "--json")
	if code != 0 {
		t.Fatalf("--json: exit %d: %s", code, stderr)
	}
	var rep exportJSON
	opsDecode(t, stdout, &rep)
	if rep.Out != out2 || !rep.Written || rep.Orphans == nil || len(rep.Orphans) != 0 {
		t.Fatalf("--json: %+v", rep)
	}

	code, stdout, stderr = runCLI(t, "versions", "--manifest", manifest, "--json")
	if code != 0 {
		t.Fatalf("versions --json: exit %d: %s", code, stderr)
	}
	var vs versionsJSON
	opsDecode(t, stdout, &vs)
	if vs.Versions == nil {
		t.Fatalf("versions --json: %s", stdout)
	}
	for _, e := range vs.Versions {
		if e.Source != "manifest" || e.Path == "" {
			t.Errorf("versions --json entry %+v", e)
		}
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
		{"no --out", []string{"--manifest", manifest}, exitUsage, "pdmcp export-manifest: --out is required (the file to write"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, append([]string{"export-manifest"}, tc.args...)...)
			if code != tc.code || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, want %d; stderr %q, want %q", code, tc.code, stderr, tc.want)
			}
		})
	}
}

// TestOperatorJSONAndOldSpellings walks seed, acl, protect and seed
// --cleanup as an operator would, each with --json (decoded strictly into
// its documented shape) and each old spelling (--out-dir, --record,
// --cleanup FILE, --cleanup=FILE): they still work, warn on stderr (never
// on stdout, which holds the JSON) and set the new flag.
func TestOperatorJSONAndOldSpellings(t *testing.T) {
	env := reftest.Start(t, reference.Config{})
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.json")
	if code, _, stderr := runCLI(t, "bootstrap", "--endpoint", env.URL, "--trust-file", env.CAFile, "--admin-user", reftest.AdminUser,
		"--admin-password-file", env.AdminPasswordFile, "--out", cfg); code != 0 {
		t.Fatalf("bootstrap: exit %d: %s", code, stderr)
	}
	warns := func(t *testing.T, stderr, old, new string) {
		t.Helper()
		if want := "Flag --" + old + " has been deprecated, use --" + new + " instead"; !strings.Contains(stderr, want) {
			t.Errorf("no warning %q on stderr: %s", want, stderr)
		}
	}

	data := filepath.Join(dir, "task-data")
	code, stdout, stderr := runCLI(t, "seed", "--config", cfg, "--out-dir", data, "--json")
	if code != 0 {
		t.Fatalf("seed: exit %d: %s", code, stderr)
	}
	warns(t, stderr, "out-dir", "out")
	var seeded seedJSON
	opsDecode(t, stdout, &seeded)
	rec, err := grant.LoadSeedRecord(seeded.SeedRecord)
	if err != nil {
		t.Fatal(err)
	}
	if seeded.Out != data || seeded.Manifest != rec.Manifest || filepath.Dir(seeded.Manifest) != mustAbs(t, data) ||
		seeded.AgentUser != rec.AgentUser || seeded.OwnerUser != rec.OwnerUser || !slices.Contains(seeded.Principals, rec.AgentUser) {
		t.Fatalf("seed --json %+v, record %+v", seeded, rec)
	}

	// Seeding over it is refused, naming the record that removes it.
	if code, _, stderr := runCLI(t, "seed", "--config", cfg, "--out", data); code != exitRefused ||
		!strings.Contains(stderr, "exists: the folder holds an earlier seed; seed into an empty folder") ||
		!strings.Contains(stderr, "pdmcp seed --cleanup --seed-record "+seeded.SeedRecord+" removes it") {
		t.Fatalf("seed over a seed: exit %d: %s", code, stderr)
	}

	code, stdout, stderr = runCLI(t, "acl", "list", "--config", cfg, "--manifest", seeded.Manifest, "--document", "proposal-aurora",
		"--record", seeded.SeedRecord, "--json")
	if code != 0 {
		t.Fatalf("acl list: exit %d: %s", code, stderr)
	}
	warns(t, stderr, "record", "seed-record")
	var listed operator.ACLReport
	opsDecode(t, stdout, &listed)
	if listed.Action != "list" || listed.Kind != "document" || listed.Name != "proposal-aurora" || rightsOf(&listed, rec.AgentUser) != "READ" {
		t.Fatalf("acl list --json: %+v", listed)
	}

	code, stdout, stderr = runCLI(t, "protect", "--config", cfg, "--manifest", seeded.Manifest, "--source", ccdSource,
		"--document-id", "ccd-0001", "--record", seeded.SeedRecord, "--json")
	if code != 0 {
		t.Fatalf("protect: exit %d: %s", code, stderr)
	}
	warns(t, stderr, "record", "seed-record")
	var prot protectJSON
	opsDecode(t, stdout, &prot)
	m, err := grant.LoadManifest(seeded.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	if prot.DocumentID != "ccd-0001" || prot.Form != "ccda" || prot.AlreadyDone || prot.CreatedKeys != len(m.CompoundKeys) ||
		len(prot.Fragments) != len(m.Documents["ccd-0001"].Fragments) {
		t.Fatalf("protect --json: %+v", prot)
	}
	for _, f := range prot.Fragments {
		if f.FragmentID == "" || f.DataType == "" || f.Bytes <= 0 || (f.Key != "created" && f.Key != "reused") {
			t.Errorf("protect --json fragment %+v", f)
		}
	}
	recordHolds := func() int {
		r, err := grant.LoadSeedRecord(seeded.SeedRecord)
		if err != nil {
			t.Fatal(err)
		}
		return len(r.Keys)
	}
	keys := recordHolds()
	if keys <= len(m.CompoundKeys) {
		t.Fatalf("--record did not set --seed-record: the record holds %d keys", keys)
	}

	code, stdout, stderr = runCLI(t, "seed", "--config", cfg, "--cleanup", "--seed-record", seeded.SeedRecord, "--json")
	if code != 0 {
		t.Fatalf("seed --cleanup: exit %d: %s", code, stderr)
	}
	var cleaned seedCleanupJSON
	opsDecode(t, stdout, &cleaned)
	if cleaned.SeedRecord != seeded.SeedRecord || cleaned.Removed.Keys != keys || cleaned.Removed.Principals != len(rec.Principals) ||
		len(cleaned.SavedVersionsLost) != len(prot.Fragments) {
		t.Fatalf("seed --cleanup --json: %+v (the record held %d keys, %d principals)", cleaned, keys, len(rec.Principals))
	}

	// The protected sections are the saved versions under the removed keys.
	for _, p := range cleaned.SavedVersionsLost {
		if !strings.HasPrefix(p, "documents/ccd-0001/") {
			t.Errorf("seed --cleanup --json names %s as lost", p)
		}
	}

	// The old forms: the record named as --cleanup's value, or after it.
	for _, args := range [][]string{{"--cleanup", seeded.SeedRecord}, {"--cleanup=" + seeded.SeedRecord}} {
		code, stdout, stderr = runCLI(t, append([]string{"seed", "--config", cfg}, args...)...)
		if code != 0 || stdout != "SEED CLEANUP: OK\n" {
			t.Fatalf("seed %v: exit %d: %s%s", args, code, stdout, stderr)
		}
		if want := "Flag --cleanup FILE has been deprecated, use --cleanup --seed-record " + seeded.SeedRecord + " instead"; !strings.Contains(stderr, want) {
			t.Errorf("seed %v: no warning %q: %s", args, want, stderr)
		}
	}

	// A Gateway that does not answer: exit status 4, said so, never as a
	// refusal.
	sc, err := gateway.LoadServiceConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sc.GatewayURL = "https://127.0.0.1:1"
	dead := filepath.Join(dir, "dead-config.json")
	if err := gateway.WriteServiceConfig(dead, sc); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"seed", "--config", dead, "--out", filepath.Join(dir, "dead-data")},
		{"acl", "list", "--config", dead, "--manifest", seeded.Manifest, "--document", "proposal-aurora"},
		{"protect", "--config", dead, "--manifest", seeded.Manifest, "--source", ccdSource, "--document-id", "ccd-0002", "--seed-record", seeded.SeedRecord},
	} {
		code, _, stderr := runCLI(t, args...)
		if code != exitUnreachable || !strings.Contains(stderr, "the Gateway at https://127.0.0.1:1 did not answer: ") ||
			strings.Contains(stderr, "refused "+api.CodeUnreachable) {
			t.Errorf("pdmcp %s: exit %d, want %d saying the Gateway did not answer: %s", args[0], code, exitUnreachable, stderr)
		}
	}
}

// TestSeedAndProtectCommandLine: the command-line mistakes of seed and
// protect, refused before config.json is read or anything sent (exit 2),
// each by its text.
func TestSeedAndProtectCommandLine(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "no-config.json")
	manifest := filepath.Join(dir, "manifest.json")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"seed without --out", []string{"seed", "--config", cfg}, "--out is required: the empty folder the seed is written to"},
		{"seed --cleanup without a record", []string{"seed", "--config", cfg, "--cleanup"}, "--cleanup needs --seed-record FILE"},
		{"seed with an argument", []string{"seed", "--config", cfg, "--out", dir, "extra"}, `pdmcp seed takes no arguments, and was given "extra"`},
		{"seed --cleanup with two", []string{"seed", "--config", cfg, "--cleanup", "a", "b"}, `pdmcp seed takes no arguments, and was given "a"`},
		{"protect with an argument", []string{"protect", "--config", cfg, "--manifest", manifest, "ccd.xml"}, `pdmcp protect takes no arguments, and was given "ccd.xml"`},
		{"seed without --config", []string{"seed", "--out", dir}, "pdmcp seed: --config is required (config.json from pdmcp bootstrap)"},
		{"protect without a source", []string{"protect", "--config", cfg, "--manifest", manifest, "--document-id", "d"},
			"--source and --document-id are required (or --abandon ID)"},
		{"protect --abandon with a source", []string{"protect", "--config", cfg, "--manifest", manifest, "--abandon", "d", "--source", ccdSource},
			"--abandon names the document itself; it takes no --source or --document-id"},
		{"protect a bad --key", []string{"protect", "--config", cfg, "--manifest", manifest, "--source", ccdSource, "--document-id", "d", "--key", "results"},
			"--key"},
		{"protect a bad --hl7-segment", []string{"protect", "--config", cfg, "--manifest", manifest, "--source", ccdSource, "--document-id", "d",
			"--hl7-segment", "nonsense"}, "--hl7-segment nonsense: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, tc.args...)
			if code != exitUsage || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, want %d; stderr %q, want %q", code, exitUsage, stderr, tc.want)
			}
		})
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestOperatorHelp: each operator command's help has examples of it (their
// flags are held to the command by TestEveryCommandHasExamples) and
// documents the object --json prints (acl's, for its subcommands).
func TestOperatorHelp(t *testing.T) {
	for _, path := range [][]string{{"seed"}, {"grant"}, {"bootstrap"}, {"protect"}, {"close-step"}, {"versions"},
		{"export-manifest"}, {"acl"}, {"acl", "list"}, {"acl", "grant"}, {"acl", "revoke"}} {
		t.Run(strings.Join(path, " "), func(t *testing.T) {
			code, stdout, stderr := runCLI(t, append(slices.Clone(path), "--help")...)
			if code != 0 || !strings.Contains(stdout, "Examples:\n  pdmcp "+strings.Join(path, " ")) {
				t.Fatalf("--help: exit %d, no examples of pdmcp %s:\n%s%s", code, strings.Join(path, " "), stdout, stderr)
			}
			// acl's subcommands share acl's object, documented there.
			if len(path) == 1 && !strings.Contains(stdout, "--json prints one object (members are only ever added):") {
				t.Errorf("--help documents no --json object:\n%s", stdout)
			}
		})
	}
}

// TestExportManifestOrphans: versions of a destination the manifest no
// longer names refuse the export (exit 3, listed, nothing written; with
// --json the object says so); --allow-orphans writes it without them.
func TestExportManifestOrphans(t *testing.T) {
	ctx := context.Background()
	manifest, dir := grantFixture(t)
	j, err := journal.Open(ctx, journal.DefaultPath(manifest))
	if err != nil {
		t.Fatal(err)
	}
	gone := journal.Version{Destination: "gone", Version: 1, Path: "results/gone.v1.bin", IV: "AAAAAAAAAAAAAAAAAAAAAA==",
		SHA256: strings.Repeat("a", 64), SavedAt: time.Now().UTC()}
	if _, err := j.RestoreVersions(ctx, []journal.Version{gone}); err != nil {
		t.Fatal(err)
	}
	j.Close()
	out := filepath.Join(dir, "merged.json")

	code, stdout, stderr := runCLI(t, "export-manifest", "--manifest", manifest, "--out", out)
	if code != exitRefused || !strings.Contains(stdout, "  result gone v1 results/gone.v1.bin") ||
		!strings.Contains(stderr, "1 versions (of destination gone); nothing was written") {
		t.Fatalf("orphans: exit %d: %s%s", code, stdout, stderr)
	}
	code, stdout, stderr = runCLI(t, "export-manifest", "--manifest", manifest, "--out", out, "--json")
	var rep exportJSON
	opsDecode(t, stdout, &rep)
	if code != exitRefused || rep.Written || len(rep.Orphans) != 1 || rep.Orphans[0] != (orphanJSON{Kind: "result", Destination: "gone", Version: 1, Path: gone.Path}) {
		t.Fatalf("orphans --json: exit %d: %+v %s", code, rep, stderr)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Fatalf("a refused export was written: %v", err)
	}
	code, stdout, stderr = runCLI(t, "export-manifest", "--manifest", manifest, "--out", out, "--allow-orphans", "--json")
	rep = exportJSON{}
	opsDecode(t, stdout, &rep)
	if code != 0 || !rep.Written || len(rep.Orphans) != 1 {
		t.Fatalf("--allow-orphans --json: exit %d: %+v %s", code, rep, stderr)
	}
	if _, err := grant.LoadManifest(out); err != nil {
		t.Fatalf("the export: %v", err)
	}
}
