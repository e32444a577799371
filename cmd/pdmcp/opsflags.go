package main

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/pdmcp/pdmcp/grant"
)

// completeFromManifest completes from the names pick takes from the
// manifest --manifest names (nothing before it is given, or when it cannot
// be read): a comma-separated list of them (StringSlice flags), or one.
func completeFromManifest(list bool, pick func(*grant.Manifest) []string) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		path, _ := cmd.Flags().GetString("manifest")
		if path == "" {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		m, err := grant.LoadManifest(path)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		if list {
			return completeList(pick(m)...)(cmd, args, toComplete)
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
