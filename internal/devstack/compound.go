package devstack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/operator"
)

// devDataTypes is each development user's access to the compound
// documents' sections: alice every data type, bob only results, carol
// none, so the mixed view differs per user from the first command.
var devDataTypes = map[string][]string{
	"alice": {"allergies", "demographics", "medications", "problems", "results", "vitals"},
	"bob":   {"results"},
}

// devTools is what the development grant allows: the document tools and
// the section tools of compound documents.
func devTools() []string {
	return append(grant.DocumentTools(), grant.FragmentTools()...)
}

// provisionCompound protects the two synthetic compound documents into the
// seed's manifest (once: a rerun of protect finds them done and sends
// nothing) and gives each development user READ on the keys of their data
// types. Entries already there are left alone, so a second run adds
// nothing.
func provisionCompound(ctx context.Context, sc *gateway.ServiceConfig, data string, rec *grant.SeedRecord, prefix string) error {
	src := filepath.Join(data, "sources")
	if err := os.MkdirAll(src, 0o700); err != nil {
		return err
	}
	recordPath := filepath.Join(data, "seed-record.json")
	for _, f := range operator.CompoundFixtures() {
		p := filepath.Join(src, f.FileName)
		if err := os.WriteFile(p, f.Source, 0o600); err != nil {
			return err
		}
		if _, err := operator.Protect(ctx, operator.ProtectOptions{Config: sc, ManifestPath: filepath.Join(data, "manifest.json"),
			SourcePath: p, DocumentID: f.DocumentID, Label: f.Label, Category: "clinical", RecordPath: recordPath}); err != nil {
			return fmt.Errorf("protect %s: %w", f.DocumentID, err)
		}
	}
	m, err := grant.LoadManifest(filepath.Join(data, "manifest.json"))
	if err != nil {
		return err
	}
	c, err := gateway.New(sc.ClientConfig())
	if err != nil {
		return err
	}
	if err := c.SignIn(ctx); err != nil {
		return err
	}
	owner, err := c.Mint(ctx, gateway.MintRequest{ActingAs: rec.OwnerUser, Objects: slices.Sorted(mapValues(m.CompoundKeys)), TTL: api.MaxScopedTTL})
	if err != nil {
		return fmt.Errorf("owner session: %w", err)
	}
	defer owner.Revoke(context.WithoutCancel(ctx))
	for _, name := range slices.Sorted(mapKeys(devDataTypes)) {
		p, err := c.GetPrincipal(ctx, prefix+"dev."+name)
		if err != nil {
			return fmt.Errorf("principal %s: %w", name, err)
		}
		for _, dt := range devDataTypes[name] {
			ttag := m.CompoundKeys[dt]
			entries, err := owner.ACLGet(ctx, ttag)
			if err != nil {
				return fmt.Errorf("read the %s key's access list: %w", dt, err)
			}
			if slices.ContainsFunc(entries, func(e api.ACLEntry) bool {
				return e.SystemID == p.SystemID && e.PrincipalID == p.PrincipalID
			}) {
				continue
			}
			if err := owner.ACLGrant(ctx, api.ACLGrantRequest{TTag: ttag, SystemID: p.SystemID, PrincipalID: p.PrincipalID,
				Rights: []string{api.RightRead}}); err != nil {
				return fmt.Errorf("grant %s READ on %s: %w", name, dt, err)
			}
		}
	}
	return nil
}

func mapValues(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for _, v := range m {
			if !yield(v) {
				return
			}
		}
	}
}

func mapKeys(m map[string][]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
