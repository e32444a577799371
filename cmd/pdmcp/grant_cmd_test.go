package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/grant"
)

// grantFixture is a copy of grant's valid manifest in a fresh folder.
func grantFixture(t *testing.T) (manifest, dir string) {
	t.Helper()
	dir = t.TempDir()
	b, err := os.ReadFile(filepath.Join("..", "..", "grant", "testdata", "manifest-valid.json"))
	if err != nil {
		t.Fatal(err)
	}
	manifest = filepath.Join(dir, "manifest.json")
	if err := os.WriteFile(manifest, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return manifest, dir
}

// Why 1: a caller-identity grant written as the README writes it lasts a
// service's 30 days, not a task's 15 minutes; --ttl still decides when
// given (and its old spelling --ttl-seconds, converted from seconds, with
// a warning), and a stdio grant keeps its 15 minutes.
func TestGrantTTL(t *testing.T) {
	manifest, dir := grantFixture(t)
	for _, tc := range []struct {
		name     string
		args     []string
		want     time.Duration
		wantWarn bool
	}{
		{"caller identity", []string{"--caller-identity", "--all-approved"}, 30 * 24 * time.Hour, false},
		{"caller identity, ttl given", []string{"--caller-identity", "--all-approved", "--ttl", "15m"}, 15 * time.Minute, false},
		{"caller identity, old ttl-seconds", []string{"--caller-identity", "--all-approved", "--ttl-seconds", "900"}, 15 * time.Minute, true},
		{"local user", []string{"--local-user", "svc.agent", "--all-approved"}, 15 * time.Minute, false},
		{"local user, ttl 2h", []string{"--local-user", "svc.agent", "--all-approved", "--ttl", "2h"}, 2 * time.Hour, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(dir, "grant.json")
			code, stdout, stderr := runCLI(t, append([]string{"grant", "--manifest", manifest, "--out", out}, tc.args...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			if !strings.HasPrefix(stdout, "grant ") || !strings.Contains(stdout, "written to "+out) {
				t.Fatalf("prose: %q", stdout)
			}
			g, err := grant.Load(out)
			if err != nil {
				t.Fatal(err)
			}
			if got := g.NotAfter.Sub(g.IssuedAt); got != tc.want {
				t.Fatalf("the grant lasts %s, want %s", got, tc.want)
			}
			warned := strings.Contains(stderr, "Flag --ttl-seconds has been deprecated, use --ttl instead")
			if warned != tc.wantWarn {
				t.Fatalf("warned about --ttl-seconds: %v, want %v: %q", warned, tc.wantWarn, stderr)
			}
		})
	}
}

// TestGrantJSONAndStdout: --json prints the documented object (decoded
// strictly), matching the file written; --out - prints the grant itself and
// writes no file; --json with --out - is a usage error.
func TestGrantJSONAndStdout(t *testing.T) {
	manifest, dir := grantFixture(t)
	out := filepath.Join(dir, "grant.json")
	code, stdout, stderr := runCLI(t, "grant", "--manifest", manifest, "--out", out, "--local-user", "svc.agent",
		"--documents", "proposal-aurora", "--ttl", "1h", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var got grantJSON
	opsDecode(t, stdout, &got)
	g, err := grant.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != g.ID || got.Out != out || got.LocalUser != "svc.agent" || got.CallerIdentity ||
		!slices.Equal(got.Documents, []string{"proposal-aurora"}) || !slices.Equal(got.Tools, grant.DocumentTools()) ||
		got.Destinations == nil || got.Steps == nil || !got.NotAfter.Equal(g.NotAfter) || got.NotAfter.Sub(got.IssuedAt) != time.Hour ||
		got.Manifest != g.Manifest {
		t.Fatalf("--json: %+v\nfile: %+v", got, g)
	}

	t.Chdir(dir)
	before := dirNames(t, dir)
	code, stdout, stderr = runCLI(t, "grant", "--manifest", manifest, "--out", "-", "--local-user", "svc.agent", "--all-approved")
	if code != 0 {
		t.Fatalf("--out -: exit %d: %s", code, stderr)
	}
	var printed grant.Grant
	opsDecode(t, stdout, &printed)
	if printed.LocalUser != "svc.agent" || len(printed.Documents) == 0 || printed.Manifest != g.Manifest {
		t.Fatalf("--out - printed %+v", printed)
	}
	if after := dirNames(t, dir); !slices.Equal(after, before) {
		t.Fatalf("--out - changed the folder: %v, was %v", after, before)
	}

	code, _, stderr = runCLI(t, "grant", "--manifest", manifest, "--out", "-", "--local-user", "svc.agent", "--all-approved", "--json")
	if code != exitUsage || !strings.Contains(stderr, "--json and --out - both write to standard output") {
		t.Fatalf("--json --out -: exit %d: %s", code, stderr)
	}
}

// TestGrantRefusals: each refusal grant prints, by its text and exit
// status; nothing is written.
func TestGrantRefusals(t *testing.T) {
	manifest, dir := grantFixture(t)
	out := filepath.Join(dir, "grant.json")
	base := []string{"grant", "--manifest", manifest, "--out", out}
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no identity", []string{"--documents", "proposal-aurora"}, exitUsage, "give --local-user USER (a stdio task acts as that user) or --caller-identity"},
		{"both identities", []string{"--documents", "proposal-aurora", "--local-user", "svc.agent", "--caller-identity"}, exitUsage,
			"give --local-user or --caller-identity, not both"},
		{"all-approved and documents", []string{"--all-approved", "--local-user", "svc.agent", "--documents", "proposal-aurora"}, exitUsage,
			"--all-approved takes every approved document and every destination; do not also give --documents or --destinations"},
		{"ttl not a duration", []string{"--local-user", "svc.agent", "--all-approved", "--ttl", "15"}, exitUsage, `--ttl "15": not a duration`},
		{"ttl zero", []string{"--local-user", "svc.agent", "--all-approved", "--ttl", "0s"}, exitUsage, "--ttl 0s: the grant's life must be positive"},
		{"ttl-seconds not seconds", []string{"--local-user", "svc.agent", "--all-approved", "--ttl-seconds", "1h"}, exitUsage,
			`--ttl-seconds "1h": not a whole number`},
		{"all-approved, no seed record", []string{"--all-approved"}, exitUsage,
			"--all-approved without --local-user acts as the seed's agent user, named in the seed record (--seed-record)"},
		{"nothing granted", []string{"--local-user", "svc.agent"}, exitRefused, "names no document, no destination and no file root"},
		{"unknown document", []string{"--local-user", "svc.agent", "--documents", "nosuch"}, exitRefused, `documents[0]: no such document in the manifest: "nosuch"`},
		{"unknown tool", []string{"--local-user", "svc.agent", "--all-approved", "--tools", "read_file"}, exitRefused, "unknown tool"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, append(slices.Clone(base), tc.args...)...)
			if code != tc.code || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, want %d; stderr %q, want %q", code, tc.code, stderr, tc.want)
			}
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Fatal("a refused grant was written")
			}
		})
	}
	code, _, stderr := runCLI(t, "grant", "--manifest", manifest, "--local-user", "svc.agent", "--all-approved")
	if code != exitUsage || !strings.Contains(stderr, "pdmcp grant: --out is required (where to write the grant") {
		t.Fatalf("no --out: exit %d: %s", code, stderr)
	}
}

// TestGrantToolsCompletion: grant's --tools completes the tool names not
// yet given, after the commas typed so far.
func TestGrantToolsCompletion(t *testing.T) {
	for _, tc := range []struct {
		typed string
		want  []string
	}{
		{"list", []string{"list_approved_documents"}},
		{"read_protected_document,", []string{"read_protected_document,list_approved_documents", "read_protected_document,save_protected_result",
			"read_protected_document,encrypt_file", "read_protected_document,decrypt_file", "read_protected_document,read_protected_fragment",
			"read_protected_document,save_protected_fragment", "read_protected_document,hand_off", "read_protected_document,close_step"}},
		{"hand_off,close", []string{"hand_off,close_step"}},
		{"nosuch", nil},
	} {
		got, _ := completions(t, "grant", "--tools", tc.typed)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%q completes to %v, want %v", tc.typed, got, tc.want)
		}
	}
}

// Why 6: --file-root with documents and no --tools drops the document
// tools; grant says so on stderr. A grant for nothing is refused.
func TestGrantWarnsAndRefuses(t *testing.T) {
	manifest, dir := grantFixture(t)
	out := filepath.Join(dir, "grant.json")
	root := filepath.Join(dir, "files")
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := pdmcpCmd(t, "grant", "--manifest", manifest, "--out", out, "--local-user", "svc.agent", "--all-approved",
		"--file-root", root)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("grant: %v: %s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "warning: with --file-root and no --tools") {
		t.Fatalf("no warning that the document tools were dropped: %q", stderr.String())
	}

	out2 := filepath.Join(dir, "nothing.json")
	cmd = pdmcpCmd(t, "grant", "--manifest", manifest, "--out", out2, "--local-user", "svc.agent")
	stderr.Reset()
	cmd.Stderr = &stderr
	if err := cmd.Run(); err == nil || !strings.Contains(stderr.String(), "names no document, no destination and no file root") {
		t.Fatalf("a grant for nothing: %v: %s", err, stderr.String())
	}
	if _, err := os.Stat(out2); !os.IsNotExist(err) {
		t.Fatal("a refused grant was written")
	}
}

// TestGrantManifestCompletion: grant's --documents (the approved ones),
// --destinations and --steps, and acl's key names, complete from the
// manifest --manifest names.
func TestGrantManifestCompletion(t *testing.T) {
	manifest, _ := grantFixture(t)
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--documents", ""}, []string{"ccd-0001", "evaluation-criteria", "proposal-aurora"}},
		{[]string{"--documents", "ccd-0001,"}, []string{"ccd-0001,evaluation-criteria", "ccd-0001,proposal-aurora"}},
		{[]string{"--destinations", ""}, []string{"archive", "evaluation-summary"}},
		{[]string{"--steps", "ref"}, []string{"referral-history"}},
	} {
		got, _ := completions(t, append([]string{"grant", "--manifest", manifest}, tc.args...)...)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%v completes to %v, want %v", tc.args, got, tc.want)
		}
	}
	if got, _ := completions(t, "grant", "--documents", ""); len(got) != 0 {
		t.Errorf("--documents before --manifest completes to %v", got)
	}
	// acl names one key, through the manifest.
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"acl", "list", "--manifest", manifest, "--document", "pro"}, []string{"proposal-aurora", "proposal-borealis"}},
		{[]string{"acl", "grant", "--manifest", manifest, "--destination", ""}, []string{"archive", "evaluation-summary"}},
		{[]string{"acl", "grant", "--manifest", manifest, "--rights", ""}, []string{"READ", "WRITE", "READ,WRITE"}},
	} {
		if got, _ := completions(t, tc.args...); !slices.Equal(got, tc.want) {
			t.Errorf("%v completes to %v, want %v", tc.args, got, tc.want)
		}
	}
}
