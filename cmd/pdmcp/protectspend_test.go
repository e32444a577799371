package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/reference"
)

// TestProtectCtrlCThenAbandon: Ctrl-C while protect's first encrypt is at
// the Gateway waits for its answer and prints "interrupted" (not the
// Gateway unreachable); protect --abandon then removes the key it made and
// the journal entry, and the id is protected again from the start.
func TestProtectCtrlCThenAbandon(t *testing.T) {
	s := newStack(t)
	keys := s.keyCount(t)
	out, err := s.interruptAtEncrypt(t, s.protectCmd(t, "--source", oruSource, "--document-id", "oru-0001"))
	if err == nil || !strings.Contains(out, "interrupted") || strings.Contains(out, api.CodeUnreachable) || !strings.Contains(out, "--abandon oru-0001") {
		t.Fatalf("protect after Ctrl-C: %v\n%s", err, out)
	}
	made := s.keyCount(t) - keys
	if made < 1 {
		t.Fatalf("keys after the interrupted run: %d more, want the one in flight recorded", made)
	}

	// --abandon --json: the documented object, decoded strictly.
	stdout, stderrText, ok := s.protect(t, nil, "--abandon", "oru-0001", "--json")
	if !ok {
		t.Fatalf("--abandon --json: %s %s", stdout, stderrText)
	}
	var rep abandonJSON
	opsDecode(t, stdout, &rep)
	if rep.DocumentID != "oru-0001" || rep.KeysRemoved != made || rep.KeysKept != 0 || rep.LostAccepted != 0 {
		t.Fatalf("--abandon --json: %+v (the run made %d keys)", rep, made)
	}
	if n := s.keyCount(t); n != keys {
		t.Fatalf("keys after --abandon: %d, want %d", n, keys)
	}
	if code, _, stderrText := runCLI(t, "protect", "--config", s.config, "--manifest", s.manifest, "--seed-record", s.record(),
		"--abandon", "oru-0001"); code != exitRefused || !strings.Contains(stderrText, "no unfinished protect of that document id") {
		t.Fatalf("a second --abandon: exit %d: %s", code, stderrText)
	}
	if stdout, stderrText, ok := s.protect(t, nil, "--source", oruSource, "--document-id", "oru-0001"); !ok || !strings.Contains(stdout, "PROTECT: OK") {
		t.Fatalf("protect after --abandon: %s %s", stdout, stderrText)
	}
	checkAgree(t, s, "oru-0001")

	// The prose: a run that reused the keys oru-0001 made removes none.
	keys = s.keyCount(t)
	if out, err := s.interruptAtEncrypt(t, s.protectCmd(t, "--source", ccdSource, "--document-id", "ccd-0009")); err == nil || !strings.Contains(out, "interrupted") {
		t.Fatalf("protect ccd-0009 after Ctrl-C: %v\n%s", err, out)
	}
	made = s.keyCount(t) - keys
	stdout, stderrText, ok = s.protect(t, nil, "--abandon", "ccd-0009")
	if !ok || !strings.Contains(stdout, fmt.Sprintf("ccd-0009: %d keys removed", made)) || !strings.HasSuffix(stdout, "PROTECT ABANDON: OK\n") {
		t.Fatalf("--abandon: %s %s", stdout, stderrText)
	}
}

// TestProtectRefusesATooLargeSection: a section over the read limit is
// refused by the command with no encrypt sent, and the id stays usable.
func TestProtectRefusesATooLargeSection(t *testing.T) {
	s := newStack(t)
	oru, err := os.ReadFile(oruSource)
	if err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(s.dir, "big.hl7")
	if err := os.WriteFile(big, bytes.Replace(oru, []byte("Repeat in three months"), bytes.Repeat([]byte("A"), 1<<20), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	encrypts := s.env.Gateway.Count(api.RouteEncrypt)
	code, _, stderr := runCLI(t, "protect", "--config", s.config, "--manifest", s.manifest, "--seed-record", s.record(),
		"--source", big, "--document-id", "oru-0001")
	if code != exitRefused || !strings.Contains(stderr, "limit of one read") || s.env.Gateway.Count(api.RouteEncrypt) != encrypts {
		t.Fatalf("a 1 MiB section: exit %d: %s (encrypts %d)", code, stderr, s.env.Gateway.Count(api.RouteEncrypt)-encrypts)
	}
	if out, stderr, ok := s.protect(t, nil, "--source", oruSource, "--document-id", "oru-0001"); !ok {
		t.Fatalf("the id after the refusal: %s %s", out, stderr)
	}
}

// interruptAtEncrypt starts cmd with every encrypt held at the Gateway,
// sends it Ctrl-C once its first encrypt arrives, then answers each held
// encrypt by re-arming the hold (which holds the next one) until cmd ends:
// once the signal has landed no next one comes. No sleep decides the
// outcome. It returns cmd's stderr and exit error.
func (s *stack) interruptAtEncrypt(t *testing.T, cmd *exec.Cmd) (string, error) {
	t.Helper()
	hold := reference.Faults{HoldRoute: api.RouteEncrypt}
	seen := s.env.Gateway.Count(api.RouteEncrypt)
	s.env.Gateway.SetFaults(hold)
	defer s.env.Gateway.SetFaults(reference.Faults{})
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.After(time.Minute)
	signalled := false
	for {
		select {
		case err := <-done:
			if !signalled {
				t.Fatalf("the command ended before its first encrypt (%v): %s", err, stderr.String())
			}
			return stderr.String(), err
		case <-deadline:
			_ = cmd.Process.Kill()
			t.Fatalf("the command did not end: %s", stderr.String())
		case <-time.After(5 * time.Millisecond):
			n := s.env.Gateway.Count(api.RouteEncrypt)
			if n == seen {
				continue
			}
			seen = n
			if !signalled {
				if err := cmd.Process.Signal(os.Interrupt); err != nil {
					t.Fatal(err)
				}
				signalled = true
			}
			s.env.Gateway.SetFaults(hold)
		}
	}
}

// TestSeedCtrlCThenCleanupThenSeed: Ctrl-C during seed's first encrypt
// says interrupted; seed --cleanup on its record, then seed into the same
// folder, succeed.
func TestSeedCtrlCThenCleanupThenSeed(t *testing.T) {
	s := newStack(t)
	dir := filepath.Join(s.dir, "second")
	out, err := s.interruptAtEncrypt(t, pdmcpCmd(t, "seed", "--config", s.config, "--out", dir))
	if err == nil || !strings.Contains(out, "interrupted") || !strings.Contains(out, "--cleanup") {
		t.Fatalf("seed after Ctrl-C: %v\n%s", err, out)
	}
	record := filepath.Join(dir, "seed-record.json")
	if got := run(t, "seed", "--config", s.config, "--cleanup", "--seed-record", record); !strings.Contains(got, "SEED CLEANUP: OK") {
		t.Fatalf("cleanup: %s", got)
	}
	if got := run(t, "seed", "--config", s.config, "--out", dir); !strings.Contains(got, "SEED: OK") {
		t.Fatalf("seed after cleanup: %s", got)
	}
}
