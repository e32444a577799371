// Command pdmcp is an MCP server that lets AI agents work with documents that
// stay encrypted under keys held by a Tricryption key server. This package
// only parses flags and wires subcommands; the work is in the packages.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCmd().ExecuteContext(ctx)
	stop()
	if err != nil {
		code := 1
		var ee *exitError
		if errors.As(err, &ee) {
			code = ee.code
		}
		if ee == nil || !ee.silent {
			fmt.Fprintln(os.Stderr, "pdmcp:", err)
		}
		os.Exit(code)
	}
}

func newRootCmd() *cobra.Command {
	logs := &logFlags{}
	root := &cobra.Command{
		Use:           "pdmcp",
		Short:         "MCP server for documents encrypted under Tricryption keys",
		SilenceUsage:  true,
		SilenceErrors: true,
		// --version prints what `pdmcp version` does.
		Version: currentBuild().text(),
	}
	root.SetVersionTemplate("{{.Version}}")
	// Cobra's own --version says only "version for pdmcp".
	root.Flags().Bool("version", false, "print the version, commit, commit date and Go version (as pdmcp version)")
	logs.register(root)
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error { return logs.setUp(cmd) }
	root.AddCommand(newVersionCmd(), newBenchCmd(), newServeCmd(), newCleanEnvCmd(), newHostConfigCmd(),
		newBootstrapCmd(), newSeedCmd(), newProtectCmd(), newGrantCmd(), newDevCmd(), newCloseStepCmd(),
		newVersionsCmd(), newExportManifestCmd(), newACLCmd(), newCheckCmd(), newAuditCmd())
	return root
}

// command is a subcommand that takes no arguments and runs run.
func command(use, short string, run func(cmd *cobra.Command) error) *cobra.Command {
	return &cobra.Command{Use: use, Short: short, Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return run(cmd) }}
}

// requireFlags marks the named flags of cmd required and returns cmd.
func requireFlags(cmd *cobra.Command, names ...string) *cobra.Command {
	for _, name := range names {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}
