package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/server/operator"
)

func newSeedCmd() *cobra.Command {
	var configPath, outDir, tag, cleanup string
	cmd := &cobra.Command{
		Use:   "seed",
		Short: "Create the synthetic document set and its manifest (or remove it with --cleanup)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sc, err := gateway.LoadServiceConfig(configPath)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if cleanup != "" {
				if err := operator.Cleanup(cmd.Context(), sc, cleanup); err != nil {
					return err
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
		},
	}
	f := cmd.Flags()
	f.StringVar(&configPath, "config", "", "config.json from pdmcp bootstrap")
	f.StringVar(&outDir, "out-dir", "", "an empty folder for the manifest and ciphertexts")
	f.StringVar(&tag, "tag", "", "names this seed's principals (random when omitted)")
	f.StringVar(&cleanup, "cleanup", "", "a seed-record.json: remove its keys and principals instead")
	_ = cmd.MarkFlagRequired("config")
	return cmd
}
