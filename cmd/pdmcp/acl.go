package main

import (
	"errors"
	"maps"
	"slices"

	"github.com/spf13/cobra"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/operator"
)

// newACLCmd is `pdmcp acl grant|revoke|list`: access entries on a key the
// manifest names, changed as the key's owner.
func newACLCmd() *cobra.Command {
	var (
		o          operator.ACLOptions
		configPath string
		rights     string
		asJSON     bool
	)
	acl := &cobra.Command{
		Use:   "acl",
		Short: "Grant, revoke or list READ/WRITE entries on a document's, data type's or destination's key",
		Long: "acl changes a key's access list at the key server as the registered service acting as the key's owner\n" +
			"(--owner, by default the seed record's owner: --seed-record, or seed-record.json beside the manifest). The key\n" +
			"is named through the manifest (--document, --data-type or --destination), never by its t-Tag; the principal\n" +
			"as the Gateway names it (--principal, with the service's prefix). Each change is read back and reported.\n" +
			"A change the command refuses (a key the manifest does not name, an unknown principal, an owner's entry)\n" +
			"exits with status 3, nothing sent.\n\n" +
			"--json prints one object (members are only ever added):\n" +
			"  {\"action\": \"grant\"|\"revoke\"|\"list\", \"kind\": \"document\"|\"data type\"|\"destination\", \"name\",\n" +
			"   \"principal\", \"systemId\", \"principalId\", \"before\": [rights], \"after\": [rights], \"changed\": bool,\n" +
			"   \"entries\": [{\"principal\", \"systemId\", \"principalId\", \"rights\": [...], \"endTime\", \"uses\"}, ...]}",
		Example: "  pdmcp acl list --config config.json --manifest task-data/manifest.json --document proposal-aurora\n" +
			"  pdmcp acl grant --config config.json --manifest task-data/manifest.json --data-type results \\\n" +
			"      --principal svc.seed1a2b3c.nurse --rights READ --json\n" +
			"  pdmcp acl revoke --config config.json --manifest task-data/manifest.json --destination evaluation-summary \\\n" +
			"      --principal svc.seed1a2b3c.nurse --seed-record task-data/seed-record.json",
	}
	pf := acl.PersistentFlags()
	pf.StringVar(&configPath, "config", "", "config.json from pdmcp bootstrap")
	pf.StringVar(&o.ManifestPath, "manifest", "", "the manifest that names the key")
	pf.StringVar(&o.DocumentID, "document", "", "a single document: its key")
	pf.StringVar(&o.DataType, "data-type", "", "a compound documents' data type: its key (the manifest's compoundKeys)")
	pf.StringVar(&o.Destination, "destination", "", "a save destination: its key")
	pf.StringVar(&o.Owner, "owner", "", "the key's owner, as the Gateway names the principal (default: the seed record's owner)")
	pf.StringVar(&o.RecordPath, "seed-record", "", "a seed-record.json whose owner owns the key (default: the one beside the manifest)")
	aliasFlag(pf, "record", "seed-record", nil, "")
	pf.BoolVar(&asJSON, "json", false, "print one JSON object (shape in pdmcp acl --help) instead of the report")
	// The manifest's names, once --manifest is given.
	_ = acl.RegisterFlagCompletionFunc("document", completeFromManifest(false, func(m *grant.Manifest) []string {
		return slices.Sorted(maps.Keys(m.Documents))
	}))
	_ = acl.RegisterFlagCompletionFunc("data-type", completeFromManifest(false, func(m *grant.Manifest) []string {
		return slices.Sorted(maps.Keys(m.CompoundKeys))
	}))
	_ = acl.RegisterFlagCompletionFunc("destination", completeFromManifest(false, func(m *grant.Manifest) []string {
		return slices.Sorted(maps.Keys(m.Destinations))
	}))
	_ = acl.MarkPersistentFlagRequired("config")
	_ = acl.MarkPersistentFlagRequired("manifest")

	sub := func(use, short string, do func(*cobra.Command) (*operator.ACLReport, error)) *cobra.Command {
		c := command(use, short, func(cmd *cobra.Command) error {
			sc, err := gateway.LoadServiceConfig(configPath)
			if err != nil {
				return err
			}
			o.Config = sc
			o.Logger = loggerFrom(cmd.Context())
			rep, err := do(cmd)
			if errors.Is(err, operator.ErrACLRefused) {
				return refusedError(err)
			}
			if err != nil {
				return operator.GatewayWords(sc.GatewayURL, err, "")
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), rep)
			}
			rep.WriteText(cmd.OutOrStdout())
			return nil
		})
		// --rights is the command line's: a wrong one is a usage error,
		// found before config.json is read.
		c.PreRunE = func(*cobra.Command, []string) error {
			if n := countSet(o.DocumentID, o.DataType, o.Destination); n != 1 {
				return usageError("name exactly one key: --document, --data-type or --destination (got %d)", n)
			}
			var err error
			if o.Rights, err = operator.ParseRights(rights); err != nil {
				return &exitError{code: exitUsage, err: err}
			}
			return nil
		}
		return c
	}
	grantCmd := sub("grant", "Add READ and/or WRITE to a principal's entry on the key (read back)", func(cmd *cobra.Command) (*operator.ACLReport, error) {
		return operator.ACLGrant(cmd.Context(), o)
	})
	grantCmd.Flags().StringVar(&o.Principal, "principal", "", "the grantee, as the Gateway names it")
	grantCmd.Flags().StringVar(&rights, "rights", "", "READ, WRITE or READ,WRITE (READ is enough to read and to save)")
	grantCmd.Example = "  pdmcp acl grant --config config.json --manifest task-data/manifest.json --data-type results \\\n" +
		"      --principal svc.seed1a2b3c.nurse --rights READ"
	_ = grantCmd.RegisterFlagCompletionFunc("rights", completeRights)
	revokeCmd := sub("revoke", "Take rights (or the whole entry) from a principal's entry on the key (read back)", func(cmd *cobra.Command) (*operator.ACLReport, error) {
		return operator.ACLRevoke(cmd.Context(), o)
	})
	revokeCmd.Flags().StringVar(&o.Principal, "principal", "", "whose entry, as the Gateway names the principal")
	revokeCmd.Flags().StringVar(&rights, "rights", "", "only these rights (default: the whole entry)")
	revokeCmd.Example = "  pdmcp acl revoke --config config.json --manifest task-data/manifest.json --data-type results \\\n" +
		"      --principal svc.seed1a2b3c.nurse --json"
	_ = revokeCmd.RegisterFlagCompletionFunc("rights", completeRights)
	listCmd := sub("list", "List the key's entries (with --principal: that principal's ids and rights too)", func(cmd *cobra.Command) (*operator.ACLReport, error) {
		return operator.ACLList(cmd.Context(), o)
	})
	listCmd.Flags().StringVar(&o.Principal, "principal", "", "also name this principal's ids (as a hand-off step's \"to\" needs them) and rights")
	listCmd.Example = "  pdmcp acl list --config config.json --manifest task-data/manifest.json --document proposal-aurora\n" +
		"  pdmcp acl list --config config.json --manifest task-data/manifest.json --destination evaluation-summary \\\n" +
		"      --principal svc.seed1a2b3c.nurse --json"
	acl.AddCommand(requireFlags(grantCmd, "principal", "rights"), requireFlags(revokeCmd, "principal"), listCmd)
	return acl
}

// countSet is how many of vals are not "".
func countSet(vals ...string) int {
	n := 0
	for _, v := range vals {
		if v != "" {
			n++
		}
	}
	return n
}

// completeRights completes --rights.
func completeRights(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	return []string{"READ", "WRITE", "READ,WRITE"}, cobra.ShellCompDirectiveNoFileComp
}
