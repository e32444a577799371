package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/reference/reftest"
	"github.com/pdmcp/pdmcp/grant"
)

// TestHandOffWalkthroughWithACL follows handoff.md's walkthrough on the
// stdio path: the users made at the Gateway's admin principal route, WRITE
// for the patient with pdmcp acl grant, the doctor's ids from pdmcp acl
// list --principal, the step in the manifest, the patient's hand-off, the
// doctor's read; then acl list shows the bounded entry and acl grant
// refuses to widen it.
func TestHandOffWalkthroughWithACL(t *testing.T) {
	ctx := context.Background()
	s := newStack(t)
	if out, stderr, ok := s.protect(t, nil, "--source", ccdSource, "--document-id", "ccd-0001"); !ok {
		t.Fatalf("protect: %s %s", out, stderr)
	}
	sc, err := gateway.LoadServiceConfig(s.config)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := gateway.New(gateway.Config{BaseURL: s.env.URL, TrustFile: s.env.CAFile})
	if err != nil {
		t.Fatal(err)
	}
	patient, doctor := sc.Prefix+"patient", sc.Prefix+"doctor"
	for _, u := range []string{patient, doctor} {
		if _, err := admin.Admin(reftest.AdminUser, reftest.AdminPassword).CreatePrincipal(ctx, api.PrincipalRequest{Name: u}); err != nil {
			t.Fatal(err)
		}
	}
	for _, dt := range []string{"problems", "medications"} {
		if out, stderr, ok := s.acl(t, "grant", "--data-type", dt, "--principal", patient, "--rights", "WRITE"); !ok {
			t.Fatalf("acl grant %s: %s %s", dt, out, stderr)
		}
	}
	ids := s.aclList(t, "--data-type", "problems", "--principal", doctor)
	if ids.SystemID == 0 || ids.PrincipalID == "" || len(ids.After) != 0 {
		t.Fatalf("the doctor's ids: %+v", ids)
	}
	if _, err := grant.UpdateManifest(ctx, s.manifest, func(m *grant.Manifest) error {
		m.Steps = map[string]grant.Step{"referral-history": {Label: "Referral: history", From: patient,
			To:               grant.Recipient{Label: "Dr. Synthetic", ActingAs: doctor, SystemID: ids.SystemID, PrincipalID: ids.PrincipalID},
			Documents:        map[string][]string{"ccd-0001": {"problems", "medications"}},
			MaxWindowSeconds: 1800, Confirm: "none"}}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(s.manifest)
	s.grant = filepath.Join(dir, "grant-patient.json")
	run(t, "grant", "--manifest", s.manifest, "--local-user", patient, "--documents", "ccd-0001",
		"--tools", "list_approved_documents,read_protected_document,hand_off,close_step",
		"--steps", "referral-history", "--ttl", "30m", "--out", s.grant)
	pcs := s.connect(t)
	if got, isErr := call(t, pcs, "hand_off", map[string]any{"stepId": "referral-history"}); isErr {
		t.Fatalf("hand_off: %v", got)
	}

	s.grant = filepath.Join(dir, "grant-doctor.json")
	run(t, "grant", "--manifest", s.manifest, "--local-user", doctor, "--documents", "ccd-0001",
		"--tools", "read_protected_fragment", "--ttl", "15m", "--out", s.grant)
	dcs := s.connect(t)
	got, isErr := call(t, dcs, "read_protected_fragment", map[string]any{"documentId": "ccd-0001", "fragmentId": "problems"})
	if isErr || got["text"] == nil {
		t.Fatalf("the doctor's read of problems: %v", got)
	}
	got, isErr = call(t, dcs, "read_protected_fragment", map[string]any{"documentId": "ccd-0001", "fragmentId": "results"})
	wantRefused(t, got, isErr, "keyserver", "ACL_DENIED")

	list := s.aclList(t, "--data-type", "problems", "--principal", doctor)
	var bounded bool
	for _, e := range list.Entries {
		if e.Principal == doctor {
			bounded = e.EndTime != nil && strings.Join(e.Rights, ",") == "READ"
		}
	}
	if !bounded {
		t.Fatalf("acl list after the hand-off: %+v", list.Entries)
	}
	if _, stderr, ok := s.acl(t, "grant", "--data-type", "problems", "--principal", doctor, "--rights", "READ"); ok || !strings.Contains(stderr, "bounded entry") {
		t.Fatalf("acl grant over the hand-off's entry: ok=%v %s", ok, stderr)
	}
}
