package grant

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/internal/strictjson"
)

// ManifestVersion is the manifest format this package reads and writes.
const ManifestVersion = 1

// KindCompound marks a document whose sections are each under their own key.
const KindCompound = "compound"

// Values of a step's confirm.
const (
	ConfirmNone   = "none"
	ConfirmElicit = "elicit"
)

// Manifest is the operator's record of documents, destinations, compound
// documents' keys and hand-off steps. The model never sees it; the server
// resolves the ids the model names through it.
type Manifest struct {
	Version int `json:"version"`
	// Task names the task the folder belongs to (NewTaskID): `pdmcp seed`
	// writes it, `pdmcp protect` adds it to a manifest without one. The
	// journal records it on first use and refuses another task's manifest
	// by name, so a task seeded again into a folder never inherits the old
	// task's record. Empty in a manifest written before task identities.
	Task         string                 `json:"task,omitempty"`
	Documents    map[string]Document    `json:"documents,omitempty"`
	Destinations map[string]Destination `json:"destinations,omitempty"`
	// CompoundKeys maps a data type to the t-Tag its sections are under.
	CompoundKeys map[string]string `json:"compoundKeys,omitempty"`
	Steps        map[string]Step   `json:"steps,omitempty"`

	// file is the absolute path the manifest was loaded from or saved to;
	// relative paths inside it are resolved against its folder.
	file string
}

// Document is one document. A single document has Path, TTag, IV, SHA256
// and Size of its one ciphertext; a compound one (Kind "compound") has a
// Skeleton and Fragments instead, and no Path, TTag or IV of its own.
type Document struct {
	Kind        string `json:"kind,omitempty"`
	Label       string `json:"label,omitempty"`
	Category    string `json:"category,omitempty"`
	Approved    bool   `json:"approved"`
	ContentType string `json:"contentType,omitempty"`
	Version     int    `json:"version"`
	// Path is the ciphertext, relative to the manifest's folder.
	Path string `json:"path,omitempty"`
	TTag string `json:"ttag,omitempty"`
	// IV is base64 of 16 bytes.
	IV string `json:"iv,omitempty"`
	// SHA256 is the plaintext's, in hex; optional for a compound document,
	// where it is the source as protected.
	SHA256 string `json:"sha256,omitempty"`
	Size   int64  `json:"size"`

	// Skeleton is a compound document's plaintext skeleton, relative to the
	// manifest's folder, and SkeletonSHA256 (optional) its hex sha256.
	Skeleton       string     `json:"skeleton,omitempty"`
	SkeletonSHA256 string     `json:"skeletonSha256,omitempty"`
	Fragments      []Fragment `json:"fragments,omitempty"`
}

// IsCompound reports whether d is a compound document.
func (d Document) IsCompound() bool { return d.Kind == KindCompound }

// Fragment returns the compound document's fragment with the given id.
func (d Document) Fragment(id string) (Fragment, bool) {
	for _, f := range d.Fragments {
		if f.ID == id {
			return f, true
		}
	}
	return Fragment{}, false
}

// DataTypes returns the distinct data types of d's fragments, sorted.
func (d Document) DataTypes() []string {
	seen := make(map[string]bool)
	for _, f := range d.Fragments {
		seen[f.DataType] = true
	}
	return slices.Sorted(maps.Keys(seen))
}

// Fragment is one section of a compound document, encrypted under the key
// the manifest's CompoundKeys names for its DataType.
type Fragment struct {
	ID       string `json:"id"`
	Label    string `json:"label,omitempty"`
	DataType string `json:"dataType"`
	// TTag is the key this version of the section is under when it is not
	// its data type's (compoundKeys): set by an export of the record for a
	// version saved under a key the manifest has since replaced. Empty: its
	// data type's key.
	TTag string `json:"ttag,omitempty"`
	// TemplateID is a C-CDA section's templateId/@root, for the operator.
	TemplateID string `json:"templateId,omitempty"`
	Path       string `json:"path"`
	IV         string `json:"iv"`
	SHA256     string `json:"sha256"`
	Size       int64  `json:"size"`
	Version    int    `json:"version"`
}

// Destination is a place results are saved to, under its existing key.
// TTag may be empty: saving there is then refused. Versions are the
// manifest's history (saves from before the journal's record, or an
// export of it); the server's own saves are in the record.
type Destination struct {
	Label    string         `json:"label,omitempty"`
	TTag     string         `json:"ttag,omitempty"`
	Versions []SavedVersion `json:"versions,omitempty"`
}

// Latest returns the destination's newest saved version, if any.
func (d Destination) Latest() (SavedVersion, bool) {
	if len(d.Versions) == 0 {
		return SavedVersion{}, false
	}
	return d.Versions[len(d.Versions)-1], true
}

// NextVersion is the version number the next save gets.
func (d Destination) NextVersion() int {
	if v, ok := d.Latest(); ok {
		return v.Version + 1
	}
	return 1
}

// SavedVersion is one saved result.
type SavedVersion struct {
	Version int    `json:"version"`
	Path    string `json:"path"`
	IV      string `json:"iv"`
	// TTag is the key the version was encrypted under, when known (an
	// export of the record names it): a destination whose key was replaced
	// keeps its old versions under the old key. Empty: the destination's.
	TTag    string    `json:"ttag,omitempty"`
	SHA256  string    `json:"sha256"`
	Size    int64     `json:"size"`
	SavedAt time.Time `json:"savedAt"`
}

// Step is a hand-off the operator defined: From hands To the sections of
// the given data types of the given compound documents.
type Step struct {
	Label string    `json:"label,omitempty"`
	From  string    `json:"from"`
	To    Recipient `json:"to"`
	// Documents maps a compound document's id to the data types handed.
	Documents        map[string][]string `json:"documents"`
	MaxWindowSeconds int                 `json:"maxWindowSeconds"`
	Confirm          string              `json:"confirm"`
}

// Recipient is who a step hands to, as the Gateway names them.
type Recipient struct {
	Label       string `json:"label,omitempty"`
	ActingAs    string `json:"actingAs"`
	SystemID    int64  `json:"systemId"`
	PrincipalID string `json:"principalId"`
}

// LoadManifest reads and checks the manifest at path. The manifest
// remembers its absolute path, against which [Manifest.Resolve] works.
func LoadManifest(path string) (*Manifest, error) {
	m, abs, err := loadChecked(manifestHolds, path, maxManifestBytes, (*Manifest).Validate)
	if err != nil {
		return nil, err
	}
	m.file = abs
	return m, nil
}

// Save checks m and writes it to path atomically with mode 0600, under the
// manifest's lock. An invalid manifest is refused and nothing is written.
// On success m remembers path.
//
// Save replaces whatever the file holds with m: it is for a file the caller
// alone writes (a test's folder). To change a manifest that others may
// write, use [UpdateManifest]; to write a new one, [CreateManifest].
func (m *Manifest) Save(path string) error { return m.save(context.Background(), path, nil) }

// save writes m to path under the manifest's lock; when fresh is not nil it
// runs under the lock first and can refuse the write.
func (m *Manifest) save(ctx context.Context, path string, fresh func(abs string) error) error {
	abs, err := RealPath(path)
	if err != nil {
		return fmt.Errorf("manifest %s: %w", path, err)
	}
	data, err := encodeChecked("manifest", abs, m, m.Validate)
	if err != nil {
		return err
	}
	// Even a whole-file write waits for an update under way, so the
	// update's read, change and rename stay one step.
	if err := writeShared(ctx, "manifest", abs, data, fresh); err != nil {
		return err
	}
	m.file = abs
	return nil
}

// File is the absolute path m was loaded from or last saved to, or "".
func (m *Manifest) File() string { return m.file }

// Dir is the folder of [Manifest.File].
func (m *Manifest) Dir() string {
	if m.file == "" {
		return ""
	}
	return filepath.Dir(m.file)
}

// Resolve turns a path from the manifest (relative, '/'-separated, inside
// the manifest's folder) into an absolute one.
func (m *Manifest) Resolve(rel string) (string, error) {
	if m.file == "" {
		return "", ErrNoManifestLocated
	}
	if err := checkRelPath(rel); err != nil {
		return "", fmt.Errorf("%q: %w", rel, err)
	}
	return filepath.Join(m.Dir(), filepath.FromSlash(rel)), nil
}

// DocumentKeys returns the distinct t-Tags the document is encrypted under,
// sorted: a single document's own, or the key of each of a compound
// document's data types. It is nil for a document m does not hold.
func (m *Manifest) DocumentKeys(id string) []string {
	d, ok := m.Documents[id]
	if !ok {
		return nil
	}
	if !d.IsCompound() {
		if d.TTag == "" {
			return nil
		}
		return []string{d.TTag}
	}
	seen := make(map[string]bool)
	for _, f := range d.Fragments {
		if k := m.CompoundKeys[f.DataType]; k != "" {
			seen[k] = true
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// Clone returns a deep copy of m, so a caller can change the copy, save it,
// and keep the original if the save fails.
func (m *Manifest) Clone() *Manifest {
	c := &Manifest{Version: m.Version, Task: m.Task, file: m.file, CompoundKeys: maps.Clone(m.CompoundKeys)}
	if m.Documents != nil {
		c.Documents = make(map[string]Document, len(m.Documents))
		for id, d := range m.Documents {
			d.Fragments = slices.Clone(d.Fragments)
			c.Documents[id] = d
		}
	}
	if m.Destinations != nil {
		c.Destinations = make(map[string]Destination, len(m.Destinations))
		for id, d := range m.Destinations {
			d.Versions = slices.Clone(d.Versions)
			c.Destinations[id] = d
		}
	}
	if m.Steps != nil {
		c.Steps = make(map[string]Step, len(m.Steps))
		for id, s := range m.Steps {
			if s.Documents != nil {
				docs := make(map[string][]string, len(s.Documents))
				for d, types := range s.Documents {
					docs[d] = slices.Clone(types)
				}
				s.Documents = docs
			}
			c.Steps[id] = s
		}
	}
	return c
}

// Validate checks every rule of the format and returns the first broken
// one, as a [*FieldError]. Entries are checked in id order, so the answer
// does not change from run to run.
func (m *Manifest) Validate() error {
	if m.Version != ManifestVersion {
		return fieldErr("version", ErrInvalid, "%d; this program reads version %d", m.Version, ManifestVersion)
	}
	if m.Task != "" {
		if err := checkID(m.Task); err != nil {
			return &FieldError{Field: "task", Err: err}
		}
	}
	for _, dt := range slices.Sorted(maps.Keys(m.CompoundKeys)) {
		field := strictjson.JoinPath("compoundKeys", dt)
		if err := checkID(dt); err != nil {
			return &FieldError{Field: field, Err: err}
		}
		if err := checkTTag(m.CompoundKeys[dt]); err != nil {
			return &FieldError{Field: field, Err: err}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(m.Documents)) {
		if err := m.validateDocument(id, m.Documents[id]); err != nil {
			return err
		}
	}
	for _, id := range slices.Sorted(maps.Keys(m.Destinations)) {
		if err := validateDestination(id, m.Destinations[id]); err != nil {
			return err
		}
	}
	for _, id := range slices.Sorted(maps.Keys(m.Steps)) {
		if err := m.validateStep(id, m.Steps[id]); err != nil {
			return err
		}
	}
	return nil
}

func (m *Manifest) validateDocument(id string, d Document) error {
	at := strictjson.JoinPath("documents", id)
	if err := checkID(id); err != nil {
		return &FieldError{Field: at, Err: err}
	}
	if d.Version < 1 {
		return fieldErr(at+".version", ErrInvalid, "%d; versions start at 1", d.Version)
	}
	if d.Size < 0 {
		return fieldErr(at+".size", ErrInvalid, "%d is negative", d.Size)
	}
	switch d.Kind {
	case "":
		return validateSingle(at, d)
	case KindCompound:
		return m.validateCompound(at, d)
	default:
		return fieldErr(at+".kind", ErrInvalid, "%q; the only kind is %q (omit it for a single document)", d.Kind, KindCompound)
	}
}

func validateSingle(at string, d Document) error {
	if err := checkPathField(at+".path", d.Path); err != nil {
		return err
	}
	if err := checkTTag(d.TTag); err != nil {
		return &FieldError{Field: at + ".ttag", Err: err}
	}
	if err := checkIV(d.IV); err != nil {
		return &FieldError{Field: at + ".iv", Err: err}
	}
	if err := checkSHA256(d.SHA256); err != nil {
		return &FieldError{Field: at + ".sha256", Err: err}
	}
	if d.Skeleton != "" || d.SkeletonSHA256 != "" || len(d.Fragments) > 0 {
		return fieldErr(at+".kind", ErrInvalid, "a document with a skeleton or fragments must be kind %q", KindCompound)
	}
	return nil
}

func (m *Manifest) validateCompound(at string, d Document) error {
	for _, f := range []struct{ name, value string }{{"path", d.Path}, {"ttag", d.TTag}, {"iv", d.IV}} {
		if f.value != "" {
			return fieldErr(at+"."+f.name, ErrInvalid, "a compound document has no %s of its own; its fragments have theirs", f.name)
		}
	}
	if d.SHA256 != "" {
		if err := checkSHA256(d.SHA256); err != nil {
			return &FieldError{Field: at + ".sha256", Err: err}
		}
	}
	if err := checkPathField(at+".skeleton", d.Skeleton); err != nil {
		return err
	}
	if d.SkeletonSHA256 != "" {
		if err := checkSHA256(d.SkeletonSHA256); err != nil {
			return &FieldError{Field: at + ".skeletonSha256", Err: err}
		}
	}
	if len(d.Fragments) == 0 {
		return fieldErr(at+".fragments", ErrMissing, "a compound document has at least one fragment")
	}
	seen := make(map[string]int)
	for i, f := range d.Fragments {
		fat := fmt.Sprintf("%s.fragments[%d]", at, i)
		if err := checkID(f.ID); err != nil {
			return &FieldError{Field: fat + ".id", Err: err}
		}
		if j, dup := seen[strings.ToLower(f.ID)]; dup {
			return fieldErr(fat+".id", ErrDuplicate, "%q is also fragments[%d]", f.ID, j)
		}
		seen[strings.ToLower(f.ID)] = i
		if err := checkID(f.DataType); err != nil {
			return &FieldError{Field: fat + ".dataType", Err: err}
		}
		if _, ok := m.CompoundKeys[f.DataType]; !ok {
			return fieldErr(fat+".dataType", ErrUnknownDataType, "%q has no key in compoundKeys", f.DataType)
		}
		if err := checkPathField(fat+".path", f.Path); err != nil {
			return err
		}
		if err := checkIV(f.IV); err != nil {
			return &FieldError{Field: fat + ".iv", Err: err}
		}
		if f.TTag != "" {
			if err := checkTTag(f.TTag); err != nil {
				return &FieldError{Field: fat + ".ttag", Err: err}
			}
		}
		if err := checkSHA256(f.SHA256); err != nil {
			return &FieldError{Field: fat + ".sha256", Err: err}
		}
		if f.Size < 0 {
			return fieldErr(fat+".size", ErrInvalid, "%d is negative", f.Size)
		}
		if f.Version < 1 {
			return fieldErr(fat+".version", ErrInvalid, "%d; versions start at 1", f.Version)
		}
	}
	return nil
}

func validateDestination(id string, d Destination) error {
	at := strictjson.JoinPath("destinations", id)
	if err := checkID(id); err != nil {
		return &FieldError{Field: at, Err: err}
	}
	if d.TTag != "" {
		if err := checkTTag(d.TTag); err != nil {
			return &FieldError{Field: at + ".ttag", Err: err}
		}
	}
	last := 0
	for i, v := range d.Versions {
		vat := fmt.Sprintf("%s.versions[%d]", at, i)
		if v.Version <= last {
			return fieldErr(vat+".version", ErrInvalid, "%d; versions rise from 1, oldest first", v.Version)
		}
		last = v.Version
		if err := checkPathField(vat+".path", v.Path); err != nil {
			return err
		}
		if err := checkIV(v.IV); err != nil {
			return &FieldError{Field: vat + ".iv", Err: err}
		}
		if v.TTag != "" {
			if err := checkTTag(v.TTag); err != nil {
				return &FieldError{Field: vat + ".ttag", Err: err}
			}
		}
		if err := checkSHA256(v.SHA256); err != nil {
			return &FieldError{Field: vat + ".sha256", Err: err}
		}
		if v.Size < 0 {
			return fieldErr(vat+".size", ErrInvalid, "%d is negative", v.Size)
		}
		if v.SavedAt.IsZero() {
			return fieldErr(vat+".savedAt", ErrMissing, "")
		}
	}
	return nil
}

func (m *Manifest) validateStep(id string, s Step) error {
	at := strictjson.JoinPath("steps", id)
	if err := checkID(id); err != nil {
		return &FieldError{Field: at, Err: err}
	}
	for _, f := range []struct{ name, value string }{{"from", s.From}, {"to.actingAs", s.To.ActingAs}, {"to.principalId", s.To.PrincipalID}} {
		if strings.TrimSpace(f.value) == "" {
			return fieldErr(at+"."+f.name, ErrMissing, "")
		}
	}
	if s.To.SystemID <= 0 {
		return fieldErr(at+".to.systemId", ErrMissing, "the recipient's system id, as /api/v1/keys/acl/get reports it")
	}
	if s.MaxWindowSeconds <= 0 {
		return fieldErr(at+".maxWindowSeconds", ErrInvalid, "%d; a window is at least one second", s.MaxWindowSeconds)
	}
	if s.Confirm != ConfirmNone && s.Confirm != ConfirmElicit {
		return fieldErr(at+".confirm", ErrInvalid, "%q; it is %q or %q", s.Confirm, ConfirmNone, ConfirmElicit)
	}
	if len(s.Documents) == 0 {
		return fieldErr(at+".documents", ErrMissing, "a step hands at least one document's sections")
	}
	for _, docID := range slices.Sorted(maps.Keys(s.Documents)) {
		dat := strictjson.JoinPath(at+".documents", docID)
		d, ok := m.Documents[docID]
		if !ok {
			return fieldErr(dat, ErrUnknownDocument, "%q", docID)
		}
		if !d.IsCompound() {
			return fieldErr(dat, ErrNotCompound, "%q; a step hands sections of compound documents only", docID)
		}
		types := s.Documents[docID]
		if len(types) == 0 {
			return fieldErr(dat, ErrMissing, "name the data types the step hands")
		}
		have := d.DataTypes()
		for i, dt := range types {
			if !slices.Contains(have, dt) {
				return fieldErr(fmt.Sprintf("%s[%d]", dat, i), ErrUnknownDataType, "%q is not a data type of %q (it has %s)", dt, docID, strings.Join(have, ", "))
			}
			if slices.Index(types, dt) != i {
				return fieldErr(fmt.Sprintf("%s[%d]", dat, i), ErrDuplicate, "%q", dt)
			}
		}
	}
	return nil
}

// checkID accepts 1-128 ASCII letters, digits, '-', '_' and '.', starting
// with a letter or digit: ids become file names, and this keeps out
// separators, "..", hidden files and anything that reads as a flag.
func checkID(id string) error {
	if id == "" {
		return fmt.Errorf("%w: empty", ErrBadID)
	}
	if len(id) > 128 {
		return fmt.Errorf("%w: %d characters", ErrBadID, len(id))
	}
	for i, r := range id {
		alnum := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
		if !alnum && (i == 0 || (r != '-' && r != '_' && r != '.')) {
			return fmt.Errorf("%w: %q", ErrBadID, id)
		}
	}
	return nil
}

// checkTTag accepts any non-empty printable value without spaces: the key
// server decides what a t-Tag looks like.
func checkTTag(t string) error {
	if t == "" {
		return fmt.Errorf("%w: t-Tag", ErrMissing)
	}
	if len(t) > 1024 {
		return fmt.Errorf("%w: a t-Tag of %d characters", ErrInvalid, len(t))
	}
	for _, r := range t {
		if r <= ' ' || r == 0x7f {
			return fmt.Errorf("%w: a t-Tag holds a space or control character", ErrInvalid)
		}
	}
	return nil
}

func checkIV(iv string) error {
	if iv == "" {
		return fmt.Errorf("%w: missing", ErrBadIV)
	}
	b, err := base64.StdEncoding.Strict().DecodeString(iv)
	if err != nil {
		return fmt.Errorf("%w: not base64", ErrBadIV)
	}
	if len(b) != api.IVBytes {
		return fmt.Errorf("%w: %d bytes", ErrBadIV, len(b))
	}
	return nil
}

func checkSHA256(h string) error {
	if len(h) != 64 {
		return fmt.Errorf("%w: %d characters", ErrBadSHA256, len(h))
	}
	if _, err := hex.DecodeString(h); err != nil {
		return fmt.Errorf("%w: not hex", ErrBadSHA256)
	}
	return nil
}

// checkRelPath accepts a '/'-separated path that stays inside the folder it
// is relative to: not absolute, no "..", no backslash, not empty.
func checkRelPath(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("%w: empty", ErrBadPath)
	case strings.Contains(p, `\`):
		return fmt.Errorf("%w: use '/' between names", ErrBadPath)
	case !filepath.IsLocal(filepath.FromSlash(p)):
		return fmt.Errorf("%w: must be relative to the manifest's folder and stay inside it", ErrBadPath)
	}
	return nil
}

func checkPathField(field, p string) error {
	if err := checkRelPath(p); err != nil {
		return &FieldError{Field: field, Err: fmt.Errorf("%q: %w", p, err)}
	}
	return nil
}

// NewTaskID returns a new task identity for Manifest.Task: "task-" and 32
// random hex digits, so two tasks never share one.
func NewTaskID() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("task id: %w", err)
	}
	return "task-" + hex.EncodeToString(b), nil
}
