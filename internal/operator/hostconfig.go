package operator

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// HostConfig is what a host needs to start the server over stdio. Every
// path is made absolute; the command is always the clean-env launch, so a
// host that hands its whole environment to the child cannot leak its own
// credential into the server.
type HostConfig struct {
	ServerName   string   // the host's name for this server
	Binary       string   // the pdmcp executable
	Keep         []string // variables clean-env keeps besides the base ones
	Config       string   // config.json
	Manifest     string
	Grant        string
	Audit        string
	Journal      string // optional: defaults to <manifest>.journal.sqlite
	AllowedTools []string
	Cwd          string // Codex's cwd: the grant's file root by default
	// Codex-only settings.
	StartupTimeoutSec int
	ToolTimeoutSec    int
	ApprovalMode      string // Codex default_tools_approval_mode: auto, prompt or approve
}

func (h *HostConfig) normalize() error {
	if h.ServerName == "" {
		h.ServerName = "protected-documents"
	}
	for _, c := range h.ServerName {
		if !(c == '-' || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return fmt.Errorf("server name %q: use letters, digits, '-' and '_' only", h.ServerName)
		}
	}
	for _, p := range []struct {
		name string
		v    *string
		need bool
	}{
		{"binary", &h.Binary, true}, {"config", &h.Config, true}, {"manifest", &h.Manifest, true},
		{"grant", &h.Grant, true}, {"audit", &h.Audit, true}, {"journal", &h.Journal, false}, {"cwd", &h.Cwd, false},
	} {
		if *p.v == "" {
			if p.need {
				return fmt.Errorf("host config: %s path is required", p.name)
			}
			continue
		}
		abs, err := filepath.Abs(*p.v)
		if err != nil {
			return fmt.Errorf("host config: %s path: %w", p.name, err)
		}
		*p.v = abs
	}
	for _, k := range h.Keep {
		if k == "" || strings.ContainsAny(k, "= \t") {
			return fmt.Errorf("host config: --keep %q is not a variable name", k)
		}
	}
	if h.StartupTimeoutSec == 0 {
		h.StartupTimeoutSec = 30
	}
	if h.ToolTimeoutSec == 0 {
		h.ToolTimeoutSec = 120
	}
	switch h.ApprovalMode {
	case "":
		h.ApprovalMode = "prompt"
	case "auto", "prompt", "approve":
	default:
		return errors.New("host config: approval mode must be auto, prompt or approve")
	}
	return nil
}

// argv is the launch after the command: clean-env, then serve.
func (h *HostConfig) argv() []string {
	args := []string{"clean-env"}
	for _, k := range h.Keep {
		args = append(args, "--keep", k)
	}
	args = append(args, "--", h.Binary, "serve",
		"--config", h.Config, "--manifest", h.Manifest, "--grant", h.Grant, "--audit", h.Audit)
	if h.Journal != "" {
		args = append(args, "--journal", h.Journal)
	}
	return args
}

// MCPServersJSON renders the standard {"mcpServers": {...}} stdio form.
func (h HostConfig) MCPServersJSON() ([]byte, error) {
	if err := h.normalize(); err != nil {
		return nil, err
	}
	doc := map[string]any{"mcpServers": map[string]any{
		h.ServerName: map[string]any{"command": h.Binary, "args": h.argv()},
	}}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// CodexTOML renders the same launch as one [mcp_servers.<name>] table.
func (h HostConfig) CodexTOML() ([]byte, error) {
	if err := h.normalize(); err != nil {
		return nil, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "[mcp_servers.%s]\n", h.ServerName)
	fmt.Fprintf(&b, "command = %s\n", tomlString(h.Binary))
	fmt.Fprintf(&b, "args = %s\n", tomlArray(h.argv()))
	if h.Cwd != "" {
		fmt.Fprintf(&b, "cwd = %s\n", tomlString(h.Cwd))
	}
	fmt.Fprintf(&b, "startup_timeout_sec = %d\n", h.StartupTimeoutSec)
	fmt.Fprintf(&b, "tool_timeout_sec = %d\n", h.ToolTimeoutSec)
	fmt.Fprintf(&b, "enabled_tools = %s\n", tomlArray(h.AllowedTools))
	b.WriteString("required = true\n")
	fmt.Fprintf(&b, "default_tools_approval_mode = %s\n", tomlString(h.ApprovalMode))
	return []byte(b.String()), nil
}

// tomlString quotes s as a TOML basic string. strconv.Quote's escapes are a
// subset of TOML's except \x.., which it uses only for bytes that are not
// valid UTF-8; paths with such bytes are refused rather than mangled.
func tomlString(s string) string {
	q := strconv.Quote(s)
	if strings.Contains(q, `\x`) {
		// Fall back to \u escapes for each non-printable rune.
		var b strings.Builder
		b.WriteByte('"')
		for _, r := range s {
			switch {
			case r == '"' || r == '\\':
				b.WriteByte('\\')
				b.WriteRune(r)
			case r < 0x20 || r == 0x7f:
				fmt.Fprintf(&b, `\u%04X`, r)
			default:
				b.WriteRune(r)
			}
		}
		b.WriteByte('"')
		return b.String()
	}
	return q
}

func tomlArray(items []string) string {
	parts := make([]string, len(items))
	for i, s := range items {
		parts[i] = tomlString(s)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
