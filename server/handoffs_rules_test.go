package server_test

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/reference"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/crashpoint"
	"github.com/pdmcp/pdmcp/internal/handofftest"
	"github.com/pdmcp/pdmcp/internal/mcptest"
	"github.com/pdmcp/pdmcp/server"
	"github.com/pdmcp/pdmcp/server/journal"
	"github.com/pdmcp/pdmcp/server/refusal"
)

// stepProblems hands only problems (one of referral's keys) from the
// patient to the doctor: a second step sharing a key with referral.
const stepProblems = "referral-problems"

func withProblemsStep(window int) stepOptions {
	return stepOptions{
		manifest: func(m *grant.Manifest) {
			st := m.Steps[handofftest.StepReferral]
			st.Label = "Referral: problems"
			st.Documents = map[string][]string{handofftest.DocID: {"problems"}}
			st.MaxWindowSeconds = window
			m.Steps[stepProblems] = st
		},
		mutate: func(g *grant.Grant) { g.Steps = append(g.Steps, stepProblems) },
	}
}

// serverAs starts another server over the fixture's world and journal file
// (a second handle, as a second process would hold), with its own grant
// for user and the manifest m, and returns a client of it.
func (f *stepFixture) serverAs(t *testing.T, user string, tools []string, m *grant.Manifest, hook func(crashpoint.Point)) *mcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	g := f.w.Grant(user, tools, nil, time.Hour)
	j, err := journal.Open(ctx, journal.DefaultPath(f.w.Manifest))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	sessions := server.NewGrantSessions(f.w.Client, user, grant.Keys(g, m), g.NotAfter, nil, nil)
	srv, err := server.New(server.Config{Grant: g, Manifest: m, ManifestPath: f.w.Manifest, Journal: j,
		Sessions: sessions, Version: "test", RunID: "run-second", ClockOffset: f.w.Client.ClockOffset, CrashPoint: hook})
	if err != nil {
		t.Fatalf("server.New for %s: %v", user, err)
	}
	t.Cleanup(func() { srv.Close() })
	ct, st := mcp.NewInMemoryTransports()
	if _, err := srv.MCP().Connect(ctx, st, nil); err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "second-host", Version: "0"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close(); sessions.EndAll(context.Background()) })
	return cs
}

// await waits for done, or lets the caller go on after a while: the
// schedule of a race, never an assertion.
func await(done <-chan struct{}) {
	select {
	case <-done:
	case <-time.After(3 * time.Second):
	}
}

// TestHandOffGrantConflictIsRecipientHasEntry (issue 18 item 1): an entry
// for the recipient appears between the access-list read and the grant;
// the key server refuses the grant CONFLICT. That entry is not this
// server's: it is not revoked, the row is closed as not granted, and the
// model is told RECIPIENT_HAS_ENTRY.
func TestHandOffGrantConflictIsRecipientHasEntry(t *testing.T) {
	var f *stepFixture
	var foreign string
	own := time.Now().Add(24 * time.Hour).UTC().Truncate(time.Second)
	o := stepOptions{hook: func(p crashpoint.Point) {
		if p != crashpoint.HandOffJournalled || foreign != "" {
			return
		}
		foreign = f.newestOpenKey(t)
		f.patientGivesDoctor(t, foreign, own, false)
	}}
	f = newStepFixture(t, o)
	revokes := f.env.Gateway.Count(api.RouteACLRevoke)
	m, isErr := f.call(t, grant.ToolHandOff, map[string]any{"stepId": handofftest.StepReferral})
	if !isErr || m["code"] != string(refusal.RecipientHasEntry) || m["layer"] != "adapter" {
		t.Fatalf("hand_off with an entry appearing before the grant: %v", m)
	}
	if n := f.env.Gateway.Count(api.RouteACLRevoke) - revokes; n != 0 {
		t.Errorf("%d revokes sent: the grant made nothing", n)
	}
	e, ok := f.w.Entry(t, foreign, f.w.Doctor)
	if !ok || len(e.Rights) != 2 || e.EndTime == nil || !e.EndTime.Equal(own) {
		t.Fatalf("the entry that appeared: %+v (present %v)", e, ok)
	}
	j, err := journal.Open(context.Background(), journal.DefaultPath(f.w.Manifest))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	rows, _ := j.StepHandOffs(context.Background(), handofftest.StepReferral, "")
	if len(rows) != 1 || rows[0].State != journal.HandOffClosed || rows[0].CloseReason != journal.ClosedNotGranted {
		t.Fatalf("journal rows: %+v", rows)
	}
}

// TestConcurrentHandOffsSharingAKey (issue 18 item 1): one user hands two
// steps sharing a key at once; the second starts while the first is
// between its journal row and its grant. The two are serialised: one is
// handed whole, the other refused RECIPIENT_HAS_ENTRY naming it, and the
// first's entries are all there, as its journal and list say.
func TestConcurrentHandOffsSharingAKey(t *testing.T) {
	var f *stepFixture
	var once sync.Once
	var second map[string]any
	secondDone := make(chan struct{})
	o := withProblemsStep(600)
	o.hook = func(p crashpoint.Point) {
		if p != crashpoint.HandOffJournalled {
			return
		}
		once.Do(func() {
			go func() {
				defer close(secondDone)
				res, err := f.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: grant.ToolHandOff,
					Arguments: map[string]any{"stepId": stepProblems}})
				if err != nil {
					t.Error(err)
					return
				}
				if r, ok := server.RefusalOf(res); ok && res.IsError {
					second = map[string]any{"code": r.Code, "detail": r.Detail}
				} else {
					second = map[string]any{"ok": true}
				}
			}()
			await(secondDone)
		})
	}
	f = newStepFixture(t, o)
	first, isErr := f.call(t, grant.ToolHandOff, map[string]any{"stepId": handofftest.StepReferral})
	<-secondDone
	if isErr {
		t.Fatalf("the first hand_off: %v (the second: %v)", first, second)
	}
	if second["code"] != string(refusal.RecipientHasEntry) || !strings.Contains(fmt.Sprint(second["detail"]), `step "referral"`) {
		t.Fatalf("the second hand_off: %v", second)
	}
	for _, dt := range []string{"allergies", "medications", "problems"} {
		if _, ok := f.w.Entry(t, f.w.Keys[dt], f.w.Doctor); !ok {
			t.Errorf("the first hand-off's entry on %s is gone", dt)
		}
	}
	list, _ := f.call(t, grant.ToolListApprovedDocuments, nil)
	if !mcptest.StepOpen(list, handofftest.StepReferral) || mcptest.StepOpen(list, stepProblems) {
		t.Fatalf("list: %v", list["steps"])
	}
}

// TestRecipientHasEntryNamesTheStep (issue 18 item 9): an entry made by
// another of this server's steps is named as such, not as "not made by
// this server".
func TestRecipientHasEntryNamesTheStep(t *testing.T) {
	f := newStepFixture(t, withProblemsStep(600))
	if m, isErr := f.call(t, grant.ToolHandOff, map[string]any{"stepId": handofftest.StepReferral}); isErr {
		t.Fatal(m)
	}
	m, isErr := f.call(t, grant.ToolHandOff, map[string]any{"stepId": stepProblems})
	detail := fmt.Sprint(m["detail"])
	if !isErr || m["code"] != string(refusal.RecipientHasEntry) || strings.Contains(detail, "not made by this server") ||
		!strings.Contains(detail, `step "referral"`) {
		t.Fatalf("got %v", m)
	}
}

// TestLapsedHandOffDoesNotBlockTheKey (issue 18 item 9): a hand-off that
// lapsed and was never closed does not block another step on its keys:
// the next hand-off closes its entry there (it reads as granted, so it is
// revoked) and goes ahead; closing the lapsed step afterwards revokes its
// other entries and never the new step's.
func TestLapsedHandOffDoesNotBlockTheKey(t *testing.T) {
	var skew time.Duration
	o := withProblemsStep(600)
	o.world = handofftest.Options{Window: 5}
	o.now = func() time.Time { return time.Now().Add(skew) }
	f := newStepFixture(t, o)
	if m, isErr := f.call(t, grant.ToolHandOff, map[string]any{"stepId": handofftest.StepReferral}); isErr {
		t.Fatal(m)
	}
	// Both clocks move 30 s on: referral's entries have lapsed.
	skew = 30 * time.Second
	f.env.Gateway.SetFaults(reference.Faults{ClockSkew: skew})
	t.Cleanup(func() { f.env.Gateway.SetFaults(reference.Faults{}) })
	rec, isErr := f.call(t, grant.ToolHandOff, map[string]any{"stepId": stepProblems})
	if isErr {
		t.Fatalf("hand_off over a lapsed hand-off's key: %v", rec)
	}
	e, ok := f.w.Entry(t, f.w.Keys["problems"], f.w.Doctor)
	if !ok || e.EndTime == nil || e.EndTime.Format(time.RFC3339) != rec["expiresAt"] {
		t.Fatalf("the doctor's entry on problems: %+v (present %v), receipt %v", e, ok, rec)
	}
	closed, isErr := f.call(t, grant.ToolCloseStep, map[string]any{"stepId": handofftest.StepReferral})
	if isErr {
		t.Fatalf("close_step of the lapsed step: %v", closed)
	}
	for _, dt := range []string{"allergies", "medications"} {
		if _, ok := f.w.Entry(t, f.w.Keys[dt], f.w.Doctor); ok {
			t.Errorf("the lapsed entry on %s survived its close", dt)
		}
	}
	if e2, ok := f.w.Entry(t, f.w.Keys["problems"], f.w.Doctor); !ok || !e2.EndTime.Equal(*e.EndTime) {
		t.Fatalf("closing the lapsed step touched the new step's entry: %+v (present %v)", e2, ok)
	}
}

// TestReadOnlyHoldsByIdentity (issue 18 item 8): the recipient's save of a
// handed section is refused by the ids the entry was granted to, not by
// the manifest's actingAs string, and still when the manifest no longer
// has the step.
func TestReadOnlyHoldsByIdentity(t *testing.T) {
	f := newStepFixture(t, stepOptions{manifest: func(m *grant.Manifest) {
		for id, st := range m.Steps {
			st.To.ActingAs = "someone-else" // the ids are still the doctor's
			m.Steps[id] = st
		}
	}})
	if m, isErr := f.call(t, grant.ToolHandOff, map[string]any{"stepId": handofftest.StepReferral}); isErr {
		t.Fatal(m)
	}
	m, err := grant.LoadManifest(f.w.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	noSteps := m.Clone()
	noSteps.Steps = nil
	tools := []string{grant.ToolReadProtectedFragment, grant.ToolSaveProtectedFragment}
	for name, man := range map[string]*grant.Manifest{"actingAs differs": m, "steps removed": noSteps} {
		t.Run(name, func(t *testing.T) {
			doctor := f.serverAs(t, f.w.Doctor.Name, tools, man, nil)
			before := mcptest.KeyRouteCounts(f.env.Gateway)
			res, isErr := mcptest.Call(t, doctor, grant.ToolSaveProtectedFragment, map[string]any{"documentId": handofftest.DocID,
				"fragmentId": "problems", "text": "<section><text>changed by the doctor</text></section>",
				"idempotencyKey": "doc-" + strings.ReplaceAll(name, " ", "-")})
			if !isErr || res["code"] != string(refusal.HandedOffReadOnly) || res["layer"] != "adapter" {
				t.Fatalf("the doctor's save: %v", res)
			}
			if after := mcptest.KeyRouteCounts(f.env.Gateway); !maps.Equal(before, after) {
				t.Fatalf("HANDED_OFF_READ_ONLY reached the crypto or key routes: %v -> %v", before, after)
			}
		})
	}
}

// TestReadOnlyCheckedUnderTheLock (issue 18 item 8): a hand-off to the
// doctor that starts while the doctor's save is past its read-only check
// waits for the save to end, so the save cannot use the new entry: it is
// refused by the key server, and the hand-off then goes ahead.
func TestReadOnlyCheckedUnderTheLock(t *testing.T) {
	f := newStepFixture(t, stepOptions{})
	m, err := grant.LoadManifest(f.w.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	handed := make(chan struct{})
	var rec map[string]any
	doctor := f.serverAs(t, f.w.Doctor.Name, []string{grant.ToolSaveProtectedFragment}, m, func(p crashpoint.Point) {
		if p != crashpoint.FragmentReserved {
			return
		}
		once.Do(func() {
			go func() {
				defer close(handed)
				rec, _ = f.call(t, grant.ToolHandOff, map[string]any{"stepId": handofftest.StepReferral})
			}()
			await(handed)
		})
	})
	res, isErr := mcptest.Call(t, doctor, grant.ToolSaveProtectedFragment, map[string]any{"documentId": handofftest.DocID,
		"fragmentId": "problems", "text": "<section><text>changed by the doctor</text></section>", "idempotencyKey": "race"})
	<-handed
	if !isErr || res["layer"] != "keyserver" || res["code"] != api.CodeACLDenied {
		t.Fatalf("the doctor's save racing the hand-off: %v (hand-off %v)", res, rec)
	}
	if rec["replayed"] != false {
		t.Fatalf("the hand-off after the save: %v", rec)
	}
}

// TestRevokeFromJournalLeavesOthersEntries (issue 18 item 1): an open row
// whose entry the recipient no longer holds as this server granted it
// (here: revoked by the patient, who then gave the doctor her own, READ
// and WRITE for a day; a row journalled before a crash whose grant was
// never sent is the same case) is closed by shutdown, by GRANT_EXPIRED and
// by close_step without revoking that entry, as left alone; close_step's
// receipt and audit line say so.
func TestRevokeFromJournalLeavesOthersEntries(t *testing.T) {
	for _, how := range []string{"shutdown", "GRANT_EXPIRED", grant.ToolCloseStep} {
		t.Run(how, func(t *testing.T) {
			var now time.Time
			f := newStepFixture(t, stepOptions{now: func() time.Time {
				if now.IsZero() {
					return time.Now()
				}
				return now
			}})
			ctx := context.Background()
			// A verified hand-off, so close_step has something to close, then
			// a crash's row on problems: journalled, never granted.
			if m, isErr := f.call(t, grant.ToolHandOff, map[string]any{"stepId": handofftest.StepReferral}); isErr {
				t.Fatal(m)
			}
			j, err := journal.Open(ctx, journal.DefaultPath(f.w.Manifest))
			if err != nil {
				t.Fatal(err)
			}
			defer j.Close()
			rows, _ := j.OpenHandOffs(ctx, handofftest.StepReferral)
			var problems journal.HandOff
			for _, r := range rows {
				if r.TTag == f.w.Keys["problems"] {
					problems = r
				}
			}
			// Someone revokes the server's entry on problems and the patient
			// then gives the doctor her own.
			own := time.Now().Add(24 * time.Hour).UTC().Truncate(time.Second)
			s := f.w.As(t, f.w.Patient.Name)
			if err := s.ACLRevoke(ctx, api.ACLRevokeRequest{TTag: problems.TTag, SystemID: f.w.Doctor.SystemID,
				PrincipalID: f.w.Doctor.PrincipalID}); err != nil {
				t.Fatal(err)
			}
			if err := s.ACLGrant(ctx, api.ACLGrantRequest{TTag: problems.TTag, SystemID: f.w.Doctor.SystemID,
				PrincipalID: f.w.Doctor.PrincipalID, Rights: []string{api.RightRead, api.RightWrite}, EndTime: &own}); err != nil {
				t.Fatal(err)
			}
			s.Revoke(ctx)
			switch how {
			case "shutdown":
				f.srv.RevokeHandOffs(ctx)
			case "GRANT_EXPIRED":
				now = time.Now().Add(2 * time.Hour)
				if m, _ := f.call(t, grant.ToolListApprovedDocuments, nil); m["code"] != string(refusal.GrantExpired) {
					t.Fatalf("after the grant: %v", m)
				}
			case grant.ToolCloseStep:
				rec, isErr := f.call(t, grant.ToolCloseStep, map[string]any{"stepId": handofftest.StepReferral})
				alone, _ := rec["leftAlone"].([]any)
				if isErr || len(alone) != 1 || alone[0].(map[string]any)["fragmentId"] != "problems" {
					t.Fatalf("close_step: %v", rec)
				}
				if line := f.lastAudit(t, grant.ToolCloseStep); line["entriesLeftAlone"] != float64(1) {
					t.Errorf("audit line %v", line)
				}
			}
			e, ok := f.w.Entry(t, problems.TTag, f.w.Doctor)
			if !ok || len(e.Rights) != 2 || e.EndTime == nil || !e.EndTime.Equal(own) {
				t.Fatalf("the patient's own entry after %s: %+v (present %v)", how, e, ok)
			}
			for _, dt := range []string{"allergies", "medications"} {
				if _, ok := f.w.Entry(t, f.w.Keys[dt], f.w.Doctor); ok {
					t.Errorf("the server's own entry on %s survived %s", dt, how)
				}
			}
			if got, err := j.GetHandOff(ctx, problems.ID); err != nil || got.State != journal.HandOffClosed ||
				got.CloseReason != journal.ClosedLeftAlone {
				t.Fatalf("the row after %s: %+v, %v", how, got, err)
			}
		})
	}
}

// TestHandOffUndoLeavesAChangedEntryAndSaysSo (issue 18 item 1): the
// delegating user replaces the entry the hand-off just granted (READ and
// WRITE, her own end) before it is read back. The read-back fails, and the
// undo revokes only what still reads as granted: her entry is left as it
// is, and both the refusal and the audit line say one entry was left
// alone.
func TestHandOffUndoLeavesAChangedEntryAndSaysSo(t *testing.T) {
	var f *stepFixture
	var changed string
	own := time.Now().Add(24 * time.Hour).UTC().Truncate(time.Second)
	f = newStepFixture(t, stepOptions{hook: func(p crashpoint.Point) {
		if p != crashpoint.HandOffGranted || changed != "" {
			return
		}
		changed = f.newestOpenKey(t)
		f.patientGivesDoctor(t, changed, own, true)
	}})
	m, isErr := f.call(t, "hand_off", map[string]any{"stepId": handofftest.StepReferral})
	if !isErr || !strings.Contains(fmt.Sprint(m["detail"]), "1 access entries this hand-off had made no longer read as it granted them") {
		t.Fatalf("hand_off with its entry replaced before the read-back: %v", m)
	}
	if line := f.lastAudit(t, "hand_off"); line["entriesLeftAlone"] != float64(1) {
		t.Errorf("audit line %v, want entriesLeftAlone 1", line)
	}
	e, ok := f.w.Entry(t, changed, f.w.Doctor)
	if !ok || len(e.Rights) != 2 || e.EndTime == nil || !e.EndTime.Equal(own) {
		t.Fatalf("the delegating user's own entry: %+v (present %v)", e, ok)
	}
	for dt, k := range f.w.Keys {
		if k == changed {
			continue
		}
		if _, ok := f.w.Entry(t, k, f.w.Doctor); ok {
			t.Errorf("the hand-off's entry on %s was not undone", dt)
		}
	}
}

// newestOpenKey is the key of the referral step's newest open journal row:
// the one the hand-off has just written when a hook of it runs.
func (f *stepFixture) newestOpenKey(t *testing.T) string {
	j, err := journal.Open(context.Background(), journal.DefaultPath(f.w.Manifest))
	if err != nil {
		t.Error(err)
		return ""
	}
	defer j.Close()
	rows, _ := j.OpenHandOffs(context.Background(), handofftest.StepReferral)
	return rows[len(rows)-1].TTag
}

// patientGivesDoctor gives the doctor the patient's own entry on ttag,
// READ and WRITE until end; replace revokes the doctor's entry first.
func (f *stepFixture) patientGivesDoctor(t *testing.T, ttag string, end time.Time, replace bool) {
	ctx := context.Background()
	s := f.w.As(t, f.w.Patient.Name)
	defer s.Revoke(ctx)
	if replace {
		if err := s.ACLRevoke(ctx, api.ACLRevokeRequest{TTag: ttag, SystemID: f.w.Doctor.SystemID, PrincipalID: f.w.Doctor.PrincipalID}); err != nil {
			t.Error(err)
		}
	}
	if err := s.ACLGrant(ctx, api.ACLGrantRequest{TTag: ttag, SystemID: f.w.Doctor.SystemID,
		PrincipalID: f.w.Doctor.PrincipalID, Rights: []string{api.RightRead, api.RightWrite}, EndTime: &end}); err != nil {
		t.Error(err)
	}
}
