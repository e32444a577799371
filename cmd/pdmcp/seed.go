package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/operator"
	"github.com/pdmcp/pdmcp/server/record"
)

func newSeedCmd() *cobra.Command {
	var configPath, outDir, tag, cleanup string
	cmd := command("seed", "Create the synthetic document set and its manifest (or remove it with --cleanup)", func(cmd *cobra.Command) error {
		sc, err := gateway.LoadServiceConfig(configPath)
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		if cleanup != "" {
			saved, err := savedUnderSeedKeys(cmd, cleanup)
			if err != nil {
				return err
			}
			if err := operator.Cleanup(cmd.Context(), sc, cleanup); err != nil {
				return err
			}
			if len(saved) > 0 {
				fmt.Fprintf(out, "%d saved versions were under the removed keys and can no longer be opened:\n", len(saved))
				for _, e := range saved {
					fmt.Fprintf(out, "  %s\n", e.Path)
				}
			}
			fmt.Fprintln(out, "SEED CLEANUP: OK")
			return nil
		}
		rec, err := operator.Seed(cmd.Context(), operator.SeedOptions{Config: sc, OutDir: outDir, Tag: tag})
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "manifest: %s\n", rec.Manifest)
		fmt.Fprintf(out, "agent user: %s\n", rec.AgentUser)
		fmt.Fprintln(out, "SEED: OK")
		return nil
	})
	f := cmd.Flags()
	f.StringVar(&configPath, "config", "", "config.json from pdmcp bootstrap")
	f.StringVar(&outDir, "out-dir", "", "an empty folder for the manifest and ciphertexts")
	f.StringVar(&tag, "tag", "", "names this seed's principals (random when omitted)")
	f.StringVar(&cleanup, "cleanup", "", "a seed-record.json: remove its keys and principals instead")
	return requireFlags(cmd, "config")
}

// savedUnderSeedKeys reads, before cleanup removes them, which saved
// versions (the manifest's history and the journal's record) are under the
// seed's keys. What cannot be read is reported on stderr and is no reason
// to keep the keys, except a lost record (record.ErrRecordLost): saved
// versions whose journal is missing or empty are refused, as removing
// their keys would leave nothing to repair the record for.
func savedUnderSeedKeys(cmd *cobra.Command, recordPath string) ([]record.Entry, error) {
	rec, err := grant.LoadSeedRecord(recordPath)
	if err != nil || rec.Manifest == "" {
		return nil, nil
	}
	m, vs, err := record.Load(cmd.Context(), rec.Manifest, "")
	if errors.Is(err, record.ErrRecordLost) {
		return nil, fmt.Errorf("seed --cleanup removed nothing: %w", err)
	}
	if err != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "pdmcp: the saved versions of %s were not read: %v\n", rec.Manifest, err)
		return nil, nil
	}
	return record.UnderKeys(m, vs, rec.Keys), nil
}
