package grant

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/pdmcp/pdmcp/gateway/api"
)

// GrantVersion is the grant format this package reads and writes.
const GrantVersion = 1

// The tools a grant may allow: the whole tool surface.
const (
	ToolListApprovedDocuments = "list_approved_documents"
	ToolReadProtectedDocument = "read_protected_document"
	ToolSaveProtectedResult   = "save_protected_result"
	ToolEncryptFile           = "encrypt_file"
	ToolDecryptFile           = "decrypt_file"
	ToolReadProtectedFragment = "read_protected_fragment"
	ToolSaveProtectedFragment = "save_protected_fragment"
	ToolHandOff               = "hand_off"
	ToolCloseStep             = "close_step"
)

// AllTools returns every tool name, in the order the reference lists them.
func AllTools() []string {
	return []string{
		ToolListApprovedDocuments, ToolReadProtectedDocument, ToolSaveProtectedResult,
		ToolEncryptFile, ToolDecryptFile,
		ToolReadProtectedFragment, ToolSaveProtectedFragment,
		ToolHandOff, ToolCloseStep,
	}
}

// DocumentTools returns the three document tools, the launcher's default.
func DocumentTools() []string {
	return []string{ToolListApprovedDocuments, ToolReadProtectedDocument, ToolSaveProtectedResult}
}

// FileTools returns the two file tools, the launcher's default with a file
// root.
func FileTools() []string {
	return []string{ToolEncryptFile, ToolDecryptFile}
}

// FragmentTools returns the two section tools of compound documents.
func FragmentTools() []string {
	return []string{ToolReadProtectedFragment, ToolSaveProtectedFragment}
}

// KnownTool reports whether name is one of [AllTools].
func KnownTool(name string) bool { return slices.Contains(AllTools(), name) }

// Grant is the task grant: what one task may reach, written by a trusted
// launcher before the agent starts. No tool argument can change it.
type Grant struct {
	ID           string   `json:"id"`
	Version      int      `json:"version"`
	AllowedTools []string `json:"allowedTools"`
	// LocalUser is the principal a stdio session acts as.
	LocalUser string `json:"localUser,omitempty"`
	// CallerIdentity: over HTTP each caller acts as themselves.
	CallerIdentity bool     `json:"callerIdentity,omitempty"`
	Documents      []string `json:"documents"`
	Destinations   []string `json:"destinations"`
	// FileRoot is the one folder the file tools work in, absolute and
	// resolved.
	FileRoot string `json:"fileRoot,omitempty"`
	// Anchor is the destination whose key a file task's Gateway session
	// is minted over when its documents and destinations give none (a
	// scoped session needs one object). It is the session's only: no tool
	// saves to it, lists it or reads it.
	Anchor   string    `json:"anchor,omitempty"`
	Steps    []string  `json:"steps,omitempty"`
	NotAfter time.Time `json:"notAfter"`
	IssuedAt time.Time `json:"issuedAt"`
	// Manifest is the absolute path of the manifest the grant was written
	// for.
	Manifest string `json:"manifest"`
}

// Load reads and checks the grant at path. It refuses a file that group or
// others can write ([*ModeError]), unknown fields, and any grant
// [Grant.Check] refuses. It does not refuse an expired grant: see
// [Grant.Expired].
func Load(path string) (*Grant, error) {
	g, _, err := loadChecked(grantHolds, path, maxGrantBytes, (*Grant).Check)
	return g, err
}

// Save checks g and writes it to path atomically with mode 0600.
func (g *Grant) Save(path string) error {
	data, err := encodeChecked("grant", path, g, g.Check)
	if err != nil {
		return err
	}
	if err := writeFileAtomic(path, data); err != nil {
		return fmt.Errorf("grant: %w", err)
	}
	return nil
}

// Check applies the rules a grant obeys on its own, without its manifest:
// a known version and a safe id; allowedTools non-empty, known and each
// once; exactly one of LocalUser and CallerIdentity; steps for hand_off and
// close_step; a file root for encrypt_file and decrypt_file; safe ids each
// named once; an absolute file root and manifest; IssuedAt before NotAfter.
func (g *Grant) Check() error {
	if g.Version != GrantVersion {
		return fieldErr("version", ErrInvalid, "%d; this program reads version %d", g.Version, GrantVersion)
	}
	if err := checkID(g.ID); err != nil {
		return &FieldError{Field: "id", Err: err}
	}
	if len(g.AllowedTools) == 0 {
		return &FieldError{Field: "allowedTools", Err: ErrNoTools}
	}
	for i, t := range g.AllowedTools {
		field := fmt.Sprintf("allowedTools[%d]", i)
		if !KnownTool(t) {
			return fieldErr(field, ErrUnknownTool, "%q; the tools are %s", t, strings.Join(AllTools(), ", "))
		}
		if slices.Index(g.AllowedTools, t) != i {
			return fieldErr(field, ErrDuplicate, "%q", t)
		}
	}
	if (g.LocalUser != "") == g.CallerIdentity {
		if g.CallerIdentity {
			return fmt.Errorf("%w: this grant names localUser %q and callerIdentity", ErrIdentity, g.LocalUser)
		}
		return fmt.Errorf("%w: this grant names neither", ErrIdentity)
	}
	if g.LocalUser != "" && strings.ContainsFunc(g.LocalUser, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return fieldErr("localUser", ErrInvalid, "%q holds a space or control character", g.LocalUser)
	}
	if len(g.Steps) == 0 && (g.Allows(ToolHandOff) || g.Allows(ToolCloseStep)) {
		return &FieldError{Field: "steps", Err: ErrStepsRequired}
	}
	if g.FileRoot == "" && (g.Allows(ToolEncryptFile) || g.Allows(ToolDecryptFile)) {
		return &FieldError{Field: "fileRoot", Err: ErrFileRootRequired}
	}
	if g.FileRoot != "" && (!filepath.IsAbs(g.FileRoot) || filepath.Clean(g.FileRoot) != g.FileRoot) {
		return fieldErr("fileRoot", ErrBadPath, "%q is not an absolute, clean path", g.FileRoot)
	}
	for _, list := range []struct {
		name string
		ids  []string
	}{{"documents", g.Documents}, {"destinations", g.Destinations}, {"steps", g.Steps}} {
		if err := checkIDList(list.name, list.ids); err != nil {
			return err
		}
	}
	if g.Anchor != "" {
		if err := checkID(g.Anchor); err != nil {
			return &FieldError{Field: "anchor", Err: err}
		}
		if g.FileRoot == "" {
			return fieldErr("anchor", ErrInvalid, "only a file task (a grant with a file root) is anchored")
		}
	}
	if g.IssuedAt.IsZero() {
		return &FieldError{Field: "issuedAt", Err: ErrMissing}
	}
	if g.NotAfter.IsZero() {
		return &FieldError{Field: "notAfter", Err: ErrMissing}
	}
	if !g.NotAfter.After(g.IssuedAt) {
		return fieldErr("notAfter", ErrInvalid, "%s is not after issuedAt %s", g.NotAfter.Format(time.RFC3339), g.IssuedAt.Format(time.RFC3339))
	}
	if g.Manifest == "" {
		return &FieldError{Field: "manifest", Err: ErrMissing}
	}
	if !filepath.IsAbs(g.Manifest) {
		return fieldErr("manifest", ErrBadPath, "%q is not absolute", g.Manifest)
	}
	return nil
}

func checkIDList(name string, ids []string) error {
	for i, id := range ids {
		field := fmt.Sprintf("%s[%d]", name, i)
		if err := checkID(id); err != nil {
			return &FieldError{Field: field, Err: err}
		}
		if slices.IndexFunc(ids, func(o string) bool { return strings.EqualFold(o, id) }) != i {
			return fieldErr(field, ErrDuplicate, "%q", id)
		}
	}
	return nil
}

// Allows reports whether the grant lists tool.
func (g *Grant) Allows(tool string) bool { return slices.Contains(g.AllowedTools, tool) }

// Expired reports whether the grant has ended at now: notAfter itself is
// already too late.
func (g *Grant) Expired(now time.Time) bool { return !now.Before(g.NotAfter) }

// Validate checks a loaded grant against the loaded manifest: the grant was
// written for this manifest; every document, destination and step it names
// exists there; and its keys ([Keys]) are at least one and at most
// [api.MaxObjects], the most one scoped session covers. Too many is a
// [*GrantTooWideError].
func Validate(g *Grant, m *Manifest) error {
	if err := sameManifest(g.Manifest, m.File()); err != nil {
		return err
	}
	for i, id := range g.Documents {
		if _, ok := m.Documents[id]; !ok {
			return fieldErr(fmt.Sprintf("documents[%d]", i), ErrUnknownDocument, "%q", id)
		}
	}
	for i, id := range g.Destinations {
		if _, ok := m.Destinations[id]; !ok {
			return fieldErr(fmt.Sprintf("destinations[%d]", i), ErrUnknownDestination, "%q", id)
		}
	}
	if g.Anchor != "" {
		if d, ok := m.Destinations[g.Anchor]; !ok || d.TTag == "" {
			return fieldErr("anchor", ErrUnknownDestination, "%q (a destination with a key)", g.Anchor)
		}
	}
	for i, id := range g.Steps {
		if _, ok := m.Steps[id]; !ok {
			return fieldErr(fmt.Sprintf("steps[%d]", i), ErrUnknownStep, "%q", id)
		}
	}
	keys := Keys(g, m)
	if len(keys) == 0 {
		return ErrNoKeys
	}
	if len(keys) > api.MaxObjects {
		return &GrantTooWideError{Count: len(keys), Max: api.MaxObjects}
	}
	return nil
}

// CheckApproved refuses a grant that names a document the manifest does
// not (or no longer) approve: the operator withdrew it, and a server must
// not start serving it. The error names the first such document.
func CheckApproved(g *Grant, m *Manifest) error {
	for i, id := range g.Documents {
		if d, ok := m.Documents[id]; ok && !d.Approved {
			return fieldErr(fmt.Sprintf("documents[%d]", i), ErrNotApproved,
				"%q; write a new grant, or approve it in the manifest", id)
		}
	}
	return nil
}

// sameManifest refuses a grant written for another manifest. A grant that
// names none, or a manifest not read from a file, is not compared.
func sameManifest(named, loaded string) error {
	if named == "" || loaded == "" || filepath.Clean(named) == filepath.Clean(loaded) {
		return nil
	}
	// Two spellings of one file (a link on the way) are the same manifest.
	a, errA := os.Stat(named)
	b, errB := os.Stat(loaded)
	if errA == nil && errB == nil && os.SameFile(a, b) {
		return nil
	}
	return fieldErr("manifest", ErrManifestMismatch, "the grant names %s, the server loaded %s", named, loaded)
}

// Keys returns the distinct t-Tags the grant's documents (every fragment's
// key, for a compound one) and destinations are under, sorted: the scoped
// session's objects. Ids the manifest does not hold, and destinations
// without a key, add nothing.
func Keys(g *Grant, m *Manifest) []string {
	seen := make(map[string]bool)
	for _, id := range g.Documents {
		for _, k := range m.DocumentKeys(id) {
			seen[k] = true
		}
	}
	for _, id := range append(slices.Clone(g.Destinations), g.Anchor) {
		if d, ok := m.Destinations[id]; ok && d.TTag != "" {
			seen[d.TTag] = true
		}
	}
	return slices.Sorted(maps.Keys(seen))
}
