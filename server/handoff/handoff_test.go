package handoff_test

import (
	"context"
	"errors"
	"maps"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/reference"
	"github.com/pdmcp/pdmcp/gateway/reference/reftest"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/crashpoint"
	"github.com/pdmcp/pdmcp/internal/handofftest"
	"github.com/pdmcp/pdmcp/server/handoff"
	"github.com/pdmcp/pdmcp/server/journal"
	"github.com/pdmcp/pdmcp/server/refusal"
)

type rig struct {
	env      *reftest.Env
	w        *handofftest.World
	m        *grant.Manifest
	g        *grant.Grant
	j        *journal.Journal
	e        *handoff.Engine
	patient  *gateway.Session
	hook     func(crashpoint.Point)
	handedTo []string // keys of the referral
}

func newRig(t *testing.T, o handofftest.Options, ttl time.Duration) *rig {
	t.Helper()
	r := &rig{env: reftest.Start(t, reference.Config{})}
	r.w = handofftest.Build(t, r.env, t.TempDir(), o)
	var err error
	if r.m, err = grant.LoadManifest(r.w.Manifest); err != nil {
		t.Fatal(err)
	}
	r.g = r.w.Grant(r.w.Patient.Name, []string{grant.ToolHandOff, grant.ToolCloseStep},
		[]string{handofftest.StepReferral, handofftest.StepByNurse}, ttl)
	if r.j, err = journal.Open(context.Background(), filepath.Join(r.w.Dir, "journal.sqlite")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.j.Close() })
	r.e = handoff.New(handoff.Config{Grant: r.g, Journal: r.j, ClockOffset: r.w.Client.ClockOffset,
		Hook: func(p crashpoint.Point) {
			if r.hook != nil {
				r.hook(p)
			}
		}})
	r.patient = r.w.As(t, r.w.Patient.Name)
	t.Cleanup(func() { r.patient.Revoke(context.Background()) })
	for _, dt := range []string{"allergies", "medications", "problems"} {
		r.handedTo = append(r.handedTo, r.w.Keys[dt])
	}
	return r
}

func (r *rig) plan(t *testing.T, step string) *handoff.Plan {
	t.Helper()
	p, err := r.e.Plan(r.m, step)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (r *rig) handOff(t *testing.T, acl handoff.ACL, step string) (*handoff.Receipt, error) {
	t.Helper()
	p := r.plan(t, step)
	end, err := r.e.EndTime(p)
	if err != nil {
		t.Fatal(err)
	}
	return r.e.HandOff(context.Background(), acl, "", p, end)
}

// doctorReads decrypts one section as the doctor and returns the refusal
// code, or "" when it opened.
func (r *rig) doctorReads(t *testing.T, fragment string) string {
	t.Helper()
	ttag, iv, ct := r.w.Fragment(t, fragment)
	s := r.w.As(t, r.w.Doctor.Name)
	defer s.Revoke(context.Background())
	_, err := s.Decrypt(context.Background(), ttag, iv, ct)
	return codeOf(err)
}

func codeOf(err error) string {
	if err == nil {
		return ""
	}
	var ae *api.Error
	if errors.As(err, &ae) {
		return ae.Layer + "/" + ae.Code
	}
	var r *refusal.Refusal
	if errors.As(err, &r) {
		return "adapter/" + string(r.Code)
	}
	return "error: " + err.Error()
}

func TestHandOffGrantsReadUntilClosed(t *testing.T) {
	r := newRig(t, handofftest.Options{}, time.Hour)
	ctx := context.Background()
	before := time.Now()
	rec, err := r.handOff(t, r.patient, handofftest.StepReferral)
	if err != nil {
		t.Fatalf("hand_off: %v", err)
	}
	if rec.Replayed || rec.Recipient != "Dr. Synthetic" || len(rec.Sections) != 3 || rec.ExpiresAt == "" {
		t.Fatalf("receipt %+v", rec)
	}
	for _, s := range rec.Sections {
		if s.FragmentID == "results" {
			t.Fatalf("results were handed: %+v", rec)
		}
	}
	// Each key: READ alone, the end sent (within the window), unlimited.
	exp, _ := time.Parse(time.RFC3339, rec.ExpiresAt)
	if exp.Before(before.Add(29*time.Minute)) || exp.After(before.Add(31*time.Minute)) {
		t.Errorf("expiresAt %s is not about 30 minutes on", rec.ExpiresAt)
	}
	for _, k := range r.handedTo {
		e, ok := r.w.Entry(t, k, r.w.Doctor)
		if !ok || len(e.Rights) != 1 || e.Rights[0] != api.RightRead || e.Uses != nil || e.EndTime == nil || !e.EndTime.Equal(exp) {
			t.Fatalf("doctor's entry on a handed key: %+v (present %v)", e, ok)
		}
	}
	if _, ok := r.w.Entry(t, r.w.Keys["results"], r.w.Doctor); ok {
		t.Fatal("the doctor got an entry on the results key")
	}
	if code := r.doctorReads(t, "problems"); code != "" {
		t.Errorf("doctor reading problems: %s", code)
	}
	if code := r.doctorReads(t, "results"); code != "keyserver/ACL_DENIED" {
		t.Errorf("doctor reading results: %q, want keyserver/ACL_DENIED", code)
	}
	// Not passed on: the doctor's own grant to the nurse is refused.
	doc := r.w.As(t, r.w.Doctor.Name)
	err = doc.ACLGrant(ctx, api.ACLGrantRequest{TTag: r.w.Keys["problems"], SystemID: r.w.Nurse.SystemID,
		PrincipalID: r.w.Nurse.PrincipalID, Rights: []string{api.RightRead}})
	if codeOf(err) != "keyserver/ACL_DENIED" || !strings.Contains(err.Error(), "write privilege") {
		t.Errorf("doctor passing it on: %v", err)
	}
	doc.Revoke(ctx)

	// Asked again while open: the first receipt, nothing sent to ACL grant.
	grants := r.env.Gateway.Count(api.RouteACLGrant)
	again, err := r.handOff(t, r.patient, handofftest.StepReferral)
	if err != nil || !again.Replayed || again.ExpiresAt != rec.ExpiresAt || len(again.Sections) != 3 {
		t.Fatalf("hand_off again: %+v, %v", again, err)
	}
	if n := r.env.Gateway.Count(api.RouteACLGrant) - grants; n != 0 {
		t.Errorf("hand_off again sent %d grants", n)
	}
	if open, until, err := r.e.Status(ctx, "", handofftest.StepReferral); err != nil || !open || !until.Equal(exp) {
		t.Errorf("status: %v %v %v", open, until, err)
	}

	closed, err := r.e.Close(ctx, r.patient, "", r.plan(t, handofftest.StepReferral))
	if err != nil || closed.ClosedAt == "" || len(closed.Sections) != 3 || closed.Replayed {
		t.Fatalf("close: %+v, %v", closed, err)
	}
	for _, k := range r.handedTo {
		if _, ok := r.w.Entry(t, k, r.w.Doctor); ok {
			t.Fatal("an entry survived close")
		}
	}
	if code := r.doctorReads(t, "problems"); code != "keyserver/ACL_DENIED" {
		t.Errorf("doctor reading problems after close: %q", code)
	}
	revokes := r.env.Gateway.Count(api.RouteACLRevoke)
	again, err = r.e.Close(ctx, r.patient, "", r.plan(t, handofftest.StepReferral))
	if err != nil || !again.Replayed || again.ClosedAt != closed.ClosedAt {
		t.Fatalf("close again: %+v, %v", again, err)
	}
	if n := r.env.Gateway.Count(api.RouteACLRevoke) - revokes; n != 0 {
		t.Errorf("close again sent %d revokes", n)
	}
	if open, _, _ := r.e.Status(ctx, "", handofftest.StepReferral); open {
		t.Error("status open after close")
	}
	// A fresh hand-off after the close is a new one.
	if rec2, err := r.handOff(t, r.patient, handofftest.StepReferral); err != nil || rec2.Replayed {
		t.Fatalf("hand_off after close: %+v, %v", rec2, err)
	}
}

func TestFailureOnSecondKeyLeavesNothing(t *testing.T) {
	r := newRig(t, handofftest.Options{}, time.Hour)
	journalled := 0
	r.hook = func(p crashpoint.Point) {
		if p == crashpoint.HandOffJournalled {
			journalled++
			if journalled == 2 {
				r.env.Gateway.SetFaults(reference.Faults{FailNext: map[string]int{api.RouteACLGrant: 1}})
			}
		}
	}
	_, err := r.handOff(t, r.patient, handofftest.StepReferral)
	if codeOf(err) != "gateway/INJECTED_FAULT" {
		t.Fatalf("hand_off with the second grant failing: %v", err)
	}
	for _, k := range r.handedTo {
		if e, ok := r.w.Entry(t, k, r.w.Doctor); ok {
			t.Fatalf("an entry was left after the failure: %+v", e)
		}
	}
	open, err := r.j.OpenHandOffs(context.Background(), handofftest.StepReferral)
	if err != nil || len(open) != 0 {
		t.Fatalf("journal rows left open: %+v, %v", open, err)
	}
	if code := r.doctorReads(t, "allergies"); code != "keyserver/ACL_DENIED" {
		t.Errorf("doctor reading the first key: %q", code)
	}
}

func TestRecipientEntryIsNeverTouched(t *testing.T) {
	r := newRig(t, handofftest.Options{}, time.Hour)
	ctx := context.Background()
	// The patient gave the doctor medications herself, for a year.
	end := time.Now().Add(365 * 24 * time.Hour).UTC().Truncate(time.Second)
	if err := r.patient.ACLGrant(ctx, api.ACLGrantRequest{TTag: r.w.Keys["medications"], SystemID: r.w.Doctor.SystemID,
		PrincipalID: r.w.Doctor.PrincipalID, Rights: []string{api.RightRead, api.RightWrite}, EndTime: &end}); err != nil {
		t.Fatal(err)
	}
	before := r.env.Gateway.Counts()
	_, err := r.handOff(t, r.patient, handofftest.StepReferral)
	if codeOf(err) != "adapter/"+string(refusal.RecipientHasEntry) {
		t.Fatalf("got %v, want RECIPIENT_HAS_ENTRY", err)
	}
	after := r.env.Gateway.Counts()
	for _, route := range []string{api.RouteACLGrant, api.RouteACLUpdate, api.RouteACLRevoke, api.RouteEncrypt, api.RouteDecrypt} {
		if after[route] != before[route] {
			t.Errorf("%s was called: %d -> %d", route, before[route], after[route])
		}
	}
	e, ok := r.w.Entry(t, r.w.Keys["medications"], r.w.Doctor)
	if !ok || len(e.Rights) != 2 || e.EndTime == nil || !e.EndTime.Equal(end) {
		t.Fatalf("the recipient's own entry changed: %+v", e)
	}
	for _, dt := range []string{"allergies", "problems"} {
		if _, ok := r.w.Entry(t, r.w.Keys[dt], r.w.Doctor); ok {
			t.Errorf("an entry on %s was made", dt)
		}
	}
}

func TestEntryChangedBeforeReadBackIsUndone(t *testing.T) {
	r := newRig(t, handofftest.Options{}, time.Hour)
	ctx := context.Background()
	granted := 0
	r.hook = func(p crashpoint.Point) {
		if p != crashpoint.HandOffGranted {
			return
		}
		granted++
		if granted == 1 {
			// Someone widens the first entry between the grant and the
			// read-back.
			updated := 0
			for _, k := range r.handedTo {
				if r.patient.ACLUpdate(ctx, api.ACLGrantRequest{TTag: k, SystemID: r.w.Doctor.SystemID,
					PrincipalID: r.w.Doctor.PrincipalID, Rights: []string{api.RightRead, api.RightWrite}}) == nil {
					updated++
				}
			}
			if updated != 1 {
				t.Errorf("updated %d entries, want the one granted", updated)
			}
		}
	}
	_, err := r.handOff(t, r.patient, handofftest.StepReferral)
	if codeOf(err) != "adapter/"+string(refusal.HandOffNotVerified) {
		t.Fatalf("got %v, want HANDOFF_NOT_VERIFIED", err)
	}
	// The widened entry is no longer what this server granted: it is left
	// alone, and the call says so; the others are revoked.
	var la *handoff.LeftAloneError
	if !errors.As(err, &la) || la.LeftAlone != 1 {
		t.Fatalf("got %v, want one entry left alone", err)
	}
	left := 0
	for _, k := range r.handedTo {
		if e, ok := r.w.Entry(t, k, r.w.Doctor); ok {
			if len(e.Rights) != 2 {
				t.Fatalf("an entry was left that is not the widened one: %+v", e)
			}
			left++
		}
	}
	if left != 1 {
		t.Fatalf("%d entries left, want the widened one", left)
	}
	if open, _ := r.j.OpenHandOffs(ctx, handofftest.StepReferral); len(open) != 0 {
		t.Fatalf("journal rows left open: %+v", open)
	}
}

func TestReadOnlyHolderCannotHand(t *testing.T) {
	r := newRig(t, handofftest.Options{}, time.Hour)
	nurse := r.w.As(t, r.w.Nurse.Name)
	defer nurse.Revoke(context.Background())
	_, err := r.handOff(t, nurse, handofftest.StepByNurse)
	if codeOf(err) != "keyserver/ACL_DENIED" {
		t.Fatalf("the nurse's hand-off: %v, want keyserver ACL_DENIED", err)
	}
	if _, ok := r.w.Entry(t, r.w.Keys["problems"], r.w.Doctor); ok {
		t.Fatal("the doctor got an entry")
	}
	if open, _ := r.j.OpenHandOffs(context.Background(), handofftest.StepByNurse); len(open) != 0 {
		t.Fatalf("journal rows left open: %+v", open)
	}
}

func TestShortWindowEndsAtTheKeyServer(t *testing.T) {
	r := newRig(t, handofftest.Options{Window: 5}, time.Hour)
	if _, err := r.handOff(t, r.patient, handofftest.StepReferral); err != nil {
		t.Fatal(err)
	}
	if code := r.doctorReads(t, "problems"); code != "" {
		t.Fatalf("doctor reading within the window: %s", code)
	}
	// The Gateway's clock moves 30 s on (inside the proof window), past the
	// entry's end; nobody closes the step.
	r.env.Gateway.SetFaults(reference.Faults{ClockSkew: 30 * time.Second})
	if code := r.doctorReads(t, "problems"); code != "keyserver/ACL_DENIED" {
		t.Fatalf("doctor reading after the window: %q, want keyserver/ACL_DENIED", code)
	}
}

func TestPlanAndWindowRefusals(t *testing.T) {
	r := newRig(t, handofftest.Options{}, time.Hour)
	m := r.m.Clone()
	delete(m.Steps, handofftest.StepByNurse)
	tests := []struct {
		name string
		g    func(*grant.Grant)
		m    *grant.Manifest
		step string
		code string
	}{
		{"not in grant", nil, r.m, "other", string(refusal.StepNotInGrant)},
		{"not in manifest", nil, m, handofftest.StepByNurse, string(refusal.UnknownStep)},
		{"no document of the step in the grant", func(g *grant.Grant) { g.Documents = []string{handofftest.PlainDocID} }, r.m,
			handofftest.StepReferral, string(refusal.NothingToHandOff)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := *r.g
			if tc.g != nil {
				tc.g(&g)
			}
			e := handoff.New(handoff.Config{Grant: &g, Journal: r.j})
			_, err := e.Plan(tc.m, tc.step)
			if codeOf(err) != "adapter/"+tc.code {
				t.Fatalf("got %v, want %s", err, tc.code)
			}
		})
	}
	// Less than four seconds of grant left.
	g := *r.g
	now := time.Now()
	g.NotAfter = now.Add(3 * time.Second)
	e := handoff.New(handoff.Config{Grant: &g, Journal: r.j, Now: func() time.Time { return now }})
	p, err := e.Plan(r.m, handofftest.StepReferral)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.EndTime(p); codeOf(err) != "adapter/"+string(refusal.WindowTooShort) {
		t.Fatalf("got %v, want WINDOW_TOO_SHORT", err)
	}
	// The grant in force (GrantNow: the server follows grant.json) decides
	// the end, not the one the run started with: renewed, the same step is
	// handed off, and its end is the window's.
	renewed := g
	renewed.NotAfter = now.Add(30 * 24 * time.Hour)
	e = handoff.New(handoff.Config{Grant: &g, GrantNow: func() *grant.Grant { return &renewed }, Journal: r.j,
		Now: func() time.Time { return now }})
	if end, err := e.EndTime(p); err != nil || !end.After(g.NotAfter) {
		t.Fatalf("under the renewed grant: end %v, %v; want past the start grant's end", end, err)
	}
	// The end is the grant's when it comes before the window's, moved by
	// the Gateway clock's offset.
	g.NotAfter = now.Add(10 * time.Minute)
	e = handoff.New(handoff.Config{Grant: &g, Journal: r.j, Now: func() time.Time { return now },
		ClockOffset: func() time.Duration { return 7 * time.Second }})
	end, err := e.EndTime(p)
	if want := g.NotAfter.Add(7 * time.Second).UTC().Truncate(time.Second); err != nil || !end.Equal(want) {
		t.Fatalf("end %v (%v), want %v", end, err, want)
	}
	if !p.IsDelegator(r.w.Patient.Name) || p.IsDelegator(r.w.Doctor.Name) || p.IsDelegator("") {
		t.Error("IsDelegator")
	}
}

func TestCloseStepNotOpen(t *testing.T) {
	r := newRig(t, handofftest.Options{}, time.Hour)
	before := r.env.Gateway.Counts()
	_, err := r.e.Close(context.Background(), r.patient, "", r.plan(t, handofftest.StepReferral))
	if codeOf(err) != "adapter/"+string(refusal.StepNotOpen) {
		t.Fatalf("got %v, want STEP_NOT_OPEN", err)
	}
	if after := r.env.Gateway.Counts(); !maps.Equal(before, after) {
		t.Fatalf("STEP_NOT_OPEN sent requests: %v -> %v", before, after)
	}
}

func TestRevokeFromJournal(t *testing.T) {
	r := newRig(t, handofftest.Options{}, time.Hour)
	ctx := context.Background()
	if _, err := r.handOff(t, r.patient, handofftest.StepReferral); err != nil {
		t.Fatal(err)
	}
	// As `pdmcp close-step` would: the service, acting as the step's user.
	res, err := handoff.CloseStep(ctx, handoff.CloseStepOptions{Minter: r.w.Client, Manifest: r.m, Journal: r.j,
		Step: handofftest.StepReferral})
	if err != nil || len(res) != 3 {
		t.Fatalf("CloseStep: %+v, %v", res, err)
	}
	for _, k := range r.handedTo {
		if _, ok := r.w.Entry(t, k, r.w.Doctor); ok {
			t.Fatal("an entry survived close-step")
		}
	}
	// Twice is safe: nothing is open.
	if res, err := handoff.CloseStep(ctx, handoff.CloseStepOptions{Minter: r.w.Client, Manifest: r.m, Journal: r.j,
		Step: handofftest.StepReferral}); err != nil || len(res) != 0 {
		t.Fatalf("CloseStep again: %+v, %v", res, err)
	}
	// The close_step tool then finds the step closed and replays.
	rec, err := r.e.Close(ctx, r.patient, "", r.plan(t, handofftest.StepReferral))
	if err != nil || !rec.Replayed {
		t.Fatalf("close after close-step: %+v, %v", rec, err)
	}
	if _, err := handoff.CloseStep(ctx, handoff.CloseStepOptions{Minter: r.w.Client, Manifest: r.m, Journal: r.j,
		Step: "nope"}); !errors.Is(err, grant.ErrUnknownStep) {
		t.Fatalf("unknown step: %v", err)
	}

	// The grant's own revocation (shutdown, GRANT_EXPIRED) does the same.
	if _, err := r.handOff(t, r.patient, handofftest.StepReferral); err != nil {
		t.Fatal(err)
	}
	if res, err := r.e.RevokeGrant(ctx, r.w.Client, r.m); err != nil || len(res) != 3 {
		t.Fatalf("RevokeGrant: %+v, %v", res, err)
	}
	for _, k := range r.handedTo {
		if _, ok := r.w.Entry(t, k, r.w.Doctor); ok {
			t.Fatal("an entry survived RevokeGrant")
		}
	}
}

func TestReadOnly(t *testing.T) {
	r := newRig(t, handofftest.Options{}, time.Hour)
	ctx := context.Background()
	doctor := handoff.Identity{SystemID: r.w.Doctor.SystemID, PrincipalID: r.w.Doctor.PrincipalID}
	patient := handoff.Identity{SystemID: r.w.Patient.SystemID, PrincipalID: r.w.Patient.PrincipalID}
	if _, ok, _ := r.e.ReadOnly(ctx, doctor, r.w.Keys["problems"]); ok {
		t.Fatal("read-only before any hand-off")
	}
	if _, err := r.handOff(t, r.patient, handofftest.StepReferral); err != nil {
		t.Fatal(err)
	}
	if step, ok, err := r.e.ReadOnly(ctx, doctor, r.w.Keys["problems"]); err != nil || !ok || step != handofftest.StepReferral {
		t.Fatalf("doctor on problems: %q %v %v", step, ok, err)
	}
	if _, ok, _ := r.e.ReadOnly(ctx, doctor, r.w.Keys["results"]); ok {
		t.Error("results were not handed")
	}
	if _, ok, _ := r.e.ReadOnly(ctx, patient, r.w.Keys["problems"]); ok {
		t.Error("the patient is not the recipient")
	}
	_, err := r.e.CheckSave(ctx, doctor, handofftest.DocID, "problems", r.w.Keys["problems"])
	if codeOf(err) != "adapter/"+string(refusal.HandedOffReadOnly) {
		t.Fatalf("doctor saving problems: %v", err)
	}
	release, err := r.e.CheckSave(ctx, patient, handofftest.DocID, "problems", r.w.Keys["problems"])
	if err != nil {
		t.Fatalf("patient saving problems: %v", err)
	}
	release()
	// Once closed, the doctor is no longer a recipient.
	if _, err := r.e.Close(ctx, r.patient, "", r.plan(t, handofftest.StepReferral)); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := r.e.ReadOnly(ctx, doctor, r.w.Keys["problems"]); ok {
		t.Error("read-only after close")
	}
}

func TestCheckSteps(t *testing.T) {
	r := newRig(t, handofftest.Options{}, time.Hour)
	m := r.m.Clone()
	st := m.Steps[handofftest.StepReferral]
	st.Documents = map[string][]string{handofftest.PlainDocID: {"problems"}}
	m.Steps[handofftest.StepReferral] = st
	err := handoff.CheckSteps(r.g, m)
	if !errors.Is(err, grant.ErrNotCompound) || !strings.Contains(err.Error(), handofftest.StepReferral) ||
		!strings.Contains(err.Error(), handofftest.PlainDocID) {
		t.Fatalf("non-compound: %v", err)
	}
	m = r.m.Clone()
	st = m.Steps[handofftest.StepReferral]
	st.Documents = map[string][]string{handofftest.DocID: {"vitals"}}
	m.Steps[handofftest.StepReferral] = st
	if err := handoff.CheckSteps(r.g, m); !errors.Is(err, grant.ErrUnknownDataType) || !strings.Contains(err.Error(), "vitals") {
		t.Fatalf("unknown data type: %v", err)
	}
	if err := handoff.CheckSteps(r.g, r.m); err != nil {
		t.Fatal(err)
	}
}

func TestUserWithoutTheACLRoleHandsNothing(t *testing.T) {
	// The key server's roles: a user holding the keys WRITE but without
	// the ACL role is refused ACCESS_DENIED, and nothing is handed.
	r := newRig(t, handofftest.Options{}, time.Hour)
	ctx := context.Background()
	clerk := reftest.Principal(t, r.w.Client, r.w.Service.Prefix+"clerk", api.RoleEncrypt, api.RoleDecrypt)
	for _, k := range r.handedTo {
		if err := r.patient.ACLGrant(ctx, api.ACLGrantRequest{TTag: k, SystemID: clerk.SystemID, PrincipalID: clerk.PrincipalID,
			Rights: []string{api.RightWrite}}); err != nil {
			t.Fatal(err)
		}
	}
	m := r.m.Clone()
	st := m.Steps[handofftest.StepReferral]
	st.From = clerk.Name
	m.Steps["by-clerk"] = st
	g := *r.g
	g.Steps = append(g.Steps, "by-clerk")
	e := handoff.New(handoff.Config{Grant: &g, Journal: r.j})
	p, err := e.Plan(m, "by-clerk")
	if err != nil {
		t.Fatal(err)
	}
	end, err := e.EndTime(p)
	if err != nil {
		t.Fatal(err)
	}
	s := r.w.As(t, clerk.Name)
	defer s.Revoke(ctx)
	_, err = e.HandOff(ctx, s, "", p, end)
	if codeOf(err) != "keyserver/ACCESS_DENIED" {
		t.Fatalf("the clerk's hand-off: %v, want keyserver ACCESS_DENIED", err)
	}
	for _, k := range r.handedTo {
		if _, ok := r.w.Entry(t, k, r.w.Doctor); ok {
			t.Fatal("the doctor got an entry")
		}
	}
	if open, _ := r.j.OpenHandOffs(ctx, "by-clerk"); len(open) != 0 {
		t.Fatalf("journal rows left open: %+v", open)
	}
}

// TestRevokeAfterTheStepLeftTheManifest: entries handed off under a step
// the operator then removed from the manifest, or gave another from user,
// are still revoked as the user they were granted as (recorded in the
// journal), by close-step and by the grant's revocation.
func TestRevokeAfterTheStepLeftTheManifest(t *testing.T) {
	r := newRig(t, handofftest.Options{}, time.Hour)
	ctx := context.Background()
	gone := *r.m
	gone.Steps = maps.Clone(r.m.Steps)
	delete(gone.Steps, handofftest.StepReferral)
	changed := *r.m
	changed.Steps = maps.Clone(r.m.Steps)
	st := changed.Steps[handofftest.StepReferral]
	st.From = r.w.Doctor.Name
	changed.Steps[handofftest.StepReferral] = st

	for _, tc := range []struct {
		name   string
		m      *grant.Manifest
		revoke func(m *grant.Manifest) ([]handoff.Revoked, error)
	}{
		{"close-step, step removed", &gone, func(m *grant.Manifest) ([]handoff.Revoked, error) {
			return handoff.CloseStep(ctx, handoff.CloseStepOptions{Minter: r.w.Client, Manifest: m, Journal: r.j, Step: handofftest.StepReferral})
		}},
		{"grant revocation, step removed", &gone, func(m *grant.Manifest) ([]handoff.Revoked, error) {
			return r.e.RevokeGrant(ctx, r.w.Client, m)
		}},
		{"close-step, from user changed", &changed, func(m *grant.Manifest) ([]handoff.Revoked, error) {
			return handoff.CloseStep(ctx, handoff.CloseStepOptions{Minter: r.w.Client, Manifest: m, Journal: r.j, Step: handofftest.StepReferral})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := r.handOff(t, r.patient, handofftest.StepReferral); err != nil {
				t.Fatal(err)
			}
			res, err := tc.revoke(tc.m)
			if err != nil || len(res) != 3 {
				t.Fatalf("revoke: %+v, %v", res, err)
			}
			for _, rv := range res {
				if rv.Outcome != journal.ClosedRevoked {
					t.Errorf("row %d closed %q, want %q", rv.ID, rv.Outcome, journal.ClosedRevoked)
				}
			}
			for _, k := range r.handedTo {
				if _, ok := r.w.Entry(t, k, r.w.Doctor); ok {
					t.Fatal("an entry survived")
				}
			}
			if open, err := r.j.OpenHandOffs(ctx, handofftest.StepReferral); err != nil || len(open) != 0 {
				t.Fatalf("open rows left: %d, %v", len(open), err)
			}
		})
	}
	// With nothing open, a step the manifest does not define is unknown.
	if _, err := handoff.CloseStep(ctx, handoff.CloseStepOptions{Minter: r.w.Client, Manifest: &gone, Journal: r.j,
		Step: handofftest.StepReferral}); !errors.Is(err, grant.ErrUnknownStep) {
		t.Fatalf("removed step with nothing open: %v", err)
	}
}
