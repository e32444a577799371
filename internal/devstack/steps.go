package devstack

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/grant"
)

// The development hand-off steps: the patient hands the history sections of
// the synthetic C-CDA (not its results) to the doctor, with and without
// asking the host's user to confirm.
const (
	DevStepReferral          = "referral"
	DevStepReferralConfirmed = "referral-confirmed"
	devStepDocument          = "ccd-0001"
)

// devStepTypes are the data types both steps hand; the patient holds them
// WRITE, so she may hand them, and the doctor holds nothing of his own.
func devStepTypes() []string { return []string{"allergies", "medications", "problems"} }

// devStepIDs are the steps the development grant names.
func devStepIDs() []string { return []string{DevStepReferral, DevStepReferralConfirmed} }

// provisionSteps gives the patient WRITE on the keys the steps hand and
// writes the two steps into the manifest. A second run finds both done and
// changes nothing.
func provisionSteps(ctx context.Context, sc *gateway.ServiceConfig, data string, rec *grant.SeedRecord, prefix string) error {
	manifestPath := filepath.Join(data, "manifest.json")
	m, err := grant.LoadManifest(manifestPath)
	if err != nil {
		return err
	}
	if d, ok := m.Documents[devStepDocument]; !ok || !d.IsCompound() {
		return fmt.Errorf("hand-off steps: the manifest has no compound document %q", devStepDocument)
	}
	c, err := gateway.New(sc.ClientConfig())
	if err != nil {
		return err
	}
	if err := c.SignIn(ctx); err != nil {
		return err
	}
	defer func() { _ = c.SignOut(context.WithoutCancel(ctx)) }()
	patient, err := principal(ctx, c, prefix+"dev.patient")
	if err != nil {
		return err
	}
	doctor, err := principal(ctx, c, prefix+"dev.doctor")
	if err != nil {
		return err
	}
	var keys []string
	for _, dt := range devStepTypes() {
		k := m.CompoundKeys[dt]
		if k == "" {
			return fmt.Errorf("hand-off steps: the manifest has no key for %q", dt)
		}
		keys = append(keys, k)
	}
	owner, err := c.Mint(ctx, gateway.MintRequest{ActingAs: rec.OwnerUser, Objects: keys, TTL: api.MaxScopedTTL})
	if err != nil {
		return fmt.Errorf("owner session: %w", err)
	}
	defer owner.Revoke(context.WithoutCancel(ctx))
	for _, k := range keys {
		entries, err := owner.ACLGet(ctx, k)
		if err != nil {
			return fmt.Errorf("read a handed key's access list: %w", err)
		}
		if slices.ContainsFunc(entries, func(e api.ACLEntry) bool {
			return e.SystemID == patient.SystemID && e.PrincipalID == patient.PrincipalID
		}) {
			continue
		}
		if err := owner.ACLGrant(ctx, api.ACLGrantRequest{TTag: k, SystemID: patient.SystemID,
			PrincipalID: patient.PrincipalID, Rights: []string{api.RightWrite}}); err != nil {
			return fmt.Errorf("grant the patient WRITE: %w", err)
		}
	}
	to := grant.Recipient{Label: "Dr. Doctor (development)", ActingAs: doctor.Name, SystemID: doctor.SystemID,
		PrincipalID: doctor.PrincipalID}
	want := map[string]grant.Step{
		DevStepReferral: {Label: "Referral: history for the doctor", From: patient.Name, To: to,
			Documents: map[string][]string{devStepDocument: devStepTypes()}, MaxWindowSeconds: 1800, Confirm: grant.ConfirmNone},
		DevStepReferralConfirmed: {Label: "Referral: history for the doctor, confirmed by the user", From: patient.Name, To: to,
			Documents: map[string][]string{devStepDocument: devStepTypes()}, MaxWindowSeconds: 1800, Confirm: grant.ConfirmElicit},
	}
	// Written under the manifest's lock on the file as it is now; a second
	// run finds both steps there and writes nothing.
	_, err = grant.UpdateManifest(ctx, manifestPath, func(next *grant.Manifest) error {
		if next.Steps == nil {
			next.Steps = map[string]grant.Step{}
		}
		for _, id := range slices.Sorted(maps.Keys(want)) {
			if _, ok := next.Steps[id]; !ok {
				next.Steps[id] = want[id]
			}
		}
		return nil
	})
	return err
}

// principal finds a principal, or creates it (a state folder made before
// the development users included it).
func principal(ctx context.Context, c *gateway.Client, name string) (*api.Principal, error) {
	p, err := c.GetPrincipal(ctx, name)
	var ae *api.Error
	if errors.As(err, &ae) && ae.Code == api.CodeNotFound {
		return c.CreatePrincipal(ctx, api.PrincipalRequest{Name: name})
	}
	return p, err
}
