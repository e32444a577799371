package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/audit"
)

// auditVerify runs `pdmcp audit verify` and returns stdout, stderr and
// the exit status.
func auditVerify(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := pdmcpCmd(t, append([]string{"audit", "verify"}, args...)...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return stdout.String(), stderr.String(), 0
	case errors.As(err, &ee):
		return stdout.String(), stderr.String(), ee.ExitCode()
	}
	t.Fatalf("pdmcp audit verify: %v", err)
	return "", "", -1
}

// headKeyFiles writes a new Ed25519 key's private half (PKCS #8) and
// public half (PKIX) as PEM files, mode 0600.
func headKeyFiles(t *testing.T, dir string) (priv, pub string) {
	t.Helper()
	pk, sk, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(sk)
	if err != nil {
		t.Fatal(err)
	}
	pubDER, err := x509.MarshalPKIXPublicKey(pk)
	if err != nil {
		t.Fatal(err)
	}
	priv, pub = filepath.Join(dir, "audit-head.pem"), filepath.Join(dir, "audit-head.pub")
	for path, b := range map[string]*pem.Block{priv: {Type: "PRIVATE KEY", Bytes: der}, pub: {Type: "PUBLIC KEY", Bytes: pubDER}} {
		if err := os.WriteFile(path, pem.EncodeToMemory(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return priv, pub
}

// TestAuditVerifyOnAServedFile: the audit file of two real `pdmcp serve`
// runs (a restart appending to it), each signing the chain's head,
// verifies whole with the public key; copies of it with a line edited,
// removed, inserted or reordered, or its end cut, are each found, naming
// the first line that breaks, with exit status 3; a missing file is
// status 2.
func TestAuditVerifyOnAServedFile(t *testing.T) {
	s := newStack(t)
	priv, pub := headKeyFiles(t, t.TempDir())
	for run := range 2 {
		cmd := pdmcpCmd(t, "serve", "--config", s.config, "--manifest", s.manifest, "--grant", s.grant,
			"--audit", s.audit, "--audit-key", priv)
		cmd.Stderr = &testLog{t: t}
		c := mcp.NewClient(&mcp.Implementation{Name: "e2e-host", Version: "1"}, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		cs, err := c.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
		cancel()
		if err != nil {
			t.Fatalf("run %d: connect: %v", run, err)
		}
		if m, isErr := call(t, cs, "read_protected_document", map[string]any{"documentId": "evaluation-criteria"}); isErr {
			t.Fatalf("run %d: read: %v", run, m)
		}
		s.quiet(t, "a refusal", func() {
			m, e := call(t, cs, "read_protected_document", map[string]any{"documentId": "proposal-equinox"})
			wantRefused(t, m, e, "adapter", "DOCUMENT_NOT_IN_GRANT")
		})
		if err := cs.Close(); err != nil {
			t.Fatalf("run %d: close: %v", run, err)
		}
	}

	out, stderr, code := auditVerify(t, "--key", pub, s.audit)
	if code != 0 || !strings.Contains(out, "AUDIT-VERIFY: WHOLE") || !strings.Contains(out, "signed heads: 2") {
		t.Fatalf("verify of the served file: status %d\n%s%s", code, out, stderr)
	}
	b, err := os.ReadFile(s.audit)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(b), "\n")
	lines = lines[:len(lines)-1]
	// Two runs: startup, client, two tool lines, shutdown, head; twice.
	if len(lines) != 12 || !strings.Contains(lines[6], `"event":"startup"`) || !strings.Contains(lines[6], `"prev":"`) {
		t.Fatalf("lines %q, want 12 with the second run's startup chained to the first run's end", lines)
	}

	tests := []struct {
		name string
		edit func(l []string) []string
		line int
		kind string
	}{
		{"an outcome edited", func(l []string) []string {
			l[3] = strings.Replace(l[3], `"outcome":"refused"`, `"outcome":"ok"`, 1)
			return l
		}, 5, audit.BreakPrev},
		{"a line removed", func(l []string) []string { return append(l[:2:2], l[3:]...) }, 3, audit.BreakPrev},
		{"a line inserted", func(l []string) []string { return append(append(l[:8:8], l[2]), l[8:]...) }, 9, audit.BreakPrev},
		{"two lines reordered", func(l []string) []string {
			l[2], l[3] = l[3], l[2]
			return l
		}, 3, audit.BreakPrev},
		{"the end cut", func(l []string) []string {
			l[11] = l[11][:len(l[11])/2]
			return l
		}, 12, audit.BreakTornTail},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "audit.jsonl")
			if err := os.WriteFile(path, []byte(strings.Join(tc.edit(append([]string(nil), lines...)), "")), 0o600); err != nil {
				t.Fatal(err)
			}
			out, stderr, code := auditVerify(t, "--json", path)
			if code != 3 {
				t.Fatalf("status %d, want 3\n%s%s", code, out, stderr)
			}
			var rep audit.Report
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatalf("--json: %v\n%s", err, out)
			}
			if rep.Whole || len(rep.Breaks) == 0 || rep.Breaks[0].Line != tc.line || rep.Breaks[0].Kind != tc.kind {
				t.Fatalf("report %+v, want first break %s at line %d", rep, tc.kind, tc.line)
			}
			if want := path + ":" + strconv.Itoa(tc.line); !strings.Contains(stderr, want) {
				t.Errorf("stderr %q does not name %s", stderr, want)
			}
		})
	}

	// Whole lines cut off the end: the chain holds, a head kept from
	// before does not.
	out, _, _ = auditVerify(t, "--json", s.audit)
	var whole audit.Report
	if err := json.Unmarshal([]byte(out), &whole); err != nil || whole.Head == "" {
		t.Fatalf("--json on the whole file: %v\n%s", err, out)
	}
	cut := filepath.Join(t.TempDir(), "cut.jsonl")
	if err := os.WriteFile(cut, []byte(strings.Join(lines[:10], "")), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, stderr, code := auditVerify(t, cut); code != 0 {
		t.Fatalf("the cut file without a kept head: status %d\n%s%s", code, out, stderr)
	}
	if out, stderr, code := auditVerify(t, "--head", whole.Head, cut); code != 3 || !strings.Contains(out, audit.BreakHeadMissing) {
		t.Fatalf("the cut file with the kept head: status %d, want 1 and %s\n%s%s", code, audit.BreakHeadMissing, out, stderr)
	}
	if out, stderr, code := auditVerify(t, "--head", whole.Head, s.audit); code != 0 {
		t.Fatalf("the whole file with its own head: status %d\n%s%s", code, out, stderr)
	}

	if out, stderr, code := auditVerify(t, filepath.Join(t.TempDir(), "missing.jsonl")); code != 2 {
		t.Errorf("a missing file: status %d, want 2\n%s%s", code, out, stderr)
	}
	if out, stderr, code := auditVerify(t); code != 2 {
		t.Errorf("no file: status %d, want 2\n%s%s", code, out, stderr)
	}
	if out, stderr, code := auditVerify(t, "--key", s.audit, s.audit); code != 2 || !strings.Contains(stderr, "Ed25519") {
		t.Errorf("a key file that is no key: status %d, want 2 naming what a key is\n%s%s", code, out, stderr)
	}
}
