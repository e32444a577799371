package main

import (
	"encoding/json"

	"github.com/spf13/cobra"

	"github.com/pdmcp/pdmcp/gateway"
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
			"(--owner, by default the seed record's owner: --record, or seed-record.json beside the manifest). The key\n" +
			"is named through the manifest (--document, --data-type or --destination), never by its t-Tag; the principal\n" +
			"as the Gateway names it (--principal, with the service's prefix). Each change is read back and reported.",
	}
	pf := acl.PersistentFlags()
	pf.StringVar(&configPath, "config", "", "config.json from pdmcp bootstrap")
	pf.StringVar(&o.ManifestPath, "manifest", "", "the manifest that names the key")
	pf.StringVar(&o.DocumentID, "document", "", "a single document: its key")
	pf.StringVar(&o.DataType, "data-type", "", "a compound documents' data type: its key (the manifest's compoundKeys)")
	pf.StringVar(&o.Destination, "destination", "", "a save destination: its key")
	pf.StringVar(&o.Owner, "owner", "", "the key's owner, as the Gateway names the principal (default: the seed record's owner)")
	pf.StringVar(&o.RecordPath, "record", "", "a seed-record.json whose owner owns the key (default: the one beside the manifest)")
	pf.BoolVar(&asJSON, "json", false, "print the report as JSON")
	_ = acl.MarkPersistentFlagRequired("config")
	_ = acl.MarkPersistentFlagRequired("manifest")

	sub := func(use, short string, do func(*cobra.Command) (*operator.ACLReport, error)) *cobra.Command {
		return command(use, short, func(cmd *cobra.Command) error {
			sc, err := gateway.LoadServiceConfig(configPath)
			if err != nil {
				return err
			}
			o.Config = sc
			if o.Rights, err = operator.ParseRights(rights); err != nil {
				return err
			}
			rep, err := do(cmd)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			rep.WriteText(cmd.OutOrStdout())
			return nil
		})
	}
	grantCmd := sub("grant", "Add READ and/or WRITE to a principal's entry on the key (read back)", func(cmd *cobra.Command) (*operator.ACLReport, error) {
		return operator.ACLGrant(cmd.Context(), o)
	})
	grantCmd.Flags().StringVar(&o.Principal, "principal", "", "the grantee, as the Gateway names it")
	grantCmd.Flags().StringVar(&rights, "rights", "", "READ, WRITE or READ,WRITE (READ is enough to read and to save)")
	revokeCmd := sub("revoke", "Take rights (or the whole entry) from a principal's entry on the key (read back)", func(cmd *cobra.Command) (*operator.ACLReport, error) {
		return operator.ACLRevoke(cmd.Context(), o)
	})
	revokeCmd.Flags().StringVar(&o.Principal, "principal", "", "whose entry, as the Gateway names the principal")
	revokeCmd.Flags().StringVar(&rights, "rights", "", "only these rights (default: the whole entry)")
	listCmd := sub("list", "List the key's entries (with --principal: that principal's ids and rights too)", func(cmd *cobra.Command) (*operator.ACLReport, error) {
		return operator.ACLList(cmd.Context(), o)
	})
	listCmd.Flags().StringVar(&o.Principal, "principal", "", "also name this principal's ids (as a hand-off step's \"to\" needs them) and rights")
	acl.AddCommand(requireFlags(grantCmd, "principal", "rights"), requireFlags(revokeCmd, "principal"), listCmd)
	return acl
}
