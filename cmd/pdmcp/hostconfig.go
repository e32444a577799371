package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/operator"
	"github.com/pdmcp/pdmcp/internal/serve"
)

func newHostConfigCmd() *cobra.Command {
	var h operator.HostConfig
	var format, out string
	var asJSON bool
	cmd := command("host-config", "Write an MCP host's configuration that starts this server over stdio", func(cmd *cobra.Command) error {
		if format != "json" && format != "codex-toml" {
			return usageError("pdmcp host-config: --format %q: use json (an mcpServers object) or codex-toml", format)
		}
		toFile := out != "" && !isStdout(out)
		if asJSON && !toFile {
			return usageError("pdmcp host-config: --json prints what --out FILE wrote; without --out the configuration itself is the output")
		}
		// The checks serve makes at its start: a configuration that would
		// only start a server that refuses to run is refused here, where
		// the operator is (a host shows only "Connection closed").
		if err := serve.CheckStart(serve.StartFiles{ConfigPath: h.Config, ManifestPath: h.Manifest, GrantPath: h.Grant},
			false, time.Now()); err != nil {
			return startRefused(fmt.Errorf("pdmcp host-config: the server would refuse to start: %w", err))
		}
		g, err := grant.Load(h.Grant)
		if err != nil {
			return err
		}
		h.AllowedTools = g.AllowedTools
		if h.Cwd == "" {
			h.Cwd = g.FileRoot
		}
		if h.Binary == "" {
			if h.Binary, err = os.Executable(); err != nil {
				return fmt.Errorf("locate pdmcp: %w", err)
			}
		}
		var b []byte
		if format == "json" {
			b, err = h.MCPServersJSON()
		} else {
			b, err = h.CodexTOML()
		}
		if err != nil {
			return err
		}
		if !toFile {
			return writeOutput(cmd, "-", b, 0o600)
		}
		if err := writeOutput(cmd, out, b, 0o600); err != nil {
			return err
		}
		return printHostConfigWritten(cmd.OutOrStdout(), hostConfigWritten{Out: out, Format: format, Tools: h.AllowedTools}, asJSON)
	})
	cmd.Long = `host-config writes the configuration an MCP host needs to start pdmcp serve over stdio under
clean-env, with the grant's tools allowed: an mcpServers object (--format json, as Claude Code reads
it) or a Codex [mcp_servers] table (--format codex-toml). It first makes the checks serve makes
at its start, so a configuration that would only start a server that refuses to run is refused
here (exit 3), not by the host's "Connection closed".

Without --out (or with --out -) the configuration is the output. With --out FILE it is written
there (mode 600, whole or not at all) and one line says so; with --json that line is a JSON object
{"out","format","tools":[…]} (members are only ever added).`
	cmd.Example = `  pdmcp host-config --config config.json --manifest task/manifest.json --grant task/grant.json --audit task/audit.jsonl
  pdmcp host-config --config config.json --manifest task/manifest.json --grant task/grant.json --audit task/audit.jsonl \
    --format codex-toml --out codex-pdmcp.toml
  pdmcp host-config --config config.json --manifest task/manifest.json --grant task/grant.json --audit task/audit.jsonl \
    --out .mcp.json --json`
	f := cmd.Flags()
	f.StringVar(&format, "format", "json", "json (mcpServers) or codex-toml")
	f.StringVar(&out, "out", "", "write the configuration to this file (mode 600) instead of standard output (- : standard output)")
	f.BoolVar(&asJSON, "json", false, `with --out: say what was written as {"out","format","tools"}`)
	f.StringVar(&h.ServerName, "name", "protected-documents", "the host's name for this server")
	f.StringVar(&h.Binary, "pdmcp", "", "the pdmcp executable (default: this one)")
	f.StringArrayVar(&h.Keep, "keep", nil, "a variable clean-env keeps (repeatable)")
	f.StringVar(&h.Config, "config", "", "the service's config.json from pdmcp bootstrap")
	f.StringVar(&h.Manifest, "manifest", "", "the operator's manifest.json")
	f.StringVar(&h.Grant, "grant", "", "the task grant, grant.json from pdmcp grant")
	f.StringVar(&h.Audit, "audit", "", "the audit file the server appends to")
	f.StringVar(&h.Journal, "journal", "", "the journal (default <manifest>.journal.sqlite)")
	f.StringVar(&h.Cwd, "cwd", "", "Codex cwd (default: the grant's file root)")
	f.StringVar(&h.ApprovalMode, "approval-mode", "prompt", "Codex default_tools_approval_mode")
	_ = cmd.RegisterFlagCompletionFunc("format", completeWords("json", "codex-toml"))
	completeFiles(cmd, "json", "config", "manifest", "grant")
	completeFiles(cmd, "", "audit", "journal", "out", "pdmcp")
	_ = cmd.MarkFlagDirname("cwd")
	return requireFlags(cmd, "config", "manifest", "grant", "audit")
}

// hostConfigWritten is what host-config --out FILE --json prints; members
// are only ever added.
type hostConfigWritten struct {
	Out    string   `json:"out"`
	Format string   `json:"format"`
	Tools  []string `json:"tools"`
}

// printHostConfigWritten says what host-config wrote: one line, or JSON.
func printHostConfigWritten(w io.Writer, h hostConfigWritten, asJSON bool) error {
	if asJSON {
		return writeJSON(w, h)
	}
	_, err := fmt.Fprintf(w, "host-config: wrote %s (%s), tools: %s\n", h.Out, h.Format, strings.Join(h.Tools, ", "))
	return err
}
