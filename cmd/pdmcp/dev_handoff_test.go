package main

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/grant"
)

// TestDevHandOffOverHTTP: through pdmcp dev, over Streamable HTTP, the
// patient hands the referral step to the doctor: the doctor reads the
// handed sections and not the results, cannot pass them on (the key server
// refuses a READ holder's grant), cannot save a handed section
// (HANDED_OFF_READ_ONLY), and after close_step is refused by the key server.
func TestDevHandOffOverHTTP(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	d := startDev(t, state)
	patient := devClient(t, d, "patient")
	doctor := devClient(t, d, "doctor")
	step := map[string]any{"stepId": "referral"}
	frag := func(id string) (map[string]any, bool) {
		return call(t, doctor, "read_protected_fragment", map[string]any{"documentId": "ccd-0001", "fragmentId": id})
	}

	got, isErr := frag("problems")
	wantRefused(t, got, isErr, "keyserver", "ACL_DENIED")
	got, isErr = call(t, doctor, "hand_off", step)
	wantRefused(t, got, isErr, "adapter", "NOT_STEP_DELEGATOR")

	list, _ := call(t, patient, "list_approved_documents", nil)
	if !strings.Contains(strings.Join(stepIDs(list), ","), "referral") {
		t.Fatalf("the patient's list shows no steps: %v", list["steps"])
	}
	rec, isErr := call(t, patient, "hand_off", step)
	if isErr || len(rec["sections"].([]any)) != 3 {
		t.Fatalf("the patient's hand_off: %v", rec)
	}
	if got, isErr := frag("problems"); isErr || got["text"] == nil {
		t.Fatalf("the doctor reading the handed problems: %v", got)
	}
	got, isErr = frag("results")
	wantRefused(t, got, isErr, "keyserver", "ACL_DENIED")
	got, isErr = call(t, doctor, "save_protected_fragment", map[string]any{"documentId": "ccd-0001", "fragmentId": "problems",
		"text": `<section><code code="11450-4" codeSystem="2.16.840.1.113883.6.1"/><text>changed</text></section>`, "idempotencyKey": "doctor-1"})
	wantRefused(t, got, isErr, "adapter", "HANDED_OFF_READ_ONLY")

	// Not passed on: the doctor's own grant to carol is refused by the key
	// server.
	sc, err := gateway.LoadServiceConfig(d.info["serviceConfig"].(string))
	if err != nil {
		t.Fatal(err)
	}
	m, err := grant.LoadManifest(d.info["manifest"].(string))
	if err != nil {
		t.Fatal(err)
	}
	c, err := gateway.New(sc.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var doctorName, carolName string
	for _, u := range d.info["users"].([]any) {
		u := u.(map[string]any)
		switch u["name"] {
		case "doctor":
			doctorName = u["principal"].(string)
		case "carol":
			carolName = u["principal"].(string)
		}
	}
	carol, err := c.GetPrincipal(ctx, carolName)
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Mint(ctx, gateway.MintRequest{ActingAs: doctorName, Objects: []string{m.CompoundKeys["problems"]}, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	err = s.ACLGrant(ctx, api.ACLGrantRequest{TTag: m.CompoundKeys["problems"], SystemID: carol.SystemID,
		PrincipalID: carol.PrincipalID, Rights: []string{api.RightRead}})
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Layer != api.LayerKeyServer || ae.Code != api.CodeACLDenied {
		t.Fatalf("the doctor passing problems on: %v", err)
	}
	_ = s.Revoke(ctx)

	if got, isErr := call(t, patient, "close_step", step); isErr {
		t.Fatalf("close_step: %v", got)
	}
	got, isErr = frag("problems")
	wantRefused(t, got, isErr, "keyserver", "ACL_DENIED")
}

func stepIDs(list map[string]any) []string {
	var out []string
	steps, _ := list["steps"].([]any)
	for _, s := range steps {
		if m, ok := s.(map[string]any); ok {
			out = append(out, m["stepId"].(string))
		}
	}
	return out
}
