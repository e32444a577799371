package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/filelock"
)

// TestProtectConcurrentWriters: two operators run pdmcp protect on one
// manifest at once, three documents each, while a third writer (this test
// process) keeps adding destinations and withdrawing approvals through the
// manifest's lock. Every protected document, every destination, every
// withdrawal and every created key is there at the end.
func TestProtectConcurrentWriters(t *testing.T) {
	s := newStack(t)
	const rounds = 3
	type result struct {
		id, out, stderr string
		ok              bool
	}
	results := make(chan result, 2*rounds)
	var wg sync.WaitGroup
	for _, op := range []struct{ prefix, source string }{{"oru-a", oruSource}, {"ccd-b", ccdSource}} {
		wg.Go(func() {
			for i := range rounds {
				id := fmt.Sprintf("%s%d", op.prefix, i)
				out, stderr, ok := s.protect(t, nil, "--source", op.source, "--document-id", id)
				results <- result{id, out, stderr, ok}
			}
		})
	}
	protectsDone := make(chan struct{})
	go func() { wg.Wait(); close(protectsDone) }()

	// The third writer runs until both operators are done, and at least
	// a few rounds.
	ctx := context.Background()
	var added []string
	for i := 0; i < 10 || !isClosed(protectsDone); i++ {
		id := fmt.Sprintf("operator-%d", i)
		if _, err := grant.UpdateManifest(ctx, s.manifest, func(m *grant.Manifest) error {
			if m.Destinations == nil {
				m.Destinations = map[string]grant.Destination{}
			}
			m.Destinations[id] = grant.Destination{Label: "added by hand " + id}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		added = append(added, id)
	}
	<-protectsDone
	close(results)
	for r := range results {
		if !r.ok || !strings.Contains(r.out, "PROTECT: OK") {
			t.Fatalf("protect %s: %s\n%s", r.id, r.out, r.stderr)
		}
	}
	m, err := grant.LoadManifest(s.manifest)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"oru-a", "ccd-b"} {
		for i := range rounds {
			checkAgree(t, s, fmt.Sprintf("%s%d", p, i))
		}
	}
	var lost []string
	for _, id := range added {
		if _, ok := m.Destinations[id]; !ok {
			lost = append(lost, id)
		}
	}
	if len(lost) > 0 {
		t.Fatalf("%d of %d operator changes lost: %v", len(lost), len(added), lost)
	}
	recordHoldsKeys(t, s, m)
	if n := len(m.CompoundKeys); n != 6 {
		t.Errorf("compoundKeys has %d types, want 6 (one key per data type across both operators)", n)
	}
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// startProtect starts pdmcp protect and returns its stderr as lines, read
// as they come, and a function that waits for it and returns stdout and
// whether it succeeded.
func (s *stack) startProtect(t *testing.T, args ...string) (<-chan string, func() (string, bool)) {
	t.Helper()
	cmd := s.protectCmd(t, args...)
	var stdout strings.Builder
	cmd.Stdout = &stdout
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	lines := make(chan string, 64)
	eof := make(chan struct{})
	go func() {
		defer close(eof)
		defer close(lines)
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	return lines, func() (string, bool) {
		// Wait closes the pipe, so only once everything was read.
		<-eof
		err := cmd.Wait()
		return stdout.String(), err == nil
	}
}

// awaitLine reads lines until one contains want; it fails the test if the
// process ends first.
func awaitLine(t *testing.T, lines <-chan string, want string) {
	t.Helper()
	var seen []string
	for l := range lines {
		if strings.Contains(l, want) {
			return
		}
		seen = append(seen, l)
	}
	t.Fatalf("the process ended without saying %q; it said:\n%s", want, strings.Join(seen, "\n"))
}

// drain keeps reading lines so the process never blocks on a full pipe.
func drain(lines <-chan string) {
	go func() {
		for range lines {
		}
	}()
}

// TestProtectWaitsForTheManifestLock: while another writer holds the
// manifest's lock, protect does its work, says it is waiting, and writes
// nothing; the other writer's change (a destination added, an approval
// withdrawn) is made meanwhile, and once the lock is released protect adds
// its document to the manifest as it is then: both changes are kept.
func TestProtectWaitsForTheManifestLock(t *testing.T) {
	s := newStack(t)
	held, err := filelock.TryAcquire(grant.LockPath(s.manifest))
	if err != nil {
		t.Fatal(err)
	}
	lines, wait := s.startProtect(t, "--source", oruSource, "--document-id", "oru-locked")
	awaitLine(t, lines, "waiting for another writer of the manifest")
	drain(lines)

	// The holder's own change, written while it holds the lock.
	m, err := grant.LoadManifest(s.manifest)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.Documents["oru-locked"]; ok {
		t.Fatal("protect wrote the manifest while another held its lock")
	}
	d := m.Documents["proposal-aurora"]
	d.Approved = false
	m.Documents["proposal-aurora"] = d
	m.Destinations["by-hand"] = grant.Destination{Label: "added while protect waited"}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := grant.WriteFileAtomic(s.manifest, append(data, '\n')); err != nil {
		t.Fatal(err)
	}
	if err := held.Release(); err != nil {
		t.Fatal(err)
	}

	if out, ok := wait(); !ok || !strings.Contains(out, "PROTECT: OK") {
		t.Fatalf("protect after the release: %s", out)
	}
	after := checkAgree(t, s, "oru-locked")
	if _, ok := after.Destinations["by-hand"]; !ok || after.Documents["proposal-aurora"].Approved {
		t.Fatalf("the other writer's change was lost: destination kept %v, approval %v",
			ok, after.Documents["proposal-aurora"].Approved)
	}
}

// TestProtectWaitsForAnotherProtect: a protect started while another holds
// the protect journal's lock says it waits, and finishes once it is free.
func TestProtectWaitsForAnotherProtect(t *testing.T) {
	s := newStack(t)
	held, err := filelock.TryAcquire(protectJournalLock(s))
	if err != nil {
		t.Fatal(err)
	}
	lines, wait := s.startProtect(t, "--source", oruSource, "--document-id", "oru-second")
	awaitLine(t, lines, "waiting for another pdmcp protect")
	drain(lines)
	if m, err := grant.LoadManifest(s.manifest); err != nil {
		t.Fatal(err)
	} else if _, ok := m.Documents["oru-second"]; ok {
		t.Fatal("protect went on while another held the protect lock")
	}
	if err := held.Release(); err != nil {
		t.Fatal(err)
	}
	if out, ok := wait(); !ok || !strings.Contains(out, "PROTECT: OK") {
		t.Fatalf("protect after the release: %s", out)
	}
	checkAgree(t, s, "oru-second")
}

func protectJournalLock(s *stack) string {
	return filepath.Join(filepath.Dir(s.manifest), "protect-journal.json.lock")
}
