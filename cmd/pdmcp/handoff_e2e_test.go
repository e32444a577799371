package main

import (
	"context"
	"fmt"
	"maps"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/reference"
	"github.com/pdmcp/pdmcp/gateway/reference/reftest"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/handofftest"
	"github.com/pdmcp/pdmcp/server"
	"github.com/pdmcp/pdmcp/server/journal"
)

// stepStack is a service bootstrapped by the binary, a manifest with a
// compound document and hand-off steps (its keys made through the
// reference Gateway), and a stdio grant for the patient.
type stepStack struct {
	env    *reftest.Env
	w      *handofftest.World
	config string
	grant  string
	audit  string
}

func newStepStack(t *testing.T) *stepStack {
	t.Helper()
	s := &stepStack{env: reftest.Start(t, reference.Config{})}
	dir := t.TempDir()
	s.config = filepath.Join(dir, "config.json")
	run(t, "bootstrap", "--endpoint", s.env.URL, "--trust-file", s.env.CAFile, "--admin-user", reftest.AdminUser,
		"--admin-password-file", s.env.AdminPasswordFile, "--out", s.config)
	sc, err := gateway.LoadServiceConfig(s.config)
	if err != nil {
		t.Fatal(err)
	}
	s.w = handofftest.BuildWith(t, sc, s.env.ServiceClient(t, sc), filepath.Join(dir, "task-data"), handofftest.Options{})
	s.grant = filepath.Join(dir, "task-data", "grant.json")
	s.audit = filepath.Join(dir, "task-data", "audit.jsonl")
	run(t, "grant", "--manifest", s.w.Manifest, "--local-user", s.w.Patient.Name,
		"--documents", handofftest.DocID+","+handofftest.PlainDocID,
		"--tools", "list_approved_documents,hand_off,close_step", "--steps", handofftest.StepReferral,
		"--ttl", "15m", "--out", s.grant)
	return s
}

// serve starts `pdmcp serve` over stdio and returns the client session and
// the server's process.
func (s *stepStack) serve(t *testing.T, extraEnv ...string) (*mcp.ClientSession, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command(binary(t), "serve", "--config", s.config, "--manifest", s.w.Manifest, "--grant", s.grant,
		"--audit", s.audit)
	cmd.Env = append(cleanEnv(), extraEnv...)
	cmd.Stderr = &testLog{t: t}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e-host", Version: "1"}, nil).
		Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs, cmd
}

// handOffDies starts a server that dies at the crash point and has it hand
// step off: the call must fail, the server gone.
func (s *stepStack) handOffDies(t *testing.T, point, step string) {
	t.Helper()
	doomed, _ := s.serve(t, crashEnv+"="+point)
	if _, err := doomed.CallTool(context.Background(), &mcp.CallToolParams{Name: "hand_off",
		Arguments: map[string]any{"stepId": step}}); err == nil {
		t.Fatalf("the server answered instead of dying at %s", point)
	}
}

// doctorEntries are the keys of the step on which the doctor holds an
// entry, as the patient reads them.
func (s *stepStack) doctorEntries(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, dt := range []string{"allergies", "medications", "problems", "results"} {
		if _, ok := s.w.Entry(t, s.w.Keys[dt], s.w.Doctor); ok {
			out = append(out, dt)
		}
	}
	return out
}

// openRows are the referral step's open hand-off rows in the journal.
func (s *stepStack) openRows(t *testing.T) []journal.HandOff {
	t.Helper()
	return s.openRowsOf(t, handofftest.StepReferral)
}

// openRowsOf are step's open hand-off rows in the journal.
func (s *stepStack) openRowsOf(t *testing.T, step string) []journal.HandOff {
	t.Helper()
	j, err := journal.Open(context.Background(), journal.DefaultPath(s.w.Manifest))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	rows, err := j.OpenHandOffs(context.Background(), step)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// TestCloseStepAfterSIGKILL: stdin closing revokes the open hand-off; a
// server killed with SIGKILL cannot, and `pdmcp close-step` does, twice
// safely.
func TestCloseStepAfterSIGKILL(t *testing.T) {
	s := newStepStack(t)

	cs, _ := s.serve(t)
	if m, isErr := call(t, cs, "hand_off", map[string]any{"stepId": handofftest.StepReferral}); isErr {
		t.Fatalf("hand_off: %v", m)
	}
	if got := s.doctorEntries(t); len(got) != 3 {
		t.Fatalf("doctor's entries after hand_off: %v", got)
	}
	_ = cs.Close() // stdin closes: the server revokes before it exits
	if got := s.doctorEntries(t); len(got) != 0 {
		t.Fatalf("entries left after the server's stdin closed: %v", got)
	}
	if rows := s.openRows(t); len(rows) != 0 {
		t.Fatalf("journal rows left open: %+v", rows)
	}

	cs, cmd := s.serve(t)
	if m, isErr := call(t, cs, "hand_off", map[string]any{"stepId": handofftest.StepReferral}); isErr {
		t.Fatalf("hand_off: %v", m)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The command transport owns the process and waits for it; a second
	// cmd.Wait here would race with it.
	_ = cs.Close()
	if got := s.doctorEntries(t); len(got) != 3 {
		t.Fatalf("entries after SIGKILL: %v, want the three still there", got)
	}

	out := run(t, "close-step", "--config", s.config, "--manifest", s.w.Manifest, "--step", handofftest.StepReferral)
	if !strings.HasSuffix(strings.TrimSpace(out), "CLOSE-STEP: DONE") || strings.Count(out, "read back absent") != 3 {
		t.Fatalf("close-step output:\n%s", out)
	}
	for _, k := range s.w.Keys {
		if strings.Contains(out, k) {
			t.Errorf("close-step printed a t-Tag:\n%s", out)
		}
	}
	if got := s.doctorEntries(t); len(got) != 0 {
		t.Fatalf("entries after close-step: %v", got)
	}
	out = run(t, "close-step", "--config", s.config, "--manifest", s.w.Manifest, "--step", handofftest.StepReferral)
	if !strings.HasSuffix(strings.TrimSpace(out), "CLOSE-STEP: DONE") || !strings.Contains(out, "no open hand-off") {
		t.Fatalf("close-step again:\n%s", out)
	}

	// --json: the documented object, decoded strictly, an entry for each
	// hand-off revoked.
	cs, cmd = s.serve(t)
	if m, isErr := call(t, cs, "hand_off", map[string]any{"stepId": handofftest.StepReferral}); isErr {
		t.Fatalf("hand_off: %v", m)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cs.Close()
	code, stdout, stderr := runCLI(t, "close-step", "--config", s.config, "--manifest", s.w.Manifest, "--step", handofftest.StepReferral, "--json")
	if code != 0 {
		t.Fatalf("close-step --json: exit %d: %s", code, stderr)
	}
	var rep closeStepJSON
	opsDecode(t, stdout, &rep)
	if rep.Step != handofftest.StepReferral || !rep.Done || len(rep.Entries) != 3 {
		t.Fatalf("close-step --json: %+v", rep)
	}
	for _, e := range rep.Entries {
		if e.ID == 0 || e.DocumentID != handofftest.DocID || e.KeyDigest == "" || e.Outcome != journal.ClosedRevoked || e.Error != "" {
			t.Errorf("entry %+v", e)
		}
	}
	if got := s.doctorEntries(t); len(got) != 0 {
		t.Fatalf("entries after close-step --json: %v", got)
	}
}

// TestCloseStepCommandLine: a --step neither the manifest nor the journal
// knows is refused before anything is sent (exit 2), naming the
// manifest's steps; --step completes from the --manifest given.
func TestCloseStepCommandLine(t *testing.T) {
	s := newStepStack(t)
	// A server run makes the journal.
	cs, _ := s.serve(t)
	_ = cs.Close()
	m, err := grant.LoadManifest(s.w.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	steps := slices.Sorted(maps.Keys(m.Steps))
	before := s.env.Gateway.Counts()
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"unknown step", []string{"--step", "nosuch"}, exitUsage,
			`--step "nosuch": not a step of ` + s.w.Manifest + " (its steps: " + strings.Join(steps, ", ") +
				"), and the journal holds no open hand-off of it; nothing was sent"},
		{"no journal", []string{"--step", handofftest.StepReferral, "--journal", filepath.Join(t.TempDir(), "none.sqlite")}, exitUsage, "none.sqlite"},
		{"no step", nil, exitUsage, "pdmcp close-step: --step is required (the step whose open hand-offs to revoke"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, append([]string{"close-step", "--config", s.config, "--manifest", s.w.Manifest}, tc.args...)...)
			if code != tc.code || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, want %d; stderr %q, want %q", code, tc.code, stderr, tc.want)
			}
			if strings.Contains(stderr, "run this again") {
				t.Errorf("a command-line mistake is told to run again: %s", stderr)
			}
		})
	}
	if after := s.env.Gateway.Counts(); !maps.Equal(before, after) {
		t.Errorf("a refused close-step reached the Gateway: before %v, after %v", before, after)
	}

	if got, _ := completions(t, "close-step", "--manifest", s.w.Manifest, "--step", ""); !slices.Equal(got, steps) || len(got) == 0 {
		t.Fatalf("--step completes to %v, want %v", got, steps)
	}
	if got, _ := completions(t, "close-step", "--manifest", s.w.Manifest, "--step", steps[0][:3]); !slices.Contains(got, steps[0]) {
		t.Fatalf("--step %s completes to %v", steps[0][:3], got)
	}
	if got, _ := completions(t, "close-step", "--step", ""); len(got) != 0 {
		t.Fatalf("--step before --manifest completes to %v", got)
	}
}

// TestKillBetweenGrantAndReadBack: the server dies (SIGKILL) right after
// its first grant, before any read-back is journalled. Nothing is granted
// that the journal does not know, and the next server's hand_off takes the
// leftover back and hands the step whole.
func TestKillBetweenGrantAndReadBack(t *testing.T) {
	s := newStepStack(t)
	s.handOffDies(t, "handoff:granted", handofftest.StepReferral)
	granted := s.doctorEntries(t)
	rows := s.openRows(t)
	if len(granted) != 1 {
		t.Fatalf("entries after the kill: %v, want the one granted", granted)
	}
	known := map[string]bool{}
	for _, r := range rows {
		known[r.TTag] = true
		if !r.VerifiedAt.IsZero() {
			t.Errorf("row %d verified before the kill", r.ID)
		}
	}
	for _, dt := range granted {
		if !known[s.w.Keys[dt]] {
			t.Fatalf("the entry on %s is not in the journal (open rows %+v)", dt, rows)
		}
	}

	cs, _ := s.serve(t)
	rec, isErr := call(t, cs, "hand_off", map[string]any{"stepId": handofftest.StepReferral})
	if isErr || rec["replayed"] != false || len(rec["sections"].([]any)) != 3 {
		t.Fatalf("hand_off after the restart: %v", rec)
	}
	if got := s.doctorEntries(t); len(got) != 3 {
		t.Fatalf("entries after the restart's hand_off: %v", got)
	}
	if rows := s.openRows(t); len(rows) != 3 {
		t.Fatalf("open rows after the restart's hand_off: %+v", rows)
	}
	if m, isErr := call(t, cs, "close_step", map[string]any{"stepId": handofftest.StepReferral}); isErr {
		t.Fatalf("close_step: %v", m)
	}
	if got := s.doctorEntries(t); len(got) != 0 {
		t.Fatalf("entries after close_step: %v", got)
	}
}

// TestKilledHandOffNeverRevokesAnotherEntry: the server dies right after
// journalling its first row, before that grant is sent. The patient then
// gives the doctor access on that key herself. Neither the next server's
// hand_off nor `pdmcp close-step` takes her entry away: the row is closed
// as left alone, the call is refused RECIPIENT_HAS_ENTRY, and close-step
// says what it left.
func TestKilledHandOffNeverRevokesAnotherEntry(t *testing.T) {
	s := newStepStack(t)
	s.handOffDies(t, "handoff:journalled", handofftest.StepReferral)
	rows := s.openRows(t)
	if len(rows) != 1 || len(s.doctorEntries(t)) != 0 {
		t.Fatalf("after the kill: rows %+v, entries %v", rows, s.doctorEntries(t))
	}
	ctx := context.Background()
	own := time.Now().Add(365 * 24 * time.Hour).UTC().Truncate(time.Second)
	patient := s.w.As(t, s.w.Patient.Name)
	if err := patient.ACLGrant(ctx, api.ACLGrantRequest{TTag: rows[0].TTag, SystemID: s.w.Doctor.SystemID,
		PrincipalID: s.w.Doctor.PrincipalID, Rights: []string{api.RightRead, api.RightWrite}, EndTime: &own}); err != nil {
		t.Fatal(err)
	}
	patient.Revoke(ctx)
	ownIntact := func(when string) {
		t.Helper()
		e, ok := s.w.Entry(t, rows[0].TTag, s.w.Doctor)
		if !ok || len(e.Rights) != 2 || e.EndTime == nil || !e.EndTime.Equal(own) {
			t.Fatalf("%s: the patient's own entry for the doctor is %+v (present %v)", when, e, ok)
		}
	}

	out := run(t, "close-step", "--config", s.config, "--manifest", s.w.Manifest, "--step", handofftest.StepReferral)
	if !strings.Contains(out, "LEFT ALONE") || strings.Contains(out, "revoked, read back absent") ||
		!strings.HasSuffix(strings.TrimSpace(out), "CLOSE-STEP: DONE") {
		t.Fatalf("close-step output:\n%s", out)
	}
	ownIntact("after close-step")
	j, err := journal.Open(ctx, journal.DefaultPath(s.w.Manifest))
	if err != nil {
		t.Fatal(err)
	}
	row, err := j.GetHandOff(ctx, rows[0].ID)
	j.Close()
	if err != nil || row.State != journal.HandOffClosed || row.CloseReason != journal.ClosedLeftAlone {
		t.Fatalf("the row after close-step: %+v, %v", row, err)
	}
	// The step handed again: refused, and her entry still untouched.
	cs, _ := s.serve(t)
	m, isErr := call(t, cs, "hand_off", map[string]any{"stepId": handofftest.StepReferral})
	if !isErr || m["code"] != "RECIPIENT_HAS_ENTRY" || !strings.Contains(fmt.Sprint(m["detail"]), "not made by this server") {
		t.Fatalf("hand_off with her entry in place: %v", m)
	}
	ownIntact("after hand_off")
}

// TestKilledHandOffLeftoverLeftAloneOnRestart: as above, but it is the next
// server's hand_off that finds the row open (nobody ran close-step): it
// closes the row as left alone and refuses, touching nothing.
func TestKilledHandOffLeftoverLeftAloneOnRestart(t *testing.T) {
	s := newStepStack(t)
	s.handOffDies(t, "handoff:journalled", handofftest.StepReferral)
	rows := s.openRows(t)
	ctx := context.Background()
	patient := s.w.As(t, s.w.Patient.Name)
	if err := patient.ACLGrant(ctx, api.ACLGrantRequest{TTag: rows[0].TTag, SystemID: s.w.Doctor.SystemID,
		PrincipalID: s.w.Doctor.PrincipalID, Rights: []string{api.RightRead}}); err != nil {
		t.Fatal(err)
	}
	patient.Revoke(ctx)
	revokes := s.env.Gateway.Count(api.RouteACLRevoke)
	cs, _ := s.serve(t)
	m, isErr := call(t, cs, "hand_off", map[string]any{"stepId": handofftest.StepReferral})
	if !isErr || m["code"] != "RECIPIENT_HAS_ENTRY" {
		t.Fatalf("hand_off after the restart: %v", m)
	}
	if n := s.env.Gateway.Count(api.RouteACLRevoke) - revokes; n != 0 {
		t.Fatalf("%d revokes sent", n)
	}
	if e, ok := s.w.Entry(t, rows[0].TTag, s.w.Doctor); !ok || e.EndTime != nil {
		t.Fatalf("the patient's own entry: %+v (present %v)", e, ok)
	}
	if open := s.openRows(t); len(open) != 0 {
		t.Fatalf("rows left open: %+v", open)
	}
}

// TestHandOffSurvivesKillAfterRefusedGrant kills the server between a
// grant the key server refused (the nurse holds the key READ only) and the
// close of its row ("handoff:grant-refused"). The row stays open, no entry
// exists; the next server's hand_off closes it without a revoke and is
// refused again, and close-step then has nothing to do.
func TestHandOffSurvivesKillAfterRefusedGrant(t *testing.T) {
	s := newStepStack(t)
	s.grant = filepath.Join(filepath.Dir(s.grant), "nurse-grant.json")
	run(t, "grant", "--manifest", s.w.Manifest, "--local-user", s.w.Nurse.Name,
		"--documents", handofftest.DocID, "--tools", "list_approved_documents,hand_off,close_step",
		"--steps", handofftest.StepByNurse, "--ttl", "15m", "--out", s.grant)
	s.handOffDies(t, "handoff:grant-refused", handofftest.StepByNurse)
	openRows := func() []journal.HandOff { return s.openRowsOf(t, handofftest.StepByNurse) }
	if rows := openRows(); len(rows) != 1 || len(s.doctorEntries(t)) != 0 {
		t.Fatalf("after the kill: rows %+v, entries %v", rows, s.doctorEntries(t))
	}
	revokes := s.env.Gateway.Count(api.RouteACLRevoke)
	cs, _ := s.serve(t)
	if m, isErr := call(t, cs, "hand_off", map[string]any{"stepId": handofftest.StepByNurse}); !isErr || m["code"] != "ACL_DENIED" {
		t.Fatalf("hand_off after the restart: %v", m)
	}
	if n := s.env.Gateway.Count(api.RouteACLRevoke) - revokes; n != 0 {
		t.Fatalf("%d revokes sent for grants that never took", n)
	}
	if rows := openRows(); len(rows) != 0 {
		t.Fatalf("rows left open: %+v", rows)
	}
	out := run(t, "close-step", "--config", s.config, "--manifest", s.w.Manifest, "--step", handofftest.StepByNurse)
	if !strings.Contains(out, "no open hand-off") || !strings.HasSuffix(strings.TrimSpace(out), "CLOSE-STEP: DONE") {
		t.Fatalf("close-step:\n%s", out)
	}
}

// TestTwoServersHandingStepsSharingAKey (issue 18 item 1): two pdmcp
// processes on one journal hand, at the same time, two steps of one user
// that share a key (every Gateway answer slowed, so the two overlap). The
// journal's lock serialises them, whatever the schedule: one step is
// handed whole, the other is refused RECIPIENT_HAS_ENTRY naming it, and
// the first's entries are all there, as its journal rows say.
func TestTwoServersHandingStepsSharingAKey(t *testing.T) {
	s := newStepStack(t)
	m, err := grant.LoadManifest(s.w.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	st := m.Steps[handofftest.StepReferral]
	st.Label = "Referral: problems"
	st.Documents = map[string][]string{handofftest.DocID: {"problems"}}
	m.Steps["referral-problems"] = st
	if err := m.Save(s.w.Manifest); err != nil {
		t.Fatal(err)
	}
	run(t, "grant", "--manifest", s.w.Manifest, "--local-user", s.w.Patient.Name,
		"--documents", handofftest.DocID+","+handofftest.PlainDocID,
		"--tools", "list_approved_documents,hand_off,close_step", "--steps", handofftest.StepReferral+",referral-problems",
		"--ttl", "15m", "--out", s.grant)
	a, _ := s.serve(t)
	b, _ := s.serve(t)
	s.env.Gateway.SetFaults(reference.Faults{Delay: 150 * time.Millisecond})
	steps := []string{handofftest.StepReferral, "referral-problems"}
	results := make([]map[string]any, 2)
	errs := make([]bool, 2)
	var wg sync.WaitGroup
	for i, cs := range []*mcp.ClientSession{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "hand_off",
				Arguments: map[string]any{"stepId": steps[i]}})
			if err != nil {
				t.Errorf("hand_off %s: %v", steps[i], err)
				return
			}
			if r, ok := server.RefusalOf(res); ok && res.IsError {
				results[i], errs[i] = map[string]any{"code": r.Code, "detail": r.Detail}, true
			} else {
				results[i] = map[string]any{"ok": true}
			}
		}()
	}
	wg.Wait()
	s.env.Gateway.SetFaults(reference.Faults{})
	if errs[0] == errs[1] {
		t.Fatalf("both %v: %v", errs[0], results)
	}
	won, lost := 0, 1
	if errs[0] {
		won, lost = 1, 0
	}
	if results[lost]["code"] != "RECIPIENT_HAS_ENTRY" || !strings.Contains(fmt.Sprint(results[lost]["detail"]), fmt.Sprintf("step %q", steps[won])) {
		t.Fatalf("the step that lost: %v", results[lost])
	}
	want := map[string][]string{handofftest.StepReferral: {"allergies", "medications", "problems"}, "referral-problems": {"problems"}}[steps[won]]
	if got := s.doctorEntries(t); !slices.Equal(got, want) {
		t.Fatalf("the doctor's entries: %v, want %v (%s won)", got, want, steps[won])
	}
	j, err := journal.Open(context.Background(), journal.DefaultPath(s.w.Manifest))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	for i, step := range steps {
		rows, err := j.OpenHandOffs(context.Background(), step)
		if err != nil {
			t.Fatal(err)
		}
		if n := map[bool]int{true: len(want), false: 0}[i == won]; len(rows) != n {
			t.Errorf("open rows of %s: %d, want %d", step, len(rows), n)
		}
	}
}
