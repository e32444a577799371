package server_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/testutil"
)

// everyTool is every tool this build offers as tools/list shows it: the
// document, section and file tools from a fixture with a file root, the
// hand-off tools from one with steps.
func everyTool(t *testing.T) []*mcp.Tool {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, basicDocs, func(g *grant.Grant, _ *grant.Manifest) {
		g.FileRoot = root
		g.AllowedTools = append(append(g.AllowedTools, grant.FragmentTools()...), grant.FileTools()...)
	})
	res, err := f.cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	tools := res.Tools
	sf := newStepFixture(t, stepOptions{})
	res, err = sf.cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range res.Tools {
		if tl.Name == grant.ToolHandOff || tl.Name == grant.ToolCloseStep {
			tools = append(tools, tl)
		}
	}
	var names []string
	for _, tl := range tools {
		names = append(names, tl.Name)
	}
	all := grant.AllTools()
	slices.Sort(names)
	slices.Sort(all)
	if !slices.Equal(names, all) {
		t.Fatalf("tools %v, want every known tool %v", names, all)
	}
	return tools
}

// TestToolsGolden pins what a model sees of each tool (name, description,
// schemas, annotations) in testdata/tools/<name>.json, one file per tool,
// so a change to one tool is a reviewed diff of its own file.
// PDMCP_UPDATE_GOLDEN=1 rewrites them.
func TestToolsGolden(t *testing.T) {
	dir := filepath.Join("testdata", "tools")
	for _, tl := range everyTool(t) {
		got, err := json.MarshalIndent(tl, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		testutil.Golden(t, filepath.Join(dir, tl.Name+".json"), append(got, '\n'))
	}
	// No file outlives its tool.
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".json"); !ok || !grant.KnownTool(name) {
			t.Errorf("%s/%s is no tool's golden file", dir, e.Name())
		}
	}
}
