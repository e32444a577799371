package server_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
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

// descriptionParts are the paragraphs after the first of every tool's
// description, by the words each begins with: when to use it, what it
// refuses, what it never does.
var descriptionParts = []string{"Use it ", "It refuses ", "It never "}

// toolNameRE matches a word spelled as tool names are.
var toolNameRE = regexp.MustCompile(`\b[a-z]+(?:_[a-z]+)+\b`)

// TestToolDescriptionsHaveTheirParts: every tool's description is four
// short paragraphs (what it does; when to use it; what it refuses; what
// it never does), names only tools that exist, and every property of its
// input and output schemas, at any depth, is described, so a model given
// only a result's structuredContent can read each field's meaning from
// tools/list.
func TestToolDescriptionsHaveTheirParts(t *testing.T) {
	for _, tl := range everyTool(t) {
		paras := strings.Split(tl.Description, "\n\n")
		if len(paras) != 1+len(descriptionParts) {
			t.Errorf("%s: %d paragraphs, want %d: %q", tl.Name, len(paras), 1+len(descriptionParts), tl.Description)
			continue
		}
		for i, p := range paras {
			prefix := ""
			if i > 0 {
				prefix = descriptionParts[i-1]
			}
			if !strings.HasPrefix(p, prefix) || len(p) < len(prefix)+20 || len(p) > 600 || strings.Contains(p, "\n") {
				t.Errorf("%s: paragraph %d (%d bytes) does not begin %q, or is empty, over 600 bytes or split: %q",
					tl.Name, i+1, len(p), prefix, p)
			}
		}
		for _, name := range toolNameRE.FindAllString(tl.Description, -1) {
			if !grant.KnownTool(name) {
				t.Errorf("%s: its description names %q, which is no tool", tl.Name, name)
			}
		}
		for what, schema := range map[string]any{"input": tl.InputSchema, "output": tl.OutputSchema} {
			b, err := json.Marshal(schema)
			if err != nil {
				t.Fatal(err)
			}
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatalf("%s: %s schema: %v", tl.Name, what, err)
			}
			n := 0
			for _, at := range undescribed(m, "", &n) {
				t.Errorf("%s: %s property %s has no description", tl.Name, what, at)
			}
			if what == "output" && n == 0 {
				t.Errorf("%s: no output property found; has the schema's shape changed?", tl.Name)
			}
		}
	}
}

// undescribed walks a schema (as JSON) and returns the path of every
// property, at any depth (nested objects, array items), whose schema has
// no description; n counts the properties seen.
func undescribed(schema any, at string, n *int) []string {
	var out []string
	switch v := schema.(type) {
	case map[string]any:
		if props, ok := v["properties"].(map[string]any); ok {
			for name, p := range props {
				*n++
				ps, _ := p.(map[string]any)
				if d, _ := ps["description"].(string); strings.TrimSpace(d) == "" {
					out = append(out, at+"."+name)
				}
				out = append(out, undescribed(p, at+"."+name, n)...)
			}
		}
		for k, sub := range v {
			if k != "properties" {
				out = append(out, undescribed(sub, at+"/"+k, n)...)
			}
		}
	case []any:
		for _, sub := range v {
			out = append(out, undescribed(sub, at, n)...)
		}
	}
	return out
}

// TestSourceNamesOnlyTools: a tool named in prose (a refusal's detail, a
// description, a comment) is spelled as grant spells it: every word of
// this package's source written as tool names are is a tool's name.
func TestSourceNamesOnlyTools(t *testing.T) {
	n := 0
	for _, f := range testutil.GoSources(t, ".") {
		for _, name := range toolNameRE.FindAllString(f.Text, -1) {
			n++
			if !grant.KnownTool(name) {
				t.Errorf("%s names %q, which is no tool", f.Path, name)
			}
		}
	}
	if n < 50 {
		t.Fatalf("%d tool names found in the source; has the pattern changed?", n)
	}
}
