package main

import (
	"github.com/spf13/cobra"

	"github.com/pdmcp/pdmcp/internal/operator"
)

func newCleanEnvCmd() *cobra.Command {
	var keep []string
	cmd := &cobra.Command{
		Use:   "clean-env [--keep VAR]... -- COMMAND [ARG]...",
		Short: "Run a command with only PATH, home, temp and the named variables",
		Long: "clean-env starts COMMAND with only PATH, the home and temporary directories and the variables " +
			"named with --keep, so a host's own credentials never reach the server.",
		Example: "  pdmcp clean-env -- pdmcp serve --config config.json --manifest task/manifest.json --grant task/grant.json --audit task/audit.jsonl\n" +
			"  pdmcp clean-env --keep OTEL_EXPORTER_OTLP_ENDPOINT -- pdmcp serve --config config.json --manifest task/manifest.json --grant task/grant.json --audit task/audit.jsonl",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageError("pdmcp clean-env: name the command to run, after --: pdmcp clean-env [--keep VAR]... -- COMMAND [ARG]...")
			}
			return nil
		},
		RunE: func(_ *cobra.Command, args []string) error {
			return operator.ExecClean(keep, args)
		},
	}
	cmd.Flags().SetInterspersed(false)
	cmd.Flags().StringArrayVar(&keep, "keep", nil, "a variable to keep (repeatable)")
	return cmd
}
