package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/pdmcp/pdmcp/grant"
)

// oldSpelling adds old to fs as a hidden spelling of the flag target
// (aliasFlag), whose warning goes to cmd's standard error: pflag's own
// deprecation notice is printed by cobra with Print, which writes to the
// standard output a command was given, where it would corrupt --json and
// --out - output. oldType, when not "", is the type the old flag's value
// had (its value errors are worded for it: "int" for seconds).
func oldSpelling(cmd *cobra.Command, fs *pflag.FlagSet, old, target string, convert func(string) (string, error), oldType string) {
	aliasFlag(fs, old, target, convert)
	f := fs.Lookup(old)
	f.Deprecated = ""
	f.Hidden = true
	f.Value = &warnValue{Value: f.Value, cmd: cmd, old: old, target: target, typ: oldType}
}

// warnValue warns on the command's standard error when set.
type warnValue struct {
	pflag.Value
	cmd         *cobra.Command
	old, target string
	typ         string
}

func (w *warnValue) Set(s string) error {
	fmt.Fprintf(w.cmd.ErrOrStderr(), "Flag --%s has been deprecated, use --%s instead\n", w.old, w.target)
	return w.Value.Set(s)
}

func (w *warnValue) Type() string {
	if w.typ != "" {
		return w.typ
	}
	return w.Value.Type()
}

// completeFromManifest completes a comma-separated list of the names
// pick takes from the manifest --manifest names (nothing before it is
// given, or when it cannot be read).
func completeFromManifest(pick func(*grant.Manifest) []string) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		path, _ := cmd.Flags().GetString("manifest")
		if path == "" {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		m, err := grant.LoadManifest(path)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return completeList(pick(m)...)(cmd, args, toComplete)
	}
}

// completeNameFromManifest completes one name pick takes from the
// manifest --manifest names.
func completeNameFromManifest(pick func(*grant.Manifest) []string) cobra.CompletionFunc {
	return func(cmd *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		path, _ := cmd.Flags().GetString("manifest")
		if path == "" {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		m, err := grant.LoadManifest(path)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []cobra.Completion
		for _, n := range pick(m) {
			if strings.HasPrefix(n, toComplete) {
				out = append(out, n)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}
