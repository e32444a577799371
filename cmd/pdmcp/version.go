package main

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// buildVersion is set at link time with
// -ldflags "-X main.buildVersion=v1.2.3"; otherwise it comes from build info.
var buildVersion = ""

func versionString() string {
	if buildVersion != "" {
		return buildVersion
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	if bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			return "devel-" + s.Value[:12]
		}
	}
	return "devel"
}

func newVersionCmd() *cobra.Command {
	return command("version", "Print this build's version", func(cmd *cobra.Command) error {
		_, err := fmt.Fprintf(cmd.OutOrStdout(), "pdmcp %s\n", versionString())
		return err
	})
}
