package operator

import (
	"encoding/json"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

func TestCleanEnvKeepsOnlyBaseAndNamed(t *testing.T) {
	in := []string{
		"PATH=/usr/bin", "HOME=/home/a", "TMPDIR=/tmp", "ANTHROPIC_API_KEY=sk-secret",
		"OPENAI_API_KEY=sk-other", "LD_LIBRARY_PATH=/opt/lib", "EDITOR=vi", "malformed",
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318", "OTEL_SERVICE_NAME=pdmcp-a", "XOTEL_X=1",
	}
	got := CleanEnv(in, []string{"LD_LIBRARY_PATH"})
	// The OTEL_* variables configure tracing and are kept whole.
	want := []string{"HOME=/home/a", "LD_LIBRARY_PATH=/opt/lib", "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318",
		"OTEL_SERVICE_NAME=pdmcp-a", "PATH=/usr/bin", "TMPDIR=/tmp"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("CleanEnv = %v, want %v", got, want)
	}
}

func sampleHostConfig(t *testing.T) HostConfig {
	dir := t.TempDir()
	return HostConfig{
		Binary:       filepath.Join(dir, "pdmcp"),
		Keep:         []string{"LD_LIBRARY_PATH"},
		Config:       "config.json", // relative on purpose: must come out absolute
		Manifest:     filepath.Join(dir, "task", "manifest.json"),
		Grant:        filepath.Join(dir, "task", "grant.json"),
		Audit:        filepath.Join(dir, "task", "audit.jsonl"),
		AllowedTools: []string{"list_approved_documents", "read_protected_document"},
		Cwd:          filepath.Join(dir, "work \"quoted\""),
	}
}

func TestMCPServersJSON(t *testing.T) {
	b, err := sampleHostConfig(t).MCPServersJSON()
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		MCPServers map[string]struct {
			Command string   `json:"command"`
			Args    []string `json:"args"`
		} `json:"mcpServers"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	s, ok := doc.MCPServers["protected-documents"]
	if !ok {
		t.Fatalf("no protected-documents server in %s", b)
	}
	if s.Args[0] != "clean-env" || s.Args[1] != "--keep" || s.Args[2] != "LD_LIBRARY_PATH" || s.Args[3] != "--" {
		t.Errorf("launch does not go through clean-env: %v", s.Args)
	}
	if s.Args[4] != s.Command || s.Args[5] != "serve" {
		t.Errorf("clean-env does not start serve: %v", s.Args)
	}
	for i, a := range s.Args {
		if i > 0 && s.Args[i-1] == "--config" && !filepath.IsAbs(a) {
			t.Errorf("config path %q is not absolute", a)
		}
	}
}

func TestCodexTOMLParses(t *testing.T) {
	b, err := sampleHostConfig(t).CodexTOML()
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		MCPServers map[string]struct {
			Command      string   `toml:"command"`
			Args         []string `toml:"args"`
			Cwd          string   `toml:"cwd"`
			Startup      int      `toml:"startup_timeout_sec"`
			ToolTimeout  int      `toml:"tool_timeout_sec"`
			EnabledTools []string `toml:"enabled_tools"`
			Required     bool     `toml:"required"`
			ApprovalMode string   `toml:"default_tools_approval_mode"`
		} `toml:"mcp_servers"`
	}
	md, err := toml.Decode(string(b), &doc)
	if err != nil {
		t.Fatalf("not TOML: %v\n%s", err, b)
	}
	if len(md.Undecoded()) != 0 {
		t.Errorf("unexpected keys %v", md.Undecoded())
	}
	s := doc.MCPServers["protected-documents"]
	if !strings.HasSuffix(s.Cwd, `work "quoted"`) || !s.Required || s.ApprovalMode != "prompt" {
		t.Errorf("decoded %+v", s)
	}
	if !reflect.DeepEqual(s.EnabledTools, []string{"list_approved_documents", "read_protected_document"}) {
		t.Errorf("enabled_tools %v", s.EnabledTools)
	}
	if s.Args[0] != "clean-env" || s.Startup == 0 || s.ToolTimeout == 0 {
		t.Errorf("args/timeouts %+v", s)
	}
}

func TestHostConfigRefusals(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*HostConfig)
		want   string
	}{
		{"missing grant", func(h *HostConfig) { h.Grant = "" }, "host config: grant path is required"},
		{"missing config", func(h *HostConfig) { h.Config = "" }, "host config: config path is required"},
		{"bad server name", func(h *HostConfig) { h.ServerName = "a b" }, `server name "a b": use letters, digits`},
		{"bad keep", func(h *HostConfig) { h.Keep = []string{"A=B"} }, `host config: --keep "A=B" is not a variable name`},
		{"bad approval", func(h *HostConfig) { h.ApprovalMode = "yolo" }, "host config: approval mode must be auto, prompt or approve"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for format, render := range map[string]func(HostConfig) (string, error){
				"json": func(h HostConfig) (string, error) { b, err := h.MCPServersJSON(); return string(b), err },
				"toml": func(h HostConfig) (string, error) { b, err := h.CodexTOML(); return string(b), err },
			} {
				h := sampleHostConfig(t)
				tc.mutate(&h)
				out, err := render(h)
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("%s: got %v, want the refusal %q", format, err, tc.want)
				}
				if out != "" {
					t.Errorf("%s: a refused config still rendered %q", format, out)
				}
			}
		})
	}
}
