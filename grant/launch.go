package grant

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"time"
)

// maxRootEntries bounds the walk that looks for a source checkout below a
// file root. A folder with more entries than this is refused rather than
// half-checked: a task's folder is small.
const maxRootEntries = 10000

// checkoutMarkers are what make a folder a source checkout (a file or a
// folder: a Git worktree or submodule has a .git file).
func checkoutMarkers() []string { return []string{".git", ".hg", ".svn"} }

// LaunchOptions are the launcher's inputs, one field per `pdmcp grant` flag.
type LaunchOptions struct {
	// ManifestPath is the manifest the grant is written for.
	ManifestPath string
	// AllApproved takes every approved document and every destination.
	// It excludes Documents and Destinations.
	AllApproved bool
	// Exactly one of LocalUser and CallerIdentity, except that AllApproved
	// without either takes AgentUser.
	LocalUser      string
	CallerIdentity bool
	Documents      []string
	Destinations   []string
	// Tools defaults to the three document tools, or to encrypt_file and
	// decrypt_file when FileRoot is set.
	Tools []string
	Steps []string
	// FileRoot is the one folder the file tools may work in.
	FileRoot string
	TTL      time.Duration
	// Out is where the grant is written.
	Out string
	// Now is the issue time (kept to the second); zero means the current
	// time.
	Now time.Time
	// AgentUser is the seed record's agent user.
	AgentUser string
}

// OptionError is a launch option refused, worded with the `pdmcp grant`
// flags that set it (the launcher's options are those flags, one field
// each). It matches its sentinel (ErrBadOption, ErrIdentity) with
// errors.Is.
type OptionError struct {
	// Flags are the flags concerned, as `pdmcp grant` spells them.
	Flags []string
	// Err is the sentinel.
	Err error
	msg string
}

func (e *OptionError) Error() string { return e.msg }
func (e *OptionError) Unwrap() error { return e.Err }

func optionErr(sentinel error, flags []string, format string, args ...any) error {
	return &OptionError{Flags: flags, Err: sentinel, msg: fmt.Sprintf(format, args...)}
}

// Launch applies the launcher's rules, writes the grant to opts.Out
// atomically with mode 0600, and returns it. Everything it refuses, it
// refuses before writing anything.
func Launch(opts LaunchOptions) (*Grant, error) {
	if opts.Out == "" {
		return nil, optionErr(ErrBadOption, []string{"--out"}, "--out is required: the file the grant is written to")
	}
	g, err := Make(opts)
	if err != nil {
		return nil, err
	}
	if err := g.Save(opts.Out); err != nil {
		return nil, err
	}
	return g, nil
}

// Make applies the launcher's rules and returns the grant, checked against
// its manifest, without writing it (opts.Out is not used): Launch's first
// step, for a caller that writes the grant elsewhere (standard output).
func Make(opts LaunchOptions) (*Grant, error) {
	if opts.ManifestPath == "" {
		return nil, optionErr(ErrBadOption, []string{"--manifest"}, "--manifest is required: the manifest the grant is for")
	}
	if opts.TTL <= 0 {
		return nil, optionErr(ErrBadOption, []string{"--ttl"}, "--ttl %s: the grant's life must be positive (write it as 15m, 12h or 720h)", opts.TTL)
	}
	if opts.AllApproved && (len(opts.Documents) > 0 || len(opts.Destinations) > 0) {
		return nil, optionErr(ErrBadOption, []string{"--all-approved", "--documents", "--destinations"},
			"--all-approved takes every approved document and every destination; do not also give --documents or --destinations")
	}
	if opts.LocalUser != "" && opts.CallerIdentity {
		return nil, optionErr(ErrIdentity, []string{"--local-user", "--caller-identity"},
			"give --local-user or --caller-identity, not both: --local-user %s acts as that one user (a stdio task), --caller-identity as each signed-in caller (HTTP)", opts.LocalUser)
	}
	if opts.LocalUser == "" && !opts.CallerIdentity && !opts.AllApproved {
		return nil, optionErr(ErrIdentity, []string{"--local-user", "--caller-identity"},
			"give --local-user USER (a stdio task acts as that user) or --caller-identity (HTTP: each signed-in caller acts as themselves)")
	}
	m, err := LoadManifest(opts.ManifestPath)
	if err != nil {
		return nil, err
	}

	localUser := opts.LocalUser
	if opts.AllApproved && localUser == "" && !opts.CallerIdentity {
		if opts.AgentUser == "" {
			return nil, optionErr(ErrIdentity, []string{"--all-approved", "--local-user"},
				"--all-approved without --local-user or --caller-identity acts as the seed's agent user, and no seed record names one; give --local-user USER")
		}
		localUser = opts.AgentUser
	}

	var docs, dests []string
	if opts.AllApproved {
		for _, id := range slices.Sorted(maps.Keys(m.Documents)) {
			if m.Documents[id].Approved {
				docs = append(docs, id)
			}
		}
		dests = slices.Sorted(maps.Keys(m.Destinations))
	} else {
		docs = dedupe(opts.Documents)
		dests = dedupe(opts.Destinations)
		for i, id := range docs {
			d, ok := m.Documents[id]
			if !ok {
				return nil, fieldErr(fmt.Sprintf("documents[%d]", i), ErrUnknownDocument, "%q", id)
			}
			if !d.Approved {
				return nil, fieldErr(fmt.Sprintf("documents[%d]", i), ErrNotApproved, "%q", id)
			}
		}
	}

	root := ""
	if opts.FileRoot != "" {
		if root, err = CheckFileRoot(opts.FileRoot); err != nil {
			return nil, err
		}
	}
	tools := dedupe(opts.Tools)
	if len(tools) == 0 {
		tools = DocumentTools()
		if root != "" {
			tools = FileTools()
		}
	}

	now := opts.Now
	if now.IsZero() {
		now = time.Now()
	}
	issued := now.UTC().Truncate(time.Second)
	id, err := newGrantID()
	if err != nil {
		return nil, err
	}
	g := &Grant{
		ID:             id,
		Version:        GrantVersion,
		AllowedTools:   tools,
		LocalUser:      localUser,
		CallerIdentity: opts.CallerIdentity,
		Documents:      nonNil(docs),
		Destinations:   nonNil(dests),
		FileRoot:       root,
		Steps:          dedupe(opts.Steps),
		IssuedAt:       issued,
		NotAfter:       issued.Add(opts.TTL),
		Manifest:       m.File(),
	}
	// A grant for nothing is an operator's slip: refused, never widened
	// on their behalf.
	if len(g.Documents) == 0 && len(g.Destinations) == 0 && root == "" {
		return nil, fmt.Errorf("%w: this grant names no document, no destination and no file root; "+
			"name --documents or --destinations (or --all-approved), or --file-root for a file task", ErrNothingGranted)
	}
	// A scoped session needs at least one object. A file task whose
	// documents and destinations give none is anchored on an
	// operator-seeded destination key: the session's own, not a
	// destination the model may save to (Grant.Anchor).
	if root != "" && len(Keys(g, m)) == 0 {
		anchor, ok := firstKeyedDestination(m)
		if !ok {
			return nil, fmt.Errorf("%w: name a document or a destination with a key, or give the manifest a destination with a key to anchor the session on", ErrNoKeys)
		}
		g.Anchor = anchor
	}
	if err := g.Check(); err != nil {
		return nil, err
	}
	if err := Validate(g, m); err != nil {
		return nil, err
	}
	return g, nil
}

func firstKeyedDestination(m *Manifest) (string, bool) {
	for _, id := range slices.Sorted(maps.Keys(m.Destinations)) {
		if m.Destinations[id].TTag != "" {
			return id, true
		}
	}
	return "", false
}

// dedupe keeps the first of each name, in order.
func dedupe(in []string) []string {
	var out []string
	for _, s := range in {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// nonNil writes an empty list as [] rather than null.
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func newGrantID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("grant id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// CheckFileRoot applies the launcher's rules to a file root and returns it
// absolute with symbolic links resolved. It refuses, each as a
// [*FileRootError]: a folder that does not exist, something that is not a
// folder, a filesystem root, a home directory itself (the user's $HOME,
// /root, or any /home/<name>), a source checkout (a folder with .git, .hg
// or .svn), a folder inside one, and a folder holding one anywhere below
// it. A folder too large to search for checkouts is refused too.
func CheckFileRoot(path string) (string, error) {
	return checkFileRoot(path, maxRootEntries)
}

func checkFileRoot(path string, limit int) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", &FileRootError{Root: path, Err: ErrRootUnreadable, Found: err.Error()}
	}
	fi, err := os.Stat(abs)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", &FileRootError{Root: abs, Err: ErrRootMissing}
	case err != nil:
		return "", &FileRootError{Root: abs, Err: ErrRootUnreadable, Found: err.Error()}
	case !fi.IsDir():
		return "", &FileRootError{Root: abs, Err: ErrRootNotDir}
	}
	resolved, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", &FileRootError{Root: abs, Err: ErrRootUnreadable, Found: err.Error()}
	}
	if resolved, err = filepath.Abs(resolved); err != nil {
		return "", &FileRootError{Root: abs, Err: ErrRootUnreadable, Found: err.Error()}
	}
	if filepath.Dir(resolved) == resolved {
		return "", &FileRootError{Root: resolved, Err: ErrRootFilesystemRoot}
	}
	if home, ok := isHome(abs, resolved); ok {
		return "", &FileRootError{Root: resolved, Err: ErrRootHome, Found: home}
	}
	if marker, ok := hasMarker(resolved); ok {
		return "", &FileRootError{Root: resolved, Err: ErrRootCheckout, Found: marker}
	}
	for dir := filepath.Dir(resolved); ; dir = filepath.Dir(dir) {
		if marker, ok := hasMarker(dir); ok {
			return "", &FileRootError{Root: resolved, Err: ErrRootInsideCheckout, Found: marker}
		}
		if filepath.Dir(dir) == dir {
			break
		}
	}
	if err := walkForCheckout(resolved, limit); err != nil {
		return "", err
	}
	return resolved, nil
}

// isHome reports whether the folder (as given, or resolved) is a home
// directory itself, and which.
func isHome(abs, resolved string) (string, bool) {
	var homes []string
	if h, err := os.UserHomeDir(); err == nil && h != "" {
		homes = append(homes, filepath.Clean(h))
		if r, err := filepath.EvalSymlinks(h); err == nil {
			homes = append(homes, r)
		}
	}
	if runtime.GOOS != "windows" {
		homes = append(homes, "/root")
	}
	for _, p := range []string{abs, resolved} {
		if slices.Contains(homes, p) {
			return p, true
		}
		if parent := filepath.Dir(p); runtime.GOOS != "windows" && (parent == "/home" || parent == "/Users") {
			return p, true
		}
	}
	return "", false
}

// hasMarker reports whether dir holds a checkout marker, and its path.
func hasMarker(dir string) (string, bool) {
	for _, name := range checkoutMarkers() {
		p := filepath.Join(dir, name)
		if _, err := os.Lstat(p); err == nil {
			return p, true
		}
	}
	return "", false
}

// walkForCheckout looks below root for a checkout marker, visiting at most
// limit entries. It does not follow symbolic links: the file tools refuse
// any path that resolves outside the root.
func walkForCheckout(root string, limit int) error {
	var found string
	seen := 0
	markers := checkoutMarkers()
	errStop := errors.New("stop")
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return nil
		}
		seen++
		if seen > limit {
			return errStop
		}
		if slices.Contains(markers, d.Name()) {
			found = p
			return errStop
		}
		return nil
	})
	switch {
	case found != "":
		return &FileRootError{Root: root, Err: ErrRootHoldsCheckout, Found: found}
	case errors.Is(err, errStop):
		return &FileRootError{Root: root, Err: ErrRootTooLarge, Found: fmt.Sprintf("more than %d entries", limit)}
	case err != nil:
		return &FileRootError{Root: root, Err: ErrRootUnreadable, Found: err.Error()}
	}
	return nil
}
