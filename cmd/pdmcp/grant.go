package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pdmcp/pdmcp/grant"
)

// callerIdentityTTL is a caller-identity (HTTP service) grant's default
// life: 30 days, renewed by writing a new grant over the served one (the
// server follows the file; see docs/operating.md).
const callerIdentityTTL = 30 * 24 * time.Hour

func newGrantCmd() *cobra.Command {
	var o grant.LaunchOptions
	var ttl int
	var seedRecord string
	cmd := command("grant", "Write a task grant (the trusted launcher)", func(cmd *cobra.Command) error {
		o.TTL = time.Duration(ttl) * time.Second
		if o.CallerIdentity && !cmd.Flags().Changed("ttl-seconds") {
			// A service's grant: the 15 minutes of a task would stop the
			// service a quarter of an hour after its start.
			o.TTL = callerIdentityTTL
		}
		if o.FileRoot != "" && len(o.Tools) == 0 && (o.AllApproved || len(o.Documents) > 0 || len(o.Destinations) > 0) {
			fmt.Fprintf(cmd.ErrOrStderr(), "pdmcp grant: warning: with --file-root and no --tools the grant allows only %v; "+
				"the documents and destinations it names are reachable by no tool (add --tools %s,%s)\n",
				grant.FileTools(), strings.Join(grant.FileTools(), ","), strings.Join(grant.DocumentTools(), ","))
		}
		if o.AllApproved && o.LocalUser == "" && !o.CallerIdentity {
			path := seedRecord
			if path == "" {
				path = filepath.Join(filepath.Dir(o.ManifestPath), "seed-record.json")
			}
			rec, err := grant.LoadSeedRecord(path)
			if err != nil {
				return fmt.Errorf("--all-approved without --local-user takes the seed's agent user: %w", err)
			}
			o.AgentUser = rec.AgentUser
		}
		g, err := grant.Launch(o)
		if err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "grant %s written to %s: tools %v, %d documents, %d destinations, until %s\n",
			g.ID, o.Out, g.AllowedTools, len(g.Documents), len(g.Destinations), g.NotAfter.UTC().Format(time.RFC3339))
		return nil
	})
	f := cmd.Flags()
	f.StringVar(&o.ManifestPath, "manifest", "", "the manifest the grant is for")
	f.BoolVar(&o.AllApproved, "all-approved", false, "every approved document and every destination")
	f.StringVar(&o.LocalUser, "local-user", "", "the principal a stdio task acts as")
	f.BoolVar(&o.CallerIdentity, "caller-identity", false, "HTTP: act as each signed-in caller")
	f.StringSliceVar(&o.Documents, "documents", nil, "document ids (comma-separated)")
	f.StringSliceVar(&o.Destinations, "destinations", nil, "destination ids (comma-separated)")
	f.StringSliceVar(&o.Tools, "tools", nil, "tools to allow (comma-separated)")
	f.StringSliceVar(&o.Steps, "steps", nil, "hand-off steps (comma-separated)")
	f.StringVar(&o.FileRoot, "file-root", "", "the one folder the file tools may use")
	f.IntVar(&ttl, "ttl-seconds", 900, "how long the grant lasts (default 900; with --caller-identity 2592000, 30 days)")
	f.StringVar(&o.Out, "out", "", "where to write the grant (mode 600)")
	f.StringVar(&seedRecord, "seed-record", "", "the seed record (default: beside the manifest)")
	return requireFlags(cmd, "manifest", "out")
}
