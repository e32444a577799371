package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/internal/crashpoint"
	"github.com/pdmcp/pdmcp/internal/handofftest"
	"github.com/pdmcp/pdmcp/internal/mcptest"
	"github.com/pdmcp/pdmcp/internal/testutil"
)

// The crash-consistency suite: the server (or protect) killed with SIGKILL
// at every step boundary, through the PDMCP_TEST_KILL_AT hook. Run alone:
//
//	go test ./cmd/pdmcp -run 'CrashPoints|SurvivesKill|SurviveKill|KillBetween'
//
// TestSaveSurvivesKillAtEachStep, TestSaveSurvivesKillWithTwoServers,
// TestSaveFragmentSurvivesKill, TestEncryptFileSurvivesKillAtEachStep,
// TestFileToolsSurviveKillAtCheck, TestSaveFragmentSurvivesKill,
// TestProtectSurvivesKill and TestHandOffSurvivesKillAtEachStep cover the
// points one tool each;
// TestCrashPointsAllCovered holds them to the list of points in the code.

// literalPointRE finds a step boundary named by a string of its own
// instead of a crashpoint constant: a quoted "<operation>:<step>" passed to
// a CrashPoint, Hook or crash call, or set in a save pipeline's crashPoints
// (server/savepipe.go).
var literalPointRE = regexp.MustCompile(`(?:(?:CrashPoint|Hook|crash)\(|(?:reserved|encrypted|placed|created|written|linked|committed): )"([a-z_]+:[a-z-]+)"`)

// TestCrashPointsAllCovered fails if a step boundary in crashpoint.All (at
// least 16) is not killed at by a crash test of this package, so a new step
// cannot be added without its crash test; and if the code that runs the
// steps names a point by a string of its own, which would escape the list.
func TestCrashPointsAllCovered(t *testing.T) {
	for _, dir := range []string{"../../server", "../../server/handoff", "../../internal/operator"} {
		for _, f := range testutil.GoSources(t, dir) {
			for _, m := range literalPointRE.FindAllStringSubmatch(f.Text, -1) {
				t.Errorf("%s names the point %q by a string: use a crashpoint constant", f.Path, m[1])
			}
		}
	}
	points := crashpoint.All()
	if len(points) < 16 {
		t.Fatalf("crashpoint.All has %d step boundaries (%v), expected at least 16", len(points), points)
	}
	tests, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	var all strings.Builder
	for _, f := range tests {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		all.Write(b)
	}
	for _, p := range points {
		if !strings.Contains(all.String(), `"`+string(p)+`"`) {
			t.Errorf("no crash test kills the server at %q", p)
		}
	}
	t.Logf("%d step boundaries: %v", len(points), points)
}

// TestHandOffSurvivesKillAtEachStep kills the server at each step of
// hand_off: after the first journal row, after the first grant, after the
// read-back is journalled. After the kill no access-list entry exists that
// the journal does not know; the retry on a fresh server hands the step
// whole (the receipt replayed when the first run had finished), a second
// retry replays it, and close_step leaves no entry.
func TestHandOffSurvivesKillAtEachStep(t *testing.T) {
	for _, tc := range []struct {
		point           string
		entries, rows   int
		replayedOnRetry bool
	}{
		{"handoff:journalled", 0, 1, false},
		{"handoff:granted", 1, 1, false},
		{"handoff:verified", 3, 3, true},
	} {
		t.Run(tc.point, func(t *testing.T) {
			s := newStepStack(t)
			s.handOffDies(t, tc.point, handofftest.StepReferral)
			granted, rows := s.doctorEntries(t), s.openRows(t)
			if len(granted) != tc.entries || len(rows) != tc.rows {
				t.Fatalf("after the kill: entries %v, journal rows %d; want %d and %d", granted, len(rows), tc.entries, tc.rows)
			}
			known := map[string]bool{}
			for _, r := range rows {
				known[r.TTag] = true
			}
			for _, dt := range granted {
				if !known[s.w.Keys[dt]] {
					t.Fatalf("the entry on %s is not in the journal", dt)
				}
			}

			cs, _ := s.serve(t)
			first, isErr := call(t, cs, "hand_off", map[string]any{"stepId": handofftest.StepReferral})
			if isErr || first["replayed"] != tc.replayedOnRetry || len(first["sections"].([]any)) != 3 {
				t.Fatalf("hand_off after the restart: %v", first)
			}
			again, isErr := call(t, cs, "hand_off", map[string]any{"stepId": handofftest.StepReferral})
			if isErr || again["replayed"] != true || again["endTime"] != first["endTime"] {
				t.Fatalf("second retry %v, first %v", again, first)
			}
			if got := s.doctorEntries(t); len(got) != 3 {
				t.Fatalf("entries after the retry: %v", got)
			}
			if rows := s.openRows(t); len(rows) != 3 {
				t.Fatalf("journal rows after the retry: %d", len(rows))
			}
			if m, isErr := call(t, cs, "close_step", map[string]any{"stepId": handofftest.StepReferral}); isErr {
				t.Fatalf("close_step: %v", m)
			}
			if got := s.doctorEntries(t); len(got) != 0 {
				t.Fatalf("entries after close_step: %v", got)
			}
		})
	}
}

// TestFileToolsSurviveKillAtCheck kills the server between a file tool's
// path checks and its open ("file:checked"): nothing is reserved, sent or
// written yet, so the retry on a fresh server is a first call: one encrypt,
// one key, no envelope before it; then decrypt_file killed at the same
// point and retried writes the plaintext once.
func TestFileToolsSurviveKillAtCheck(t *testing.T) {
	s, root := newFileStack(t)
	content := []byte("kill me at file:checked")
	if err := os.WriteFile(filepath.Join(root, "c.txt"), content, 0o644); err != nil {
		t.Fatal(err)
	}
	keys := s.keyCount(t)
	encrypts := s.env.Gateway.Count(api.RouteEncrypt)
	s.callDies(t, "file:checked", "encrypt_file", map[string]any{"path": "c.txt"})
	if _, err := os.Stat(filepath.Join(root, "c.txt.pisoft")); !os.IsNotExist(err) {
		t.Fatal("an envelope exists after a kill before the open")
	}
	if n := s.env.Gateway.Count(api.RouteEncrypt) - encrypts; n != 0 {
		t.Fatalf("%d encrypts before the open", n)
	}
	cs := s.connect(t)
	res, isErr := call(t, cs, "encrypt_file", map[string]any{"path": "c.txt"})
	if isErr || res["replayed"] == true || res["sha256"] != mcptest.SHA256(content) {
		t.Fatalf("retry after the kill: %v", res)
	}
	if n := s.env.Gateway.Count(api.RouteEncrypt) - encrypts; n != 1 {
		t.Errorf("Gateway encrypts: %d, want 1", n)
	}
	if n := s.keyCount(t) - keys; n != 1 {
		t.Errorf("keys minted: %d, want 1", n)
	}
	if err := os.Remove(filepath.Join(root, "c.txt")); err != nil {
		t.Fatal(err)
	}
	s.callDies(t, "file:checked", "decrypt_file", map[string]any{"path": "c.txt.pisoft"})
	if _, err := os.Stat(filepath.Join(root, "c.decrypted.txt")); !os.IsNotExist(err) {
		t.Fatal("a decrypted file exists after a kill before the open")
	}
	cs = s.connect(t)
	if dec, isErr := call(t, cs, "decrypt_file", map[string]any{"path": "c.txt.pisoft"}); isErr {
		t.Fatalf("decrypt after the kill: %v", dec)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "c.decrypted.txt")); !bytes.Equal(got, content) {
		t.Fatal("the decrypted file differs")
	}
	leftovers, _ := filepath.Glob(filepath.Join(root, ".*"))
	if len(leftovers) != 0 {
		t.Errorf("temporary files left: %v", leftovers)
	}
}
