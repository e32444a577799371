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

	"github.com/pdmcp/pdmcp/internal/testutil"
)

var launchNow = time.Date(2026, 10, 24, 12, 0, 0, 0, time.UTC)

// launchSetup puts the valid manifest in a fresh folder and returns options
// that write the grant beside it.
func launchSetup(t *testing.T) LaunchOptions {
	t.Helper()
	manifest := copyFixture(t, "manifest-valid.json", "manifest.json")
	return LaunchOptions{
		ManifestPath: manifest,
		TTL:          15 * time.Minute,
		Out:          filepath.Join(filepath.Dir(manifest), "grant.json"),
		Now:          launchNow,
	}
}

func TestLaunchAllApproved(t *testing.T) {
	opts := launchSetup(t)
	opts.AllApproved = true
	opts.AgentUser = "svc.agent"
	g, err := Launch(opts)
	if err != nil {
		t.Fatal(err)
	}
	want := &Grant{
		ID: g.ID, Version: GrantVersion,
		AllowedTools: DocumentTools(),
		LocalUser:    "svc.agent",
		Documents:    []string{"ccd-0001", "evaluation-criteria", "proposal-aurora"},
		Destinations: []string{"archive", "evaluation-summary"},
		IssuedAt:     launchNow,
		NotAfter:     launchNow.Add(15 * time.Minute),
		Manifest:     opts.ManifestPath,
	}
	if !reflect.DeepEqual(g, want) {
		t.Fatalf("Launch = %+v\nwant %+v", g, want)
	}
	if len(g.ID) != 16 || strings.Trim(g.ID, "0123456789abcdef") != "" {
		t.Fatalf("id %q is not 16 hex digits", g.ID)
	}
	testutil.WantMode(t, opts.Out, 0o600)
	assertNoTempFiles(t, filepath.Dir(opts.Out))
	back, err := Load(opts.Out)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, g) {
		t.Fatalf("the written grant reads back as %+v\nwant %+v", back, g)
	}
	m, err := LoadManifest(opts.ManifestPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(back, m); err != nil {
		t.Fatalf("the written grant does not validate: %v", err)
	}

	// A second launch gets a new id.
	again, err := Launch(opts)
	if err != nil {
		t.Fatal(err)
	}
	if again.ID == g.ID {
		t.Fatal("two launches wrote the same id")
	}
}

func TestLaunchIdentity(t *testing.T) {
	tests := []struct {
		name      string
		edit      func(o *LaunchOptions)
		wantLocal string
		wantHTTP  bool
	}{
		{"all-approved takes the agent user", func(o *LaunchOptions) { o.AllApproved, o.AgentUser = true, "svc.agent" }, "svc.agent", false},
		{"a local user wins over the agent user", func(o *LaunchOptions) {
			o.AllApproved, o.AgentUser, o.LocalUser = true, "svc.agent", "svc.other"
		}, "svc.other", false},
		{"caller identity names no user", func(o *LaunchOptions) {
			o.AllApproved, o.AgentUser, o.CallerIdentity = true, "svc.agent", true
		}, "", true},
		{"named documents and a local user", func(o *LaunchOptions) {
			o.LocalUser, o.Documents = "svc.agent", []string{"proposal-aurora"}
		}, "svc.agent", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := launchSetup(t)
			tt.edit(&opts)
			g, err := Launch(opts)
			if err != nil {
				t.Fatal(err)
			}
			if g.LocalUser != tt.wantLocal || g.CallerIdentity != tt.wantHTTP {
				t.Fatalf("localUser %q, callerIdentity %v; want %q, %v", g.LocalUser, g.CallerIdentity, tt.wantLocal, tt.wantHTTP)
			}
		})
	}
}

func TestLaunchRefusals(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(o *LaunchOptions)
		want  error
		field string
	}{
		{"a document not approved", func(o *LaunchOptions) {
			o.LocalUser, o.Documents = "svc.agent", []string{"proposal-aurora", "proposal-borealis"}
		}, ErrNotApproved, "documents[1]"},
		{"a document the manifest lacks", func(o *LaunchOptions) {
			o.LocalUser, o.Documents = "svc.agent", []string{"proposal-nova"}
		}, ErrUnknownDocument, "documents[0]"},
		{"a destination the manifest lacks", func(o *LaunchOptions) {
			o.LocalUser, o.Documents, o.Destinations = "svc.agent", []string{"proposal-aurora"}, []string{"elsewhere"}
		}, ErrUnknownDestination, "destinations[0]"},
		{"a step the manifest lacks", func(o *LaunchOptions) {
			o.LocalUser, o.Documents, o.Steps = "svc.agent", []string{"ccd-0001"}, []string{"referral-labs"}
			o.Tools = []string{ToolReadProtectedDocument, ToolHandOff, ToolCloseStep}
		}, ErrUnknownStep, "steps[0]"},
		{"hand_off without steps", func(o *LaunchOptions) {
			o.LocalUser, o.Documents, o.Tools = "svc.agent", []string{"ccd-0001"}, []string{ToolHandOff}
		}, ErrStepsRequired, "steps"},
		{"close_step without steps", func(o *LaunchOptions) {
			o.LocalUser, o.Documents, o.Tools = "svc.agent", []string{"ccd-0001"}, []string{ToolReadProtectedDocument, ToolCloseStep}
		}, ErrStepsRequired, "steps"},
		{"an unknown tool", func(o *LaunchOptions) {
			o.LocalUser, o.Documents, o.Tools = "svc.agent", []string{"ccd-0001"}, []string{"read_file"}
		}, ErrUnknownTool, "allowedTools[0]"},
		{"file tools without a file root", func(o *LaunchOptions) {
			o.LocalUser, o.Documents, o.Tools = "svc.agent", []string{"ccd-0001"}, FileTools()
		}, ErrFileRootRequired, "fileRoot"},
		{"both identities", func(o *LaunchOptions) {
			o.LocalUser, o.CallerIdentity, o.Documents = "svc.agent", true, []string{"proposal-aurora"}
		}, ErrIdentity, ""},
		{"no identity", func(o *LaunchOptions) { o.Documents = []string{"proposal-aurora"} }, ErrIdentity, ""},
		{"all-approved without an agent user", func(o *LaunchOptions) { o.AllApproved = true }, ErrIdentity, ""},
		{"all-approved and named documents", func(o *LaunchOptions) {
			o.AllApproved, o.AgentUser, o.Documents = true, "svc.agent", []string{"proposal-aurora"}
		}, ErrBadOption, ""},
		{"all-approved and named destinations", func(o *LaunchOptions) {
			o.AllApproved, o.AgentUser, o.Destinations = true, "svc.agent", []string{"archive"}
		}, ErrBadOption, ""},
		{"no time to live", func(o *LaunchOptions) {
			o.LocalUser, o.Documents, o.TTL = "svc.agent", []string{"proposal-aurora"}, 0
		}, ErrBadOption, ""},
		{"no manifest", func(o *LaunchOptions) {
			o.LocalUser, o.Documents, o.ManifestPath = "svc.agent", []string{"proposal-aurora"}, ""
		}, ErrBadOption, ""},
		{"an unusable manifest", func(o *LaunchOptions) {
			if err := os.Chmod(o.ManifestPath, 0o666); err != nil {
				t.Fatal(err)
			}
			o.LocalUser, o.Documents = "svc.agent", []string{"proposal-aurora"}
		}, ErrInsecureMode, ""},
		{"an empty document id", func(o *LaunchOptions) {
			o.LocalUser, o.Documents = "svc.agent", []string{""}
		}, ErrUnknownDocument, "documents[0]"},
		{"only a destination without a key", func(o *LaunchOptions) {
			o.LocalUser, o.Destinations = "svc.agent", []string{"archive"}
		}, ErrNoKeys, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := launchSetup(t)
			tt.edit(&opts)
			g, err := Launch(opts)
			if g != nil {
				t.Fatalf("Launch returned a grant with error %v", err)
			}
			assertRefused(t, err, tt.want, tt.field)
			if _, err := os.Stat(opts.Out); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("a refused launch left %s: %v", opts.Out, err)
			}
			assertNoTempFiles(t, filepath.Dir(opts.Out))
		})
	}
}

func TestLaunchNoOutput(t *testing.T) {
	opts := launchSetup(t)
	opts.LocalUser, opts.Documents, opts.Out = "svc.agent", []string{"proposal-aurora"}, ""
	if _, err := Launch(opts); !errors.Is(err, ErrBadOption) {
		t.Fatalf("Launch without an output path: %v; want ErrBadOption", err)
	}
	opts = launchSetup(t)
	opts.LocalUser, opts.Documents = "svc.agent", []string{"proposal-aurora"}
	opts.Out = filepath.Join(filepath.Dir(opts.Out), "absent", "grant.json")
	if _, err := Launch(opts); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Launch into a missing folder: %v; want not-exist", err)
	}
}

func TestLaunchSteps(t *testing.T) {
	opts := launchSetup(t)
	opts.LocalUser = "svc.patient"
	opts.Documents = []string{"ccd-0001"}
	opts.Tools = []string{ToolListApprovedDocuments, ToolReadProtectedDocument, ToolHandOff, ToolCloseStep, ToolHandOff}
	opts.Steps = []string{"referral-history", "referral-history"}
	g, err := Launch(opts)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(g.Steps, []string{"referral-history"}) {
		t.Fatalf("steps = %v", g.Steps)
	}
	if want := []string{ToolListApprovedDocuments, ToolReadProtectedDocument, ToolHandOff, ToolCloseStep}; !slices.Equal(g.AllowedTools, want) {
		t.Fatalf("tools = %v, want %v (named once each, in order)", g.AllowedTools, want)
	}
	// The compound document's keys are the session's; no anchor is added.
	if len(g.Destinations) != 0 {
		t.Fatalf("destinations = %v, want none", g.Destinations)
	}
}

func TestLaunchFileRoot(t *testing.T) {
	opts := launchSetup(t)
	real := filepath.Join(t.TempDir(), "task")
	if err := os.MkdirAll(filepath.Join(real, "inputs"), 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "task-link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	opts.LocalUser = "svc.agent"
	opts.FileRoot = link
	g, err := Launch(opts)
	if err != nil {
		t.Fatal(err)
	}
	wantRoot, _ := filepath.EvalSymlinks(real)
	if g.FileRoot != wantRoot {
		t.Fatalf("fileRoot = %q, want the resolved %q", g.FileRoot, wantRoot)
	}
	if !slices.Equal(g.AllowedTools, FileTools()) {
		t.Fatalf("tools = %v, want the file tools", g.AllowedTools)
	}
	// No documents and no destinations: the session is anchored on the
	// first destination with a key ("archive" has none), as the grant's
	// internal anchor, never as a destination a tool may save to.
	if len(g.Destinations) != 0 || len(g.Documents) != 0 || g.Anchor != "evaluation-summary" {
		t.Fatalf("documents %v, destinations %v, anchor %q; want none, none and the anchor",
			g.Documents, g.Destinations, g.Anchor)
	}
	m, err := LoadManifest(opts.ManifestPath)
	if err != nil {
		t.Fatal(err)
	}
	if keys := Keys(g, m); !slices.Equal(keys, []string{m.Destinations["evaluation-summary"].TTag}) {
		t.Fatalf("the anchored grant's keys %v; want the anchor's key", keys)
	}

	// A refused file root writes nothing.
	opts = launchSetup(t)
	opts.LocalUser = "svc.agent"
	opts.FileRoot = filepath.Join(t.TempDir(), "absent")
	var fre *FileRootError
	if _, err := Launch(opts); !errors.Is(err, ErrRootMissing) || !errors.As(err, &fre) {
		t.Fatalf("Launch with a missing root: %v", err)
	}
	if _, err := os.Stat(opts.Out); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a refused launch wrote a grant")
	}
}

// Why 6: a grant that names nothing (no document, no destination, no
// file root) is refused and nothing is written; before, it was silently
// anchored on a destination the model could then save to.
func TestLaunchRefusesAGrantForNothing(t *testing.T) {
	opts := launchSetup(t)
	opts.AllApproved, opts.Documents, opts.Destinations = false, nil, nil
	opts.LocalUser = "svc.agent"
	if _, err := Launch(opts); !errors.Is(err, ErrNothingGranted) {
		t.Fatalf("Launch of a grant for nothing: %v, want ErrNothingGranted", err)
	}
	if _, err := os.Stat(opts.Out); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a refused launch wrote a grant")
	}
}

// The anchor is checked like the grant's other ids.
func TestGrantAnchorChecks(t *testing.T) {
	m := loadValidManifest(t)
	for _, tc := range []struct {
		name     string
		anchor   string
		fileRoot string
		want     error
	}{
		{"without a file root", "evaluation-summary", "", ErrInvalid},
		{"a destination without a key", "archive", "/tmp/task", ErrUnknownDestination},
		{"no such destination", "nope", "/tmp/task", ErrUnknownDestination},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &Grant{ID: "g1", Version: GrantVersion, AllowedTools: FileTools(), LocalUser: "svc.agent",
				Documents: []string{}, Destinations: []string{}, FileRoot: tc.fileRoot, Anchor: tc.anchor,
				IssuedAt: time.Now(), NotAfter: time.Now().Add(time.Hour), Manifest: m.File()}
			if tc.fileRoot == "" {
				g.AllowedTools = DocumentTools()
			}
			err := g.Check()
			if err == nil {
				err = Validate(g, m)
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("%v, want %v", err, tc.want)
			}
		})
	}
}

func TestLaunchAnchorNeedsAKeyedDestination(t *testing.T) {
	m := loadValidManifest(t)
	delete(m.Destinations, "evaluation-summary")
	path := filepath.Join(t.TempDir(), "manifest.json")
	if err := m.Save(path); err != nil {
		t.Fatal(err)
	}
	_, err := Launch(LaunchOptions{
		ManifestPath: path, LocalUser: "svc.agent", FileRoot: t.TempDir(),
		TTL: time.Minute, Out: filepath.Join(filepath.Dir(path), "grant.json"),
	})
	if !errors.Is(err, ErrNoKeys) || !strings.Contains(err.Error(), "anchor") {
		t.Fatalf("Launch with nothing to anchor on: %v; want ErrNoKeys saying so", err)
	}
}

func TestLaunchGrantTooWide(t *testing.T) {
	for _, tt := range []struct {
		docs  int
		count int // 0: accepted
	}{{63, 0}, {64, 65}} {
		t.Run(fmt.Sprint(tt.docs), func(t *testing.T) {
			// Every document approved, and one keyed destination: docs+1 keys.
			dir := t.TempDir()
			path := filepath.Join(dir, "manifest.json")
			if err := wideManifest(tt.docs).Save(path); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(dir, "grant.json")
			g, err := Launch(LaunchOptions{ManifestPath: path, AllApproved: true, AgentUser: "svc.agent", TTL: time.Minute, Out: out})
			if tt.count == 0 {
				if err != nil {
					t.Fatal(err)
				}
				if len(g.Documents) != tt.docs {
					t.Fatalf("%d documents, want %d", len(g.Documents), tt.docs)
				}
				return
			}
			var tw *GrantTooWideError
			if !errors.As(err, &tw) || !errors.Is(err, ErrGrantTooWide) || tw.Count != tt.count {
				t.Fatalf("Launch = %v; want GRANT_TOO_WIDE with count %d", err, tt.count)
			}
			if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
				t.Fatal("a too-wide grant was written")
			}
		})
	}
}

func TestCheckFileRoot(t *testing.T) {
	base := t.TempDir()
	mkdir := func(parts ...string) string {
		p := filepath.Join(append([]string{base}, parts...)...)
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
		return p
	}
	touch := func(parts ...string) string {
		p := filepath.Join(append([]string{base}, parts...)...)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	home := mkdir("home-of-user")
	t.Setenv("HOME", home)

	tests := []struct {
		name  string
		root  string
		want  error  // nil: accepted
		found string // what the error must name
	}{
		{"a task folder", mkdir("task", "inner"), nil, ""},
		{"a folder that does not exist", filepath.Join(base, "absent"), ErrRootMissing, ""},
		{"a file", touch("file.txt"), ErrRootNotDir, ""},
		{"the filesystem root", "/", ErrRootFilesystemRoot, ""},
		{"the user's home", home, ErrRootHome, home},
		{"a Git checkout", filepath.Dir(mkdir("git", ".git")), ErrRootCheckout, filepath.Join(base, "git", ".git")},
		{"a Mercurial checkout", filepath.Dir(mkdir("hg", ".hg")), ErrRootCheckout, filepath.Join(base, "hg", ".hg")},
		{"a Subversion checkout", filepath.Dir(mkdir("svn", ".svn")), ErrRootCheckout, filepath.Join(base, "svn", ".svn")},
		{"a worktree (.git is a file)", filepath.Dir(touch("worktree", ".git")), ErrRootCheckout, filepath.Join(base, "worktree", ".git")},
		{"a folder holding a checkout deep below", filepath.Join(base, "holder"), ErrRootHoldsCheckout,
			filepath.Dir(mkdir("holder", "a", "b", "repo", ".hg", "store"))},
		{"a folder inside a checkout", mkdir("outer", "src", "pkg"), ErrRootInsideCheckout, filepath.Dir(mkdir("outer", ".git", "objects"))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := CheckFileRoot(tt.root)
			if tt.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				if want, _ := filepath.EvalSymlinks(tt.root); got != want {
					t.Fatalf("CheckFileRoot = %q, want %q", got, want)
				}
				return
			}
			var fre *FileRootError
			if !errors.Is(err, tt.want) || !errors.As(err, &fre) {
				t.Fatalf("CheckFileRoot(%s) = %q, %v; want %v", tt.root, got, err, tt.want)
			}
			// Each refusal is its own: it matches no other root error.
			for _, other := range []error{ErrRootMissing, ErrRootNotDir, ErrRootFilesystemRoot, ErrRootHome,
				ErrRootCheckout, ErrRootHoldsCheckout, ErrRootInsideCheckout, ErrRootTooLarge, ErrRootUnreadable} {
				if other != tt.want && errors.Is(err, other) {
					t.Fatalf("%v also matches %v", err, other)
				}
			}
			if tt.found != "" && fre.Found != tt.found {
				t.Fatalf("Found = %q, want %q", fre.Found, tt.found)
			}
		})
	}
}

func TestCheckFileRootBoundedWalk(t *testing.T) {
	root := t.TempDir()
	for i := range 10 {
		if err := os.WriteFile(filepath.Join(root, fmt.Sprintf("f%02d", i)), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := checkFileRoot(root, 10); err != nil {
		t.Fatalf("10 entries with a limit of 10: %v", err)
	}
	if _, err := checkFileRoot(root, 9); !errors.Is(err, ErrRootTooLarge) {
		t.Fatalf("10 entries with a limit of 9: %v; want ErrRootTooLarge", err)
	}
}

func TestIsHome(t *testing.T) {
	t.Setenv("HOME", "/srv/people/carol")
	tests := []struct {
		path string
		want bool
	}{
		{"/srv/people/carol", true},
		{"/home/alice", true},
		{"/root", true},
		{"/Users/bob", true},
		{"/home/alice/task", false},
		{"/srv/people/carol/task", false},
		{"/srv/task", false},
	}
	for _, tt := range tests {
		if _, got := isHome(tt.path, tt.path); got != tt.want {
			t.Errorf("isHome(%s) = %v, want %v", tt.path, got, tt.want)
		}
	}
}

// TestLaunchOptionMessagesNameFlags: a refused option is worded with the
// flags of `pdmcp grant` that set it, never the grant file's member names.
func TestLaunchOptionMessagesNameFlags(t *testing.T) {
	for _, tt := range []struct {
		name string
		edit func(*LaunchOptions)
		want string
	}{
		{"both identities", func(o *LaunchOptions) {
			o.LocalUser, o.CallerIdentity, o.Documents = "svc.agent", true, []string{"proposal-aurora"}
		}, "give --local-user or --caller-identity, not both"},
		{"no identity", func(o *LaunchOptions) { o.Documents = []string{"proposal-aurora"} },
			"give --local-user USER (a stdio task acts as that user) or --caller-identity"},
		{"all-approved without an agent user", func(o *LaunchOptions) { o.AllApproved = true },
			"--all-approved without --local-user or --caller-identity acts as the seed's agent user"},
		{"all-approved and documents", func(o *LaunchOptions) {
			o.AllApproved, o.AgentUser, o.Documents = true, "svc.agent", []string{"proposal-aurora"}
		}, "do not also give --documents or --destinations"},
		{"no time to live", func(o *LaunchOptions) {
			o.LocalUser, o.Documents, o.TTL = "svc.agent", []string{"proposal-aurora"}, 0
		}, "--ttl 0s: the grant's life must be positive"},
		{"no manifest", func(o *LaunchOptions) {
			o.LocalUser, o.Documents, o.ManifestPath = "svc.agent", []string{"proposal-aurora"}, ""
		}, "--manifest is required"},
		{"no output", func(o *LaunchOptions) {
			o.LocalUser, o.Documents, o.Out = "svc.agent", []string{"proposal-aurora"}, ""
		}, "--out is required"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			opts := launchSetup(t)
			tt.edit(&opts)
			_, err := Launch(opts)
			var oe *OptionError
			if !errors.As(err, &oe) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Launch: %v; want an OptionError saying %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "localUser") || strings.Contains(err.Error(), "callerIdentity") {
				t.Fatalf("the message names the file's members, not the flags: %v", err)
			}
		})
	}
}
