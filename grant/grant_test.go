package grant

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestLoadGrantValid(t *testing.T) {
	g, err := Load(copyFixture(t, "grant-valid.json", "grant.json"))
	if err != nil {
		t.Fatal(err)
	}
	want := &Grant{
		ID: "3f9c2a7d41b06e85", Version: 1,
		AllowedTools: DocumentTools(),
		LocalUser:    "svc.agent",
		Documents:    []string{"proposal-aurora", "evaluation-criteria"},
		Destinations: []string{"evaluation-summary"},
		NotAfter:     time.Date(2026, 10, 24, 12, 15, 0, 0, time.UTC),
		IssuedAt:     time.Date(2026, 10, 24, 12, 0, 0, 0, time.UTC),
		Manifest:     "/srv/task-data/manifest.json",
	}
	if !reflect.DeepEqual(g, want) {
		t.Fatalf("Load = %+v\nwant %+v", g, want)
	}
	if !g.Allows(ToolSaveProtectedResult) || g.Allows(ToolEncryptFile) {
		t.Fatal("Allows disagrees with allowedTools")
	}
}

func TestLoadGrantRefusals(t *testing.T) {
	testLoadRefusals(t, "grant.json", Load, []fileRefusal{
		{"grant-unknown-field.json", ErrUnknownField, "", `: objects at line 20, column 3: unknown field: remove it or check its spelling`},
		{"grant-both-identities.json", ErrIdentity, "", "names localUser"},
		{"grant-no-identity.json", ErrIdentity, "", "neither"},
		{"grant-unknown-tool.json", ErrUnknownTool, "allowedTools[3]", `"shell_exec"`},
		{"grant-handoff-no-steps.json", ErrStepsRequired, "steps", ""},
		{"grant-no-tools.json", ErrNoTools, "allowedTools", ""},
		{"grant-file-tools-no-root.json", ErrFileRootRequired, "fileRoot", ""},
		{"grant-not-after-issued.json", ErrInvalid, "notAfter", "not after issuedAt"},
		{"grant-relative-manifest.json", ErrBadPath, "manifest", "not absolute"},
		{"grant-duplicate-document.json", ErrDuplicate, "documents[1]", `"Proposal-Aurora"`},
	})
}

func TestLoadGrantFileMode(t *testing.T) {
	tests := []struct {
		mode os.FileMode
		ok   bool
	}{
		{0o600, true},
		{0o400, true},
		{0o644, true},
		{0o666, false},
		{0o620, false},
		{0o602, false},
		{0o660, false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%04o", tt.mode), func(t *testing.T) {
			path := copyFixture(t, "grant-valid.json", "grant.json")
			if err := os.Chmod(path, tt.mode); err != nil {
				t.Fatal(err)
			}
			_, err := Load(path)
			if tt.ok {
				if err != nil {
					t.Fatalf("Load of a %04o grant: %v", tt.mode, err)
				}
				return
			}
			var me *ModeError
			if !errors.Is(err, ErrInsecureMode) || !errors.As(err, &me) {
				t.Fatalf("Load of a %04o grant: %v; want a ModeError", tt.mode, err)
			}
			// The wording of every operator file's mode (internal/safefile).
			want := fmt.Sprintf("%s has mode %04o: group and others must not be able to write it (chmod go-w)", me.Path, tt.mode)
			if me.Mode.Perm() != tt.mode || err.Error() != want || filepath.Base(me.Path) != "grant.json" {
				t.Fatalf("ModeError %q, want %q", err, want)
			}
		})
	}
}

func TestGrantExpired(t *testing.T) {
	g, err := Load(copyFixture(t, "grant-valid.json", "grant.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		at   time.Time
		want bool
	}{
		{g.IssuedAt, false},
		{g.NotAfter.Add(-time.Nanosecond), false},
		{g.NotAfter, true},
		{g.NotAfter.Add(time.Second), true},
	} {
		if got := g.Expired(tt.at); got != tt.want {
			t.Errorf("Expired(%s) = %v, want %v", tt.at, got, tt.want)
		}
	}
}

// grantFor builds a valid grant for m naming docs and dests.
func grantFor(m *Manifest, docs, dests []string) *Grant {
	return &Grant{
		ID: "0123456789abcdef", Version: GrantVersion, AllowedTools: DocumentTools(), LocalUser: "svc.agent",
		Documents: docs, Destinations: dests,
		IssuedAt: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), NotAfter: time.Date(2026, 1, 1, 1, 0, 0, 0, time.UTC),
		Manifest: m.File(),
	}
}

func TestValidate(t *testing.T) {
	m := loadValidManifest(t)
	tests := []struct {
		name  string
		edit  func(g *Grant)
		want  error
		field string
	}{
		{"unknown document", func(g *Grant) { g.Documents = append(g.Documents, "proposal-nova") }, ErrUnknownDocument, "documents[1]"},
		{"unknown destination", func(g *Grant) { g.Destinations = []string{"elsewhere"} }, ErrUnknownDestination, "destinations[0]"},
		{"unknown step", func(g *Grant) { g.Steps = []string{"referral-labs"} }, ErrUnknownStep, "steps[0]"},
		{"another manifest", func(g *Grant) { g.Manifest = filepath.Join(t.TempDir(), "manifest.json") }, ErrManifestMismatch, "manifest"},
		{"no key at all", func(g *Grant) { g.Documents, g.Destinations = nil, []string{"archive"} }, ErrNoKeys, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := grantFor(m, []string{"proposal-aurora"}, []string{"evaluation-summary"})
			if err := Validate(g, m); err != nil {
				t.Fatalf("the unedited grant is refused: %v", err)
			}
			tt.edit(g)
			assertRefused(t, Validate(g, m), tt.want, tt.field)
		})
	}
}

func TestValidateSameManifestThroughLink(t *testing.T) {
	m := loadValidManifest(t)
	link := filepath.Join(t.TempDir(), "link.json")
	if err := os.Symlink(m.File(), link); err != nil {
		t.Fatal(err)
	}
	g := grantFor(m, []string{"proposal-aurora"}, nil)
	g.Manifest = link
	if err := Validate(g, m); err != nil {
		t.Fatalf("a grant naming the manifest through a link is refused: %v", err)
	}
}

func TestKeys(t *testing.T) {
	m := loadValidManifest(t)
	tests := []struct {
		name         string
		docs, dests  []string
		want         []string
		wantValidate error
	}{
		{"single documents and a destination", []string{"proposal-aurora", "evaluation-criteria"}, []string{"evaluation-summary"},
			[]string{"dGFnLWF1cm9yYQ", "dGFnLWNyaXRlcmlh", "dGFnLXN1bW1hcnk"}, nil},
		{"a compound document counts every fragment's key", []string{"ccd-0001"}, nil,
			[]string{"dGFnLWFsbGVyZ2llcw", "dGFnLXByb2JsZW1z", "dGFnLXJlc3VsdHM"}, nil},
		{"a destination without a key adds nothing", []string{"proposal-aurora"}, []string{"archive"},
			[]string{"dGFnLWF1cm9yYQ"}, nil},
		{"nothing", nil, nil, []string{}, ErrNoKeys},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := grantFor(m, tt.docs, tt.dests)
			if got := Keys(g, m); !slices.Equal(got, tt.want) {
				t.Fatalf("Keys = %v, want %v", got, tt.want)
			}
			if err := Validate(g, m); !errors.Is(err, tt.wantValidate) {
				t.Fatalf("Validate = %v, want %v", err, tt.wantValidate)
			}
		})
	}

	// Keys shared between documents, fragments and destinations count once.
	m.Documents["proposal-aurora"] = withTTag(m.Documents["proposal-aurora"], "dGFnLXJlc3VsdHM")
	m.Destinations["evaluation-summary"] = Destination{TTag: "dGFnLXJlc3VsdHM"}
	g := grantFor(m, []string{"proposal-aurora", "ccd-0001"}, []string{"evaluation-summary"})
	if got := Keys(g, m); len(got) != 3 {
		t.Fatalf("Keys with shared t-Tags = %v, want 3 distinct", got)
	}
}

func withTTag(d Document, ttag string) Document {
	d.TTag = ttag
	return d
}

// TestGrantTooWideBoundary: 64 distinct keys is the most one scoped session
// holds; 65 is GRANT_TOO_WIDE carrying the count.
func TestGrantTooWideBoundary(t *testing.T) {
	ids := func(n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("doc-%03d", i))
		}
		return out
	}
	tests := []struct {
		name  string
		docs  int
		dests []string
		count int // 0: accepted
	}{
		{"64 documents", 64, nil, 0},
		{"63 documents and a destination", 63, []string{"out"}, 0},
		{"65 documents", 65, nil, 65},
		{"64 documents and a destination", 64, []string{"out"}, 65},
		{"80 documents", 80, nil, 80},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := wideManifest(80)
			g := grantFor(m, ids(tt.docs), tt.dests)
			err := Validate(g, m)
			if tt.count == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			var tw *GrantTooWideError
			if !errors.Is(err, ErrGrantTooWide) || !errors.As(err, &tw) {
				t.Fatalf("Validate = %v; want a GrantTooWideError", err)
			}
			if tw.Count != tt.count || tw.Max != 64 {
				t.Fatalf("GrantTooWideError{Count: %d, Max: %d}, want {%d, 64}", tw.Count, tw.Max, tt.count)
			}
			if msg := err.Error(); !strings.Contains(msg, "GRANT_TOO_WIDE") || !strings.Contains(msg, fmt.Sprint(tt.count)) {
				t.Fatalf("message %q does not say GRANT_TOO_WIDE and %d", msg, tt.count)
			}
		})
	}

	// 65 documents all under one key is one key, not 65.
	m := wideManifest(65)
	for id, d := range m.Documents {
		m.Documents[id] = withTTag(d, "shared")
	}
	if err := Validate(grantFor(m, ids(65), nil), m); err != nil {
		t.Fatalf("65 documents under one key: %v", err)
	}
}

func TestGrantSave(t *testing.T) {
	m := loadValidManifest(t)
	g := grantFor(m, []string{"proposal-aurora"}, []string{"evaluation-summary"})
	dir := t.TempDir()
	out := filepath.Join(dir, "grant.json")
	assertSavesOverLoose(t, out, g.Save, Load, g)

	// An invalid grant is not written, and the old one stays.
	before, _ := os.ReadFile(out)
	g.AllowedTools = append(g.AllowedTools, ToolHandOff)
	assertRefused(t, g.Save(out), ErrStepsRequired, "steps")
	after, _ := os.ReadFile(out)
	if string(before) != string(after) {
		t.Fatal("a refused Save changed the grant")
	}
	assertNoTempFiles(t, dir)
}

func TestAllTools(t *testing.T) {
	all := AllTools()
	if len(all) != 9 {
		t.Fatalf("AllTools has %d tools, want 9", len(all))
	}
	for _, tool := range append(DocumentTools(), FileTools()...) {
		if !KnownTool(tool) {
			t.Errorf("%s is a default tool but not known", tool)
		}
	}
	// The lists are fresh copies: changing one changes nothing else.
	all[0] = "changed"
	if AllTools()[0] != ToolListApprovedDocuments || KnownTool("changed") {
		t.Fatal("AllTools shares its list")
	}
}
