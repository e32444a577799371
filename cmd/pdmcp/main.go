// Command pdmcp is an MCP server that lets AI agents work with documents that
// stay encrypted under keys held by a Tricryption key server. This package
// only parses flags and wires subcommands; the work is in the packages.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := runMain(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// newRootCmd is pdmcp's command tree.
func newRootCmd() *cobra.Command {
	root, _ := newRoot()
	return root
}

// newRoot is pdmcp's command tree and the state that tells a usage error
// (before a command's work began) from a failure.
func newRoot() (*cobra.Command, *runState) {
	logs := &logFlags{}
	root := &cobra.Command{
		Use:   "pdmcp",
		Short: "MCP server for documents encrypted under Tricryption keys",
		Long:  "pdmcp serves documents encrypted under Tricryption keys to MCP hosts, limited by a task grant.\n\n" + exitCodesHelp,
		Example: `  pdmcp dev                                   # the whole stack on loopback, to try it
  pdmcp serve --config config.json --manifest task/manifest.json --grant task/grant.json --audit task/audit.jsonl
  pdmcp check --manifest task/manifest.json --json
  pdmcp audit verify task/audit.jsonl
  pdmcp completion bash > /etc/bash_completion.d/pdmcp`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// --version prints what `pdmcp version` does.
		Version: currentBuild().text(),
	}
	root.SetVersionTemplate("{{.Version}}")
	// Cobra's own --version says only "version for pdmcp".
	root.Flags().Bool("version", false, "print the version, commit, commit date and Go version (as pdmcp version)")
	logs.register(root)
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if err := logs.setUp(cmd); err != nil {
			return err
		}
		return checkRequired(cmd)
	}
	root.AddCommand(newVersionCmd(), newBenchCmd(), newServeCmd(), newCleanEnvCmd(), newHostConfigCmd(),
		newBootstrapCmd(), newSeedCmd(), newProtectCmd(), newGrantCmd(), newDevCmd(), newCloseStepCmd(),
		newVersionsCmd(), newExportManifestCmd(), newACLCmd(), newCheckCmd(), newAuditCmd())
	// Every command's flag errors are usage errors that name the flag and,
	// for an unknown one, suggest the nearest.
	root.SetFlagErrorFunc(flagError)
	root.SetHelpCommand(newHelpCmd())
	// Cobra adds `completion` when it runs; added now, the walks below
	// reach it too.
	root.InitDefaultCompletionCmd()
	// A command made only of subcommands (the root, audit, acl) prints its
	// help alone and names a word it does not know, with a suggestion,
	// instead of printing its help and exiting 0.
	commandGroups(root)
	markRequiredInHelp(root)
	st := &runState{}
	guardRuns(root, st)
	return root, st
}

// commandGroups gives every command under c that has subcommands and no work of
// its own groupArgs and groupRun.
func commandGroups(c *cobra.Command) {
	if c.HasSubCommands() && c.RunE == nil && c.Run == nil {
		c.Args, c.RunE = groupArgs, groupRun
	}
	for _, sub := range c.Commands() {
		commandGroups(sub)
	}
}

// command is a subcommand that takes no arguments and runs run.
func command(use, short string, run func(cmd *cobra.Command) error) *cobra.Command {
	return &cobra.Command{Use: use, Short: short, Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return run(cmd) }}
}

// requireFlags marks the named flags of cmd required and returns cmd.
func requireFlags(cmd *cobra.Command, names ...string) *cobra.Command {
	for _, name := range names {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}
