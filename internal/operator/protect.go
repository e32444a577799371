package operator

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
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
	"github.com/pdmcp/pdmcp/server"
	"github.com/pdmcp/pdmcp/server/compound"
)

// Limits protect checks before anything is sent, so a source it would have
// to give up on part-way costs no encrypt, no key and no document id.
const (
	// MaxSourceBytes bounds a protect source: the Gateway's limit on one
	// encrypt (api.MaxDataBytes, 16 MiB less one byte). A source is read no
	// further than this.
	MaxSourceBytes = api.MaxDataBytes
	// MaxSectionBytes bounds one section: the read limit
	// (server.MaxTextBytes, 64 KiB), which read_protected_fragment refuses
	// RESULT_TOO_LARGE over, and so below the Gateway's body limit too. A
	// section over it could be encrypted but never read back by the agent.
	MaxSectionBytes = min(server.MaxTextBytes, api.MaxDataBytes)
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
	// Logger gets the Gateway requests; nil discards.
	Logger *slog.Logger
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
	// ErrTooLarge: the source or a section is over a limit (MaxSourceBytes,
	// MaxSectionBytes); nothing was sent.
	ErrTooLarge = errors.New("over the limit")
	// ErrInterrupted: the run was stopped (Ctrl-C, SIGTERM) after waiting
	// for the encrypt in flight and recording its answer.
	ErrInterrupted = errors.New("interrupted")
)

// Protect splits a compound source, encrypts each section under its data
// type's key as the owner, writes the ciphertexts and the skeleton, and
// adds the document to the manifest. It grants nothing.
//
// The steps, in order: read and split the source (before any key is
// touched), take the protect lock and read the manifest and the journal
// again, finish a run the manifest already holds, choose each data type's
// key, settle lost attempts, encrypt the sections, write the files, add
// the document to the manifest, and mark the run done.
//
// A stop (ctx ending: Ctrl-C, SIGTERM) waits for the encrypt in flight,
// records its answer, and returns an error matching ErrInterrupted; the
// run can then be continued by running it again, or abandoned with
// AbandonProtect.
func Protect(ctx context.Context, o ProtectOptions) (*ProtectSummary, error) {
	sum, err := protect(ctx, o)
	if err != nil && ctx.Err() != nil && !errors.Is(err, ErrInterrupted) {
		// Stopped while waiting for a lock or a session: nothing was in
		// flight, and the cause is the stop, not the step.
		err = fmt.Errorf("protect %s: %w (%w)", o.DocumentID, ErrInterrupted, err)
	}
	return sum, err
}

func protect(ctx context.Context, o ProtectOptions) (*ProtectSummary, error) {
	p, err := newProtection(o)
	if err != nil {
		return nil, err
	}
	unlock, err := lockProtect(ctx, filepath.Join(p.m.Dir(), ProtectJournalName+".lock"), o.DocumentID, p.progress)
	if err != nil {
		return nil, err
	}
	defer unlock()
	// Read again under the lock: a protect this one waited for may have
	// added keys, or this very document.
	if p.m, err = grant.LoadManifest(o.ManifestPath); err != nil {
		return nil, fmt.Errorf("protect: %w", err)
	}
	if p.j, err = loadProtectJournal(filepath.Join(p.m.Dir(), ProtectJournalName)); err != nil {
		return nil, err
	}
	p.run = p.j.Documents[o.DocumentID]
	if d, ok := p.m.Documents[o.DocumentID]; ok {
		return p.alreadyProtected(ctx, d)
	}
	if err := p.startRun(); err != nil {
		return nil, err
	}
	if err := p.chooseKeys(); err != nil {
		return nil, err
	}
	if err := p.settleLost(); err != nil {
		return nil, err
	}
	sess, err := p.ownerSession(ctx)
	if err != nil {
		return nil, err
	}
	defer sess.Revoke(context.WithoutCancel(ctx))
	results, err := p.encryptSections(ctx, sess)
	if err != nil {
		// The keys this run made so far go into the seed record too, so
		// that seed --cleanup removes them even if the run is never
		// continued or abandoned (its owner would be gone after that).
		if rerr := finishRecord(context.WithoutCancel(ctx), p.o.RecordPath, p.run); rerr != nil {
			return nil, errors.Join(err, rerr)
		}
		return nil, err
	}
	if err := p.interrupted(ctx, "before writing the files"); err != nil {
		return nil, err
	}
	doc, err := p.writeFiles(results)
	if err != nil {
		return nil, err
	}
	p.crash(crashpoint.ProtectFilesWritten)
	if err := p.addToManifest(ctx, doc); err != nil {
		return nil, err
	}
	p.crash(crashpoint.ProtectManifestSaved)
	if err := p.finish(ctx); err != nil {
		return nil, err
	}
	return p.summary, nil
}

// protection is one run of Protect: its options, the split source, and
// what the steps learn on the way.
type protection struct {
	o        ProtectOptions
	crash    func(crashpoint.Point)
	progress io.Writer
	src      []byte
	split    *compound.Result
	srcSum   string
	owner    string
	summary  *ProtectSummary

	// Read under the protect lock.
	m   *grant.Manifest
	j   *protectJournal
	run *protectRun
	// keys is each data type's key (empty until its first section's
	// encrypt creates one); how says where it came from ("named",
	// "reused", "created").
	keys, how map[string]string
}

// newProtection checks the options, reads the manifest and the source,
// splits it (with its reassembly proof) and settles the keys' owner, all
// before any lock is taken or key touched.
func newProtection(o ProtectOptions) (*protection, error) {
	p := &protection{o: o, crash: o.CrashPoint, progress: o.Progress}
	if p.crash == nil {
		p.crash = func(crashpoint.Point) {}
	}
	if p.progress == nil {
		p.progress = io.Discard
	}
	if o.Config == nil || o.ManifestPath == "" || o.SourcePath == "" || o.DocumentID == "" {
		return nil, errors.New("protect: --config, --manifest, --source and --document-id are required")
	}
	if p.o.Table == nil {
		p.o.Table = compound.DefaultTable()
	}
	var err error
	if p.m, err = grant.LoadManifest(o.ManifestPath); err != nil {
		return nil, fmt.Errorf("protect: %w", err)
	}
	if p.src, err = readSource(o.SourcePath); err != nil {
		return nil, err
	}
	// The split and its reassembly proof come before any key is touched.
	if p.split, err = compound.Split(p.src, p.o.Table); err != nil {
		return nil, fmt.Errorf("protect: %s: %w", o.SourcePath, err)
	}
	if err := checkSections(o.SourcePath, p.split.Sections); err != nil {
		return nil, err
	}
	p.srcSum = hex.EncodeToString(p.split.SHA256[:])
	p.summary = &ProtectSummary{DocumentID: o.DocumentID, Form: p.split.Form}

	var rec *grant.SeedRecord
	if o.RecordPath != "" {
		if rec, err = grant.LoadSeedRecord(o.RecordPath); err != nil {
			return nil, fmt.Errorf("protect: %w", err)
		}
	}
	p.owner = o.Owner
	if p.owner == "" && rec != nil {
		p.owner = rec.OwnerUser
	}
	if p.owner == "" {
		return nil, errors.New("protect: name the keys' owner with --owner, or --seed-record a seed record whose owner it is")
	}
	return p, nil
}

// readSource reads a protect source of at most MaxSourceBytes, reading no
// further: a larger one is refused before it is split.
func readSource(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("protect: %w", err)
	}
	defer f.Close()
	src, err := io.ReadAll(io.LimitReader(f, MaxSourceBytes+1))
	if err != nil {
		return nil, fmt.Errorf("protect: %s: %w", path, err)
	}
	if len(src) > MaxSourceBytes {
		return nil, fmt.Errorf("protect: %s: %w: the source is over %d bytes, the Gateway's limit on one encrypt; nothing was sent and the document id is still free",
			path, ErrTooLarge, MaxSourceBytes)
	}
	return src, nil
}

// checkSections refuses a split with a section no read tool could return,
// naming every such section, before any key is touched.
func checkSections(path string, sections []compound.Section) error {
	var over []string
	for _, s := range sections {
		if len(s.Text) > MaxSectionBytes {
			over = append(over, fmt.Sprintf("%s (%s, %d bytes)", s.ID, s.DataType, len(s.Text)))
		}
	}
	if len(over) == 0 {
		return nil
	}
	return fmt.Errorf("protect: %s: %w: section %s over the %d-byte limit of one read (read_protected_fragment would refuse it RESULT_TOO_LARGE); nothing was sent and the document id is still free: split the source into smaller documents",
		path, ErrTooLarge, strings.Join(over, ", "), MaxSectionBytes)
}

// interrupted is ErrInterrupted, saying where, once ctx has ended: the
// run stops at a step boundary, with the journal up to date.
func (p *protection) interrupted(ctx context.Context, where string) error {
	if ctx.Err() == nil {
		return nil
	}
	return fmt.Errorf("protect %s: %w %s; the journal holds what this run made: rerun to continue, or pdmcp protect --abandon %s to remove it",
		p.o.DocumentID, ErrInterrupted, where, p.o.DocumentID)
}

// alreadyProtected answers for a document the manifest already holds: the
// same source again is done (and a run killed after the manifest was saved
// finishes here); anything else under that id is refused.
func (p *protection) alreadyProtected(ctx context.Context, d grant.Document) (*ProtectSummary, error) {
	if !d.IsCompound() || d.SHA256 != p.srcSum {
		return nil, fmt.Errorf("protect: %w: %q; choose another --document-id", ErrAlreadyProtected, p.o.DocumentID)
	}
	p.summary.AlreadyDone = true
	for _, s := range p.split.Sections {
		p.summary.Rows = append(p.summary.Rows, ProtectRow{FragmentID: s.ID, Label: s.Label, DataType: s.DataType, Bytes: len(s.Text), Key: "reused"})
	}
	if p.run != nil && p.run.State != "done" {
		if err := p.finish(ctx); err != nil {
			return nil, err
		}
	}
	return p.summary, nil
}

// startRun continues the journal's unfinished run of this document, if it
// is of the same source and owner, or starts one.
func (p *protection) startRun() error {
	run := p.run
	if run != nil && run.SourceSHA256 != p.srcSum {
		return fmt.Errorf("protect: the journal holds an unfinished protect of %q from another source (sha256 %s…); protect this source under another --document-id", p.o.DocumentID, run.SourceSHA256[:12])
	}
	if run != nil && run.Owner != p.owner {
		return fmt.Errorf("protect: the unfinished protect of %q was started as owner %q; rerun it with that owner", p.o.DocumentID, run.Owner)
	}
	if run == nil {
		p.run = &protectRun{SourceSHA256: p.srcSum, Owner: p.owner, State: "encrypting"}
		p.j.Documents[p.o.DocumentID] = p.run
	}
	return nil
}

// chooseKeys settles which key each data type uses: the manifest's, then
// --key, then one an earlier run created; a type with none gets one from
// its first section.
func (p *protection) chooseKeys() error {
	p.keys, p.how = map[string]string{}, map[string]string{}
	for dt, k := range p.o.Keys {
		if have := p.m.CompoundKeys[dt]; have != "" && have != k {
			return fmt.Errorf("protect: --key %s: the manifest's compoundKeys already names another key for %s; one key per data type", dt, dt)
		}
		p.keys[dt], p.how[dt] = k, "named"
	}
	for dt, k := range p.m.CompoundKeys {
		p.keys[dt], p.how[dt] = k, "reused"
	}
	for dt, k := range p.j.createdKeys() {
		if _, ok := p.keys[dt]; !ok {
			p.keys[dt], p.how[dt] = k, "created"
		}
	}
	return nil
}

// settleLost settles lost attempts before anything is sent. The lock is
// held, so an attempt still "sent" belongs to a run that died before its
// answer: it is lost. A lost key-creating attempt, in any document's run,
// may have made its data type's key: while that type has no key this run
// can name, none is created for it until the operator says --abandon-lost.
func (p *protection) settleLost() error {
	needKey := map[string]bool{}
	for _, s := range p.split.Sections {
		if p.keys[s.DataType] == "" {
			needKey[s.DataType] = true
		}
	}
	for _, id := range slices.Sorted(maps.Keys(p.j.Documents)) {
		for _, a := range p.j.Documents[id].Attempts {
			if a.State == attemptSent {
				a.State = attemptLost
			}
			if a.State != attemptLost || !a.CreatesKey || !needKey[a.DataType] {
				// Lost under an existing key (or one now named): it created
				// nothing, and its ciphertext was never stored.
				continue
			}
			if !p.o.AbandonLost {
				if err := p.j.save(); err != nil {
					return err
				}
				return lostKeyError(id, a)
			}
			a.State = attemptAbandoned
		}
	}
	return p.j.save()
}

// ownerSession mints the owner's session on every key the run names.
func (p *protection) ownerSession(ctx context.Context) (*gateway.Session, error) {
	c, err := gateway.New(clientConfig(p.o.Config, p.o.Logger))
	if err != nil {
		return nil, err
	}
	objects := slices.Sorted(maps.Values(p.keys))
	objects = slices.Compact(objects)
	sess, err := c.Mint(ctx, gateway.MintRequest{ActingAs: p.owner, Objects: objects, TTL: api.MaxScopedTTL})
	if err != nil {
		return nil, fmt.Errorf("protect: owner session for %s: %w", p.owner, err)
	}
	return sess, nil
}

// encryptSections encrypts every section an earlier run has not, one
// journalled attempt each, and returns each section's encrypted attempt.
func (p *protection) encryptSections(ctx context.Context, sess *gateway.Session) (map[string]*protectEntry, error) {
	results := map[string]*protectEntry{}
	for _, s := range p.split.Sections {
		if a := p.run.latest(s.ID); a != nil && a.State == attemptEncrypted {
			results[s.ID] = a
			fmt.Fprintf(p.progress, "protect %s: %s (%s): encrypted in an earlier run\n", p.o.DocumentID, s.ID, s.DataType)
			continue
		}
		if err := p.interrupted(ctx, "before fragment "+s.ID+" was sent"); err != nil {
			return nil, err
		}
		a, err := p.encryptSection(ctx, sess, s)
		if err != nil {
			return nil, err
		}
		results[s.ID] = a
		if err := p.interrupted(ctx, "after fragment "+s.ID+"'s encrypt was answered and recorded"); err != nil {
			return nil, err
		}
	}
	return results, nil
}

// encryptSection journals one attempt as sent, encrypts the section, and
// journals the answer (or, with none it can trust, the attempt as lost).
// The first section of a data type with no key creates that key.
func (p *protection) encryptSection(ctx context.Context, sess *gateway.Session, s compound.Section) (*protectEntry, error) {
	iv := make([]byte, api.IVBytes)
	if _, err := rand.Read(iv); err != nil {
		return nil, err
	}
	a := &protectEntry{Fragment: s.ID, DataType: s.DataType, CreatesKey: p.keys[s.DataType] == "", State: attemptSent,
		TTag: p.keys[s.DataType], IV: base64.StdEncoding.EncodeToString(iv), At: time.Now().UTC()}
	p.run.Attempts = append(p.run.Attempts, a)
	if err := p.j.save(); err != nil {
		return nil, err
	}
	p.crash(crashpoint.ProtectSent)
	// A stop (Ctrl-C) does not cut the encrypt in flight: its answer may
	// name a key just made, so it is awaited and recorded, bounded by the
	// client's per-request timeout (the Gateway timeout). The caller then
	// stops, saying it was interrupted.
	enc, err := sess.Encrypt(context.WithoutCancel(ctx), gateway.EncryptInput{TTag: p.keys[s.DataType], IV: iv, Plaintext: s.Text})
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
		if serr := p.j.save(); serr != nil {
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
	if err := p.j.save(); err != nil {
		return nil, err
	}
	p.crash(crashpoint.ProtectEncrypted)
	verb := "under the existing key"
	if p.keys[s.DataType] == "" {
		p.keys[s.DataType], p.how[s.DataType] = enc.TTag, "created"
		verb = "under a new key"
	}
	fmt.Fprintf(p.progress, "protect %s: %s (%s, %d bytes): encrypted %s\n", p.o.DocumentID, s.ID, s.DataType, len(s.Text), verb)
	return a, nil
}

// writeFiles writes each section's ciphertext and the skeleton in
// documents/<id>/ (nothing refers to them until the manifest does), fills
// the summary's rows, and returns the manifest's entry for the document.
func (p *protection) writeFiles(results map[string]*protectEntry) (grant.Document, error) {
	rel := "documents/" + p.o.DocumentID
	dir, err := p.m.Resolve(rel)
	if err != nil {
		return grant.Document{}, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return grant.Document{}, fmt.Errorf("protect: %w", err)
	}
	doc := grant.Document{Kind: grant.KindCompound, Label: p.o.Label, Category: p.o.Category, Approved: true,
		ContentType: contentType(p.split.Form), Version: 1, SHA256: p.srcSum, Size: int64(len(p.src))}
	if doc.Label == "" {
		doc.Label = filepath.Base(p.o.SourcePath)
	}
	for _, s := range p.split.Sections {
		a := results[s.ID]
		ct, err := base64.StdEncoding.DecodeString(a.Ciphertext)
		if err != nil {
			return grant.Document{}, fmt.Errorf("protect journal: fragment %s: %w", s.ID, err)
		}
		if a.TTag != p.keys[s.DataType] {
			return grant.Document{}, fmt.Errorf("protect: fragment %s was encrypted under another key than %s's; start over with another --document-id", s.ID, s.DataType)
		}
		name := s.ID + ".v1.bin"
		if err := grant.WriteFileAtomic(filepath.Join(dir, name), ct); err != nil {
			return grant.Document{}, fmt.Errorf("protect: %w", err)
		}
		sum := sha256.Sum256(s.Text)
		doc.Fragments = append(doc.Fragments, grant.Fragment{ID: s.ID, Label: s.Label, DataType: s.DataType, TemplateID: s.TemplateRoot,
			Path: rel + "/" + name, IV: a.IV, SHA256: hex.EncodeToString(sum[:]), Size: int64(len(s.Text)), Version: 1})
		p.summary.Rows = append(p.summary.Rows, p.row(s, a))
	}
	skName := "skeleton" + skeletonExt(p.split.Form)
	if err := grant.WriteFileAtomic(filepath.Join(dir, skName), p.split.Skeleton); err != nil {
		return grant.Document{}, fmt.Errorf("protect: %w", err)
	}
	skSum := sha256.Sum256(p.split.Skeleton)
	doc.Skeleton, doc.SkeletonSHA256 = rel+"/"+skName, hex.EncodeToString(skSum[:])
	return doc, nil
}

// row is section s's line in the summary: "created" on the section whose
// encrypt made its type's key; every other section of that type reuses it.
func (p *protection) row(s compound.Section, a *protectEntry) ProtectRow {
	row := ProtectRow{FragmentID: s.ID, Label: s.Label, DataType: s.DataType, Bytes: len(s.Text), Key: p.how[s.DataType]}
	switch {
	case a.CreatesKey:
		row.Key = "created"
		p.summary.CreatedKeys++
	case p.how[s.DataType] == "created":
		row.Key = "reused"
	}
	return row
}

// addToManifest adds the document and its data types' keys to the
// manifest, changed under its lock on the file as it is now, so whatever
// another writer saved since this run read it is kept.
func (p *protection) addToManifest(ctx context.Context, doc grant.Document) error {
	announceManifestWait(p.o.ManifestPath, p.o.DocumentID, p.progress)
	_, err := grant.UpdateManifest(ctx, p.o.ManifestPath, func(next *grant.Manifest) error {
		if _, ok := next.Documents[p.o.DocumentID]; ok {
			return fmt.Errorf("%w: %q was added while this ran", ErrAlreadyProtected, p.o.DocumentID)
		}
		if next.Documents == nil {
			next.Documents = map[string]grant.Document{}
		}
		if next.CompoundKeys == nil {
			next.CompoundKeys = map[string]string{}
		}
		for _, dt := range p.split.DataTypesUsed() {
			if have := next.CompoundKeys[dt]; have != "" && have != p.keys[dt] {
				return fmt.Errorf("compoundKeys[%s] changed while this ran; start over", dt)
			}
			next.CompoundKeys[dt] = p.keys[dt]
		}
		next.Documents[p.o.DocumentID] = doc
		// A manifest from before task identities gets one: the journal
		// takes it on its next use, and a journal of another task is
		// refused from then on.
		if next.Task == "" {
			task, err := grant.NewTaskID()
			if err != nil {
				return err
			}
			next.Task = task
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("protect: %w", err)
	}
	return nil
}

// finish records the run's keys in the seed record and marks the run done
// in the journal.
func (p *protection) finish(ctx context.Context) error {
	if err := finishRecord(ctx, p.o.RecordPath, p.run); err != nil {
		return err
	}
	p.run.State = "done"
	return p.j.save()
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
