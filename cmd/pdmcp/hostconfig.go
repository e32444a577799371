package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/operator"
	"github.com/pdmcp/pdmcp/internal/serve"
)

func newHostConfigCmd() *cobra.Command {
	var h operator.HostConfig
	var format, out string
	cmd := command("host-config", "Write an MCP host's configuration that starts this server over stdio", func(cmd *cobra.Command) error {
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
		switch format {
		case "json":
			b, err = h.MCPServersJSON()
		case "codex-toml":
			b, err = h.CodexTOML()
		default:
			return fmt.Errorf("--format %q: use json or codex-toml", format)
		}
		if err != nil {
			return err
		}
		if out == "" || out == "-" {
			_, err = cmd.OutOrStdout().Write(b)
			return err
		}
		return os.WriteFile(out, b, 0o600)
	})
	f := cmd.Flags()
	f.StringVar(&format, "format", "json", "json (mcpServers) or codex-toml")
	f.StringVar(&out, "out", "", "write here instead of stdout")
	f.StringVar(&h.ServerName, "name", "protected-documents", "the host's name for this server")
	f.StringVar(&h.Binary, "pdmcp", "", "the pdmcp executable (default: this one)")
	f.StringArrayVar(&h.Keep, "keep", nil, "a variable clean-env keeps (repeatable)")
	f.StringVar(&h.Config, "config", "", "config.json")
	f.StringVar(&h.Manifest, "manifest", "", "manifest.json")
	f.StringVar(&h.Grant, "grant", "", "grant.json")
	f.StringVar(&h.Audit, "audit", "", "the audit file")
	f.StringVar(&h.Journal, "journal", "", "the journal (optional)")
	f.StringVar(&h.Cwd, "cwd", "", "Codex cwd (default: the grant's file root)")
	f.StringVar(&h.ApprovalMode, "approval-mode", "prompt", "Codex default_tools_approval_mode")
	_ = cmd.RegisterFlagCompletionFunc("format", completeWords("json", "codex-toml"))
	return requireFlags(cmd, "config", "manifest", "grant", "audit")
}
