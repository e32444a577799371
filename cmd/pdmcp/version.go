package main

import (
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// buildVersion is set at link time with
// -ldflags "-X main.buildVersion=v1.2.3"; otherwise it comes from build info.
var buildVersion = ""

// buildInfo is what `pdmcp version` reports, read from the build info the
// Go tool stamps into every binary: a plain `go build` in a clone has the
// commit, its date and whether the tree had changes. Its JSON shape
// (`pdmcp version --json`) is stable: members are only ever added.
type buildInfo struct {
	Version string `json:"version"`
	// Commit is the full revision (vcs.revision), "" when the binary was
	// built outside a repository or with -buildvcs=false.
	Commit string `json:"commit"`
	// CommitTime is the commit's date (vcs.time), RFC 3339 in UTC.
	CommitTime string `json:"commitTime"`
	// Modified: the tree had changes not in Commit (vcs.modified).
	Modified  bool   `json:"modified"`
	GoVersion string `json:"goVersion"`
}

// readBuildInfo turns the Go tool's build info (ok false: none, as in a
// binary built without module support) and a link-time version into what
// is reported.
func readBuildInfo(bi *debug.BuildInfo, ok bool, linked string) buildInfo {
	var b buildInfo
	if ok && bi != nil {
		b.GoVersion = bi.GoVersion
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Commit = s.Value
			case "vcs.time":
				b.CommitTime = s.Value
			case "vcs.modified":
				b.Modified = s.Value == "true"
			}
		}
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			b.Version = v
		}
	}
	switch {
	case linked != "":
		b.Version = linked
	case b.Version != "":
	case len(b.Commit) >= 12:
		b.Version = "devel-" + b.Commit[:12]
	default:
		b.Version = "devel"
	}
	return b
}

// currentBuild is this binary's buildInfo.
func currentBuild() buildInfo {
	bi, ok := debug.ReadBuildInfo()
	return readBuildInfo(bi, ok, buildVersion)
}

// versionString is the one-word version the server reports to hosts.
func versionString() string { return currentBuild().Version }

// text is the human form of b: the version line, then one line each.
func (b buildInfo) text() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "pdmcp %s\n", b.Version)
	commit := b.Commit
	if commit == "" {
		commit = "unknown (built without version control information)"
	} else if b.Modified {
		commit += " (with uncommitted changes)"
	}
	fmt.Fprintf(&sb, "commit: %s\n", commit)
	if b.CommitTime != "" {
		fmt.Fprintf(&sb, "commit date: %s\n", b.CommitTime)
	}
	if b.GoVersion != "" {
		fmt.Fprintf(&sb, "go: %s\n", b.GoVersion)
	}
	return sb.String()
}

func newVersionCmd() *cobra.Command {
	var asJSON bool
	cmd := command("version", "Print this build's version, commit, commit date and Go version", func(cmd *cobra.Command) error {
		b := currentBuild()
		if asJSON {
			return writeJSON(cmd.OutOrStdout(), b)
		}
		_, err := fmt.Fprint(cmd.OutOrStdout(), b.text())
		return err
	})
	cmd.Long = "version prints this build's version, its commit (and whether the tree had changes), the commit's\n" +
		"date and the Go version, read from the build info the Go tool stamps into the binary: a plain `go build`\n" +
		"in a clone has them. With --json: {\"version\",\"commit\",\"commitTime\",\"modified\",\"goVersion\"}\n" +
		"(members are only ever added)."
	cmd.Example = "  pdmcp version\n  pdmcp version --json\n  pdmcp --version"
	cmd.Flags().BoolVar(&asJSON, "json", false,
		`print {"version","commit","commitTime","modified","goVersion"} as JSON`)
	return cmd
}
