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
		Args: cobra.MinimumNArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			return operator.ExecClean(keep, args)
		},
	}
	cmd.Flags().SetInterspersed(false)
	cmd.Flags().StringArrayVar(&keep, "keep", nil, "a variable to keep (repeatable)")
	return cmd
}
