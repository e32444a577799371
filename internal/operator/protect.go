package operator

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/crashpoint"
	"github.com/pdmcp/pdmcp/server/compound"
)

// ProtectOptions are `pdmcp protect`'s inputs.
type ProtectOptions struct {
	Config       *gateway.ServiceConfig
	ManifestPath string
	SourcePath   string
	DocumentID   string
	Label        string // default: the source's file name
	Category     string
	// Owner is the principal that owns the keys (the Gateway's name for
	// it); empty means the seed record's owner.
	Owner string
	// Keys names an existing key per data type instead of creating one.
	Keys map[string]string
	// RecordPath is a seed record: its owner is the default Owner, and the
	// keys this run creates are added to it.
	RecordPath string
	Table      *compound.Table
	// AbandonLost lets a key-creating encrypt whose answer was lost be
	// followed by a new one: the operator accepts that the key server may
	// keep a key nobody can name.
	AbandonLost bool
	// Progress gets one line per section (stderr).
	Progress io.Writer
	// CrashPoint, when set, is called at each step (the crashpoint.Protect
	// points; tests kill the process there).
	CrashPoint func(crashpoint.Point)
}

// ProtectRow is one section in the summary.
type ProtectRow struct {
	FragmentID string
	Label      string
	DataType   string
	Bytes      int
	// Key is "created", "reused" (already in compoundKeys or created for
	// an earlier section) or "named" (--key).
	Key string
}

// ProtectSummary is what a protect run did.
type ProtectSummary struct {
	DocumentID string
	Form       compound.Form
	Rows       []ProtectRow
	// AlreadyDone: the document was already protected from this source;
	// nothing was sent.
	AlreadyDone bool
	CreatedKeys int
}

// WriteTable prints the summary as a table.
func (s *ProtectSummary) WriteTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FRAGMENT\tLABEL\tDATA TYPE\tBYTES\tKEY")
	for _, r := range s.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", r.FragmentID, r.Label, r.DataType, r.Bytes, r.Key)
	}
	tw.Flush()
	state := "PROTECT: OK"
	if s.AlreadyDone {
		state = "PROTECT: OK (already protected from this source; nothing sent)"
	}
	fmt.Fprintf(w, "%s %s: %d fragments, %d keys created\n%s\n", s.Form, s.DocumentID, len(s.Rows), s.CreatedKeys, state)
}

// Errors a caller can match.
var (
	// ErrAnswerLost: a key-creating encrypt was sent and its answer never
	// came back; it is not sent again.
	ErrAnswerLost = errors.New("an encrypt's answer was lost")
	// ErrAlreadyProtected: the manifest holds the document id already,
	// from another source.
	ErrAlreadyProtected = errors.New("document id already in the manifest")
)

// ProtectJournalName is the protect journal's file, beside the manifest.
const ProtectJournalName = "protect-journal.json"

// The protect journal records every encrypt before it is sent and its
// answer when it comes, so a rerun never repeats one that may have
// created a key. It holds t-Tags, IVs and ciphertexts, never plaintext.
type protectJournal struct {
	Version   int                    `json:"version"`
	Documents map[string]*protectRun `json:"documents"`
	path      string
}

type protectRun struct {
	SourceSHA256 string `json:"sourceSha256"`
	Owner        string `json:"owner"`
	// State is "encrypting" until the manifest lists the document, then
	// "done".
	State    string          `json:"state"`
	Attempts []*protectEntry `json:"attempts"`
}

// Attempt states.
const (
	attemptSent      = "sent"      // recorded before the request; no answer yet
	attemptEncrypted = "encrypted" // the answer is recorded
	attemptLost      = "lost"      // no answer came (connection lost, timeout)
	attemptFailed    = "failed"    // the Gateway or key server refused: nothing was done
	attemptAbandoned = "abandoned" // a lost attempt the operator gave up on
)

type protectEntry struct {
	Fragment   string    `json:"fragment"`
	DataType   string    `json:"dataType"`
	CreatesKey bool      `json:"createsKey"`
	State      string    `json:"state"`
	TTag       string    `json:"ttag,omitempty"`
	IV         string    `json:"iv"`
	Ciphertext string    `json:"ciphertext,omitempty"`
	At         time.Time `json:"at"`
	Detail     string    `json:"detail,omitempty"`
}

func loadProtectJournal(path string) (*protectJournal, error) {
	j := &protectJournal{Version: 1, Documents: map[string]*protectRun{}, path: path}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return j, nil
	}
	if err != nil {
		return nil, fmt.Errorf("protect journal: %w", err)
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("protect journal %s: mode %#o; run chmod 600 on it", path, fi.Mode().Perm())
	}
	if err := json.Unmarshal(data, j); err != nil {
		return nil, fmt.Errorf("protect journal %s: %w", path, err)
	}
	if j.Version != 1 {
		return nil, fmt.Errorf("protect journal %s: version %d; this program reads 1", path, j.Version)
	}
	if j.Documents == nil {
		j.Documents = map[string]*protectRun{}
	}
	return j, nil
}

func (j *protectJournal) save() error {
	data, err := json.MarshalIndent(j, "", "  ")
	if err != nil {
		return err
	}
	if err := grant.WriteFileAtomic(j.path, append(data, '\n')); err != nil {
		return fmt.Errorf("protect journal: %w", err)
	}
	return nil
}

// createdKeys maps each data type to the key an encrypt in any run created.
func (j *protectJournal) createdKeys() map[string]string {
	out := map[string]string{}
	for _, id := range slices.Sorted(maps.Keys(j.Documents)) {
		for _, a := range j.Documents[id].Attempts {
			if a.CreatesKey && a.State == attemptEncrypted {
				if _, ok := out[a.DataType]; !ok {
					out[a.DataType] = a.TTag
				}
			}
		}
	}
	return out
}

// latest is the newest attempt for a fragment, or nil.
func (r *protectRun) latest(fragment string) *protectEntry {
	for i := len(r.Attempts) - 1; i >= 0; i-- {
		if r.Attempts[i].Fragment == fragment {
			return r.Attempts[i]
		}
	}
	return nil
}

// Protect splits a compound source, encrypts each section under its data
// type's key as the owner, writes the ciphertexts and the skeleton, and
// adds the document to the manifest. It grants nothing.
func Protect(ctx context.Context, o ProtectOptions) (*ProtectSummary, error) {
	crash := o.CrashPoint
	if crash == nil {
		crash = func(crashpoint.Point) {}
	}
	progress := o.Progress
	if progress == nil {
		progress = io.Discard
	}
	if o.Config == nil || o.ManifestPath == "" || o.SourcePath == "" || o.DocumentID == "" {
		return nil, errors.New("protect: --config, --manifest, --source and --document-id are required")
	}
	if o.Table == nil {
		o.Table = compound.DefaultTable()
	}
	m, err := grant.LoadManifest(o.ManifestPath)
	if err != nil {
		return nil, fmt.Errorf("protect: %w", err)
	}
	src, err := os.ReadFile(o.SourcePath)
	if err != nil {
		return nil, fmt.Errorf("protect: %w", err)
	}
	// The split and its reassembly proof come before any key is touched.
	split, err := compound.Split(src, o.Table)
	if err != nil {
		return nil, fmt.Errorf("protect: %s: %w", o.SourcePath, err)
	}
	srcSum := hex.EncodeToString(split.SHA256[:])
	summary := &ProtectSummary{DocumentID: o.DocumentID, Form: split.Form}

	var rec *grant.SeedRecord
	if o.RecordPath != "" {
		if rec, err = grant.LoadSeedRecord(o.RecordPath); err != nil {
			return nil, fmt.Errorf("protect: %w", err)
		}
	}
	owner := o.Owner
	if owner == "" && rec != nil {
		owner = rec.OwnerUser
	}
	if owner == "" {
		return nil, errors.New("protect: name the keys' owner with --owner, or --record a seed record whose owner it is")
	}

	unlock, err := lockProtect(ctx, filepath.Join(m.Dir(), ProtectJournalName+".lock"), o.DocumentID, progress)
	if err != nil {
		return nil, err
	}
	defer unlock()
	// Read again under the lock: a protect this one waited for may have
	// added keys, or this very document.
	if m, err = grant.LoadManifest(o.ManifestPath); err != nil {
		return nil, fmt.Errorf("protect: %w", err)
	}
	j, err := loadProtectJournal(filepath.Join(m.Dir(), ProtectJournalName))
	if err != nil {
		return nil, err
	}
	run := j.Documents[o.DocumentID]
	if d, ok := m.Documents[o.DocumentID]; ok {
		if !d.IsCompound() || d.SHA256 != srcSum {
			return nil, fmt.Errorf("protect: %w: %q; choose another --document-id", ErrAlreadyProtected, o.DocumentID)
		}
		summary.AlreadyDone = true
		for _, s := range split.Sections {
			summary.Rows = append(summary.Rows, ProtectRow{FragmentID: s.ID, Label: s.Label, DataType: s.DataType, Bytes: len(s.Text), Key: "reused"})
		}
		// A run killed after the manifest was saved finishes here.
		if run != nil && run.State != "done" {
			if err := finishRecord(ctx, o.RecordPath, run); err != nil {
				return nil, err
			}
			run.State = "done"
			if err := j.save(); err != nil {
				return nil, err
			}
		}
		return summary, nil
	}
	if run != nil && run.SourceSHA256 != srcSum {
		return nil, fmt.Errorf("protect: the journal holds an unfinished protect of %q from another source (sha256 %s…); protect this source under another --document-id", o.DocumentID, run.SourceSHA256[:12])
	}
	if run != nil && run.Owner != owner {
		return nil, fmt.Errorf("protect: the unfinished protect of %q was started as owner %q; rerun it with that owner", o.DocumentID, run.Owner)
	}
	if run == nil {
		run = &protectRun{SourceSHA256: srcSum, Owner: owner, State: "encrypting"}
		j.Documents[o.DocumentID] = run
	}

	// Which key each data type uses: the manifest's, then --key, then one
	// an earlier run created; a type with none gets one from its first
	// section.
	keys := map[string]string{}
	how := map[string]string{}
	for dt, k := range o.Keys {
		if have := m.CompoundKeys[dt]; have != "" && have != k {
			return nil, fmt.Errorf("protect: --key %s: the manifest's compoundKeys already names another key for %s; one key per data type", dt, dt)
		}
		keys[dt], how[dt] = k, "named"
	}
	for dt, k := range m.CompoundKeys {
		keys[dt], how[dt] = k, "reused"
	}
	for dt, k := range j.createdKeys() {
		if _, ok := keys[dt]; !ok {
			keys[dt], how[dt] = k, "created"
		}
	}

	// Settle lost attempts before anything is sent. The lock is held, so
	// an attempt still "sent" belongs to a run that died before its
	// answer: it is lost. A lost key-creating attempt, in any document's
	// run, may have made its data type's key: while that type has no key
	// this run can name, none is created for it until the operator says
	// --abandon-lost.
	needKey := map[string]bool{}
	for _, s := range split.Sections {
		if keys[s.DataType] == "" {
			needKey[s.DataType] = true
		}
	}
	for _, id := range slices.Sorted(maps.Keys(j.Documents)) {
		for _, a := range j.Documents[id].Attempts {
			if a.State == attemptSent {
				a.State = attemptLost
			}
			if a.State != attemptLost || !a.CreatesKey || !needKey[a.DataType] {
				// Lost under an existing key (or one now named): it created
				// nothing, and its ciphertext was never stored.
				continue
			}
			if !o.AbandonLost {
				if err := j.save(); err != nil {
					return nil, err
				}
				return nil, lostKeyError(id, a)
			}
			a.State = attemptAbandoned
		}
	}
	if err := j.save(); err != nil {
		return nil, err
	}

	c, err := gateway.New(o.Config.ClientConfig())
	if err != nil {
		return nil, err
	}
	objects := slices.Sorted(maps.Values(keys))
	objects = slices.Compact(objects)
	sess, err := c.Mint(ctx, gateway.MintRequest{ActingAs: owner, Objects: objects, TTL: api.MaxScopedTTL})
	if err != nil {
		return nil, fmt.Errorf("protect: owner session for %s: %w", owner, err)
	}
	defer sess.Revoke(context.WithoutCancel(ctx))

	results := map[string]*protectEntry{}
	for _, s := range split.Sections {
		if a := run.latest(s.ID); a != nil && a.State == attemptEncrypted {
			results[s.ID] = a
			fmt.Fprintf(progress, "protect %s: %s (%s): encrypted in an earlier run\n", o.DocumentID, s.ID, s.DataType)
			continue
		}
		iv := make([]byte, api.IVBytes)
		if _, err := rand.Read(iv); err != nil {
			return nil, err
		}
		a := &protectEntry{Fragment: s.ID, DataType: s.DataType, CreatesKey: keys[s.DataType] == "", State: attemptSent,
			TTag: keys[s.DataType], IV: base64.StdEncoding.EncodeToString(iv), At: time.Now().UTC()}
		run.Attempts = append(run.Attempts, a)
		if err := j.save(); err != nil {
			return nil, err
		}
		crash(crashpoint.ProtectSent)
		enc, err := sess.Encrypt(ctx, gateway.EncryptInput{TTag: keys[s.DataType], IV: iv, Plaintext: s.Text})
		if err != nil {
			// As encrypt_file: only a refusal before any work (a 4xx with a
			// code of its own) is known to have made nothing. A 5xx may come
			// after the key server made the key (a 504 from a Gateway that
			// waited too long), so it counts as lost, like no answer.
			a.State = attemptLost
			if api.RefusedBeforeWork(err) {
				a.State = attemptFailed
			}
			a.Detail = err.Error()
			if serr := j.save(); serr != nil {
				return nil, errors.Join(err, serr)
			}
			if a.State == attemptLost {
				return nil, fmt.Errorf("protect: encrypt of fragment %s: %w (%v); rerun to continue: it is not sent again", s.ID, ErrAnswerLost, err)
			}
			return nil, fmt.Errorf("protect: encrypt of fragment %s: %w", s.ID, err)
		}
		a.State, a.TTag = attemptEncrypted, enc.TTag
		a.IV = base64.StdEncoding.EncodeToString(enc.IV)
		a.Ciphertext = base64.StdEncoding.EncodeToString(enc.Ciphertext)
		if err := j.save(); err != nil {
			return nil, err
		}
		crash(crashpoint.ProtectEncrypted)
		verb := "under the existing key"
		if keys[s.DataType] == "" {
			keys[s.DataType], how[s.DataType] = enc.TTag, "created"
			verb = "under a new key"
		}
		results[s.ID] = a
		fmt.Fprintf(progress, "protect %s: %s (%s, %d bytes): encrypted %s\n", o.DocumentID, s.ID, s.DataType, len(s.Text), verb)
	}

	// Files: each section's ciphertext and the skeleton, in
	// documents/<id>/; nothing refers to them until the manifest does.
	rel := "documents/" + o.DocumentID
	dir, err := m.Resolve(rel)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("protect: %w", err)
	}
	doc := grant.Document{Kind: grant.KindCompound, Label: o.Label, Category: o.Category, Approved: true,
		ContentType: contentType(split.Form), Version: 1, SHA256: srcSum, Size: int64(len(src))}
	if doc.Label == "" {
		doc.Label = filepath.Base(o.SourcePath)
	}
	for _, s := range split.Sections {
		a := results[s.ID]
		ct, err := base64.StdEncoding.DecodeString(a.Ciphertext)
		if err != nil {
			return nil, fmt.Errorf("protect journal: fragment %s: %w", s.ID, err)
		}
		if a.TTag != keys[s.DataType] {
			return nil, fmt.Errorf("protect: fragment %s was encrypted under another key than %s's; start over with another --document-id", s.ID, s.DataType)
		}
		name := s.ID + ".v1.bin"
		if err := grant.WriteFileAtomic(filepath.Join(dir, name), ct); err != nil {
			return nil, fmt.Errorf("protect: %w", err)
		}
		sum := sha256.Sum256(s.Text)
		doc.Fragments = append(doc.Fragments, grant.Fragment{ID: s.ID, Label: s.Label, DataType: s.DataType, TemplateID: s.TemplateRoot,
			Path: rel + "/" + name, IV: a.IV, SHA256: hex.EncodeToString(sum[:]), Size: int64(len(s.Text)), Version: 1})
		// "created" on the section whose encrypt made its type's key;
		// every other section of that type reuses it.
		row := ProtectRow{FragmentID: s.ID, Label: s.Label, DataType: s.DataType, Bytes: len(s.Text), Key: how[s.DataType]}
		switch {
		case a.CreatesKey:
			row.Key = "created"
			summary.CreatedKeys++
		case how[s.DataType] == "created":
			row.Key = "reused"
		}
		summary.Rows = append(summary.Rows, row)
	}
	skName := "skeleton" + skeletonExt(split.Form)
	if err := grant.WriteFileAtomic(filepath.Join(dir, skName), split.Skeleton); err != nil {
		return nil, fmt.Errorf("protect: %w", err)
	}
	skSum := sha256.Sum256(split.Skeleton)
	doc.Skeleton, doc.SkeletonSHA256 = rel+"/"+skName, hex.EncodeToString(skSum[:])
	crash(crashpoint.ProtectFilesWritten)

	// The manifest, changed under its lock on the file as it is now, so
	// whatever another writer saved since this run read it is kept.
	announceManifestWait(o.ManifestPath, o.DocumentID, progress)
	_, err = grant.UpdateManifest(ctx, o.ManifestPath, func(next *grant.Manifest) error {
		if _, ok := next.Documents[o.DocumentID]; ok {
			return fmt.Errorf("%w: %q was added while this ran", ErrAlreadyProtected, o.DocumentID)
		}
		if next.Documents == nil {
			next.Documents = map[string]grant.Document{}
		}
		if next.CompoundKeys == nil {
			next.CompoundKeys = map[string]string{}
		}
		for _, dt := range split.DataTypesUsed() {
			if have := next.CompoundKeys[dt]; have != "" && have != keys[dt] {
				return fmt.Errorf("compoundKeys[%s] changed while this ran; start over", dt)
			}
			next.CompoundKeys[dt] = keys[dt]
		}
		next.Documents[o.DocumentID] = doc
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("protect: %w", err)
	}
	crash(crashpoint.ProtectManifestSaved)
	if err := finishRecord(ctx, o.RecordPath, run); err != nil {
		return nil, err
	}
	run.State = "done"
	if err := j.save(); err != nil {
		return nil, err
	}
	return summary, nil
}

// lostKeyError refuses a run that would create a key for a data type
// whose key-creating encrypt (attempt a, of document docID) got no answer
// it could trust.
func lostKeyError(docID string, a *protectEntry) error {
	return fmt.Errorf("protect: %w: fragment %s of %q (data type %s) was sent at %s to create that type's key and no answer it can trust came back (%s). "+
		"It is never sent again, and no other key is created for %s in any document: the key server may hold a key this program cannot name. "+
		"Name an existing key with --key %s=<t-Tag>, or accept a possibly orphaned key and create a new one with --abandon-lost",
		ErrAnswerLost, a.Fragment, docID, a.DataType, a.At.UTC().Format(time.RFC3339), lostDetail(a), a.DataType, a.DataType)
}

func lostDetail(a *protectEntry) string {
	if a.Detail == "" {
		return "the run stopped before it"
	}
	return a.Detail
}

// finishRecord adds the keys run created to the seed record, once each,
// under the record's lock on the record as it is now: a cleanup or another
// protect that changed it meanwhile keeps its change.
func finishRecord(ctx context.Context, path string, run *protectRun) error {
	if path == "" {
		return nil
	}
	_, err := grant.UpdateSeedRecord(ctx, path, func(rec *grant.SeedRecord) error {
		for _, a := range run.Attempts {
			if a.CreatesKey && a.State == attemptEncrypted && !slices.Contains(rec.Keys, a.TTag) {
				rec.Keys = append(rec.Keys, a.TTag)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("protect: %w", err)
	}
	return nil
}

func contentType(f compound.Form) string {
	if f == compound.FormHL7 {
		return "application/hl7-v2; charset=utf-8"
	}
	return "application/xml; charset=utf-8"
}

func skeletonExt(f compound.Form) string {
	if f == compound.FormHL7 {
		return ".hl7"
	}
	return ".xml"
}

// ParseKeyFlags reads --key dataType=t-Tag values.
func ParseKeyFlags(specs []string) (map[string]string, error) {
	out := map[string]string{}
	for _, s := range specs {
		dt, tt, ok := strings.Cut(s, "=")
		if !ok || dt == "" || tt == "" {
			return nil, fmt.Errorf("--key %q: write dataType=t-Tag", s)
		}
		if _, dup := out[dt]; dup {
			return nil, fmt.Errorf("--key %q: %s named twice", s, dt)
		}
		out[dt] = tt
	}
	return out, nil
}
