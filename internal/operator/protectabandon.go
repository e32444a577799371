package operator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/server/compound"
)

// AbandonOptions are `pdmcp protect --abandon`'s inputs.
type AbandonOptions struct {
	Config       *gateway.ServiceConfig
	ManifestPath string
	DocumentID   string
	// RecordPath, when set, is the seed record the run's keys may have
	// been added to: the keys removed are taken out of it.
	RecordPath string
	// AbandonLost accepts that a key-creating encrypt of the run whose
	// answer was lost may have left a key nobody can name.
	AbandonLost bool
	// Progress gets one line per step (stderr).
	Progress io.Writer
	// Logger gets the Gateway requests; nil discards.
	Logger *slog.Logger
}

// AbandonSummary is what AbandonProtect removed.
type AbandonSummary struct {
	DocumentID   string
	KeysRemoved  int
	KeysKept     int // created by the run, but another document or run uses them
	FilesRemoved int
	LostAccepted int // lost key-creating attempts the operator accepted
}

// WriteText prints the summary.
func (s *AbandonSummary) WriteText(w io.Writer) {
	fmt.Fprintf(w, "%s: %d keys removed, %d kept (in use elsewhere), %d files removed", s.DocumentID, s.KeysRemoved, s.KeysKept, s.FilesRemoved)
	if s.LostAccepted > 0 {
		fmt.Fprintf(w, ", %d lost key-creating encrypts accepted as possibly orphaned", s.LostAccepted)
	}
	fmt.Fprintln(w, "\nPROTECT ABANDON: OK")
}

// ErrNoUnfinishedRun: the protect journal holds no unfinished protect of
// the document id AbandonProtect was given.
var ErrNoUnfinishedRun = errors.New("no unfinished protect of that document id")

// AbandonProtect removes what an unfinished protect of o.DocumentID made,
// as its journal records it: the keys its encrypts created (removed at the
// Gateway as the run's owner, each read back absent), the files it wrote
// in documents/<id>/ (each checked gone), and last its journal entry (read
// back absent), so the id can be protected again from any source.
//
// It never touches another document's: a key the manifest names, or that
// another run of the journal used, is kept and counted as kept. A document
// the manifest lists is refused (it is protected, not unfinished). While
// anything could not be removed the journal entry stays, so a rerun
// retries only what is left.
func AbandonProtect(ctx context.Context, o AbandonOptions) (*AbandonSummary, error) {
	if o.Config == nil || o.ManifestPath == "" || o.DocumentID == "" {
		return nil, errors.New("protect --abandon: --config, --manifest and the document id are required")
	}
	progress := o.Progress
	if progress == nil {
		progress = io.Discard
	}
	m, err := grant.LoadManifest(o.ManifestPath)
	if err != nil {
		return nil, fmt.Errorf("protect --abandon: %w", err)
	}
	unlock, err := lockProtect(ctx, filepath.Join(m.Dir(), ProtectJournalName+".lock"), o.DocumentID, progress)
	if err != nil {
		return nil, err
	}
	defer unlock()
	// Read again under the lock, as Protect does.
	if m, err = grant.LoadManifest(o.ManifestPath); err != nil {
		return nil, fmt.Errorf("protect --abandon: %w", err)
	}
	j, err := loadProtectJournal(filepath.Join(m.Dir(), ProtectJournalName))
	if err != nil {
		return nil, err
	}
	if _, ok := m.Documents[o.DocumentID]; ok {
		return nil, fmt.Errorf("protect --abandon: %w: %q is protected, not unfinished; --abandon removes only a run the manifest does not list", ErrAlreadyProtected, o.DocumentID)
	}
	run := j.Documents[o.DocumentID]
	if run == nil {
		return nil, fmt.Errorf("protect --abandon: %w: %q is not in %s", ErrNoUnfinishedRun, o.DocumentID, ProtectJournalName)
	}
	sum := &AbandonSummary{DocumentID: o.DocumentID}

	// A lost key-creating attempt may have made a key nobody can name.
	// Dropping it from the journal drops the guard that stops another
	// key being created for its data type, so the operator says so.
	for _, a := range run.Attempts {
		if a.CreatesKey && (a.State == attemptSent || a.State == attemptLost) {
			if !o.AbandonLost {
				return nil, fmt.Errorf("protect --abandon: %w: fragment %s (data type %s) was sent to create a key and no answer it can trust came back: the key server may hold a key this program cannot name or remove. "+
					"Add --abandon-lost to accept that and abandon the run", ErrAnswerLost, a.Fragment, a.DataType)
			}
			sum.LostAccepted++
		}
	}

	remove, kept := abandonedKeys(m, j, o.DocumentID, run)
	sum.KeysKept = len(kept)
	var problems, removed []string
	if len(remove) > 0 {
		removed, problems = removeKeys(ctx, o.Config, o.Logger, run.Owner, remove)
		sum.KeysRemoved = len(removed)
	}
	problems = append(problems, removeRunFiles(m, o.DocumentID, run, sum)...)
	if o.RecordPath != "" && len(removed) > 0 {
		// Under the record's lock on the record as it is now; a key still
		// at the Gateway after a failed removal stays listed.
		if _, err := grant.UpdateSeedRecord(context.WithoutCancel(ctx), o.RecordPath, func(r *grant.SeedRecord) error {
			r.Keys = slices.DeleteFunc(r.Keys, func(k string) bool { return slices.Contains(removed, k) })
			return nil
		}); err != nil {
			problems = append(problems, fmt.Sprintf("the seed record: %v", err))
		}
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("protect --abandon %s: %s; the journal entry is kept: rerun --abandon to retry", o.DocumentID, strings.Join(problems, "; "))
	}
	delete(j.Documents, o.DocumentID)
	if err := j.save(); err != nil {
		return nil, err
	}
	back, err := loadProtectJournal(j.path)
	if err != nil {
		return nil, err
	}
	if _, ok := back.Documents[o.DocumentID]; ok {
		return nil, fmt.Errorf("protect --abandon %s: the journal entry still reads back", o.DocumentID)
	}
	fmt.Fprintf(progress, "protect --abandon %s: journal entry removed\n", o.DocumentID)
	return sum, nil
}

// abandonedKeys splits the keys run created into those to remove and those
// kept because the manifest names them or another run used them.
func abandonedKeys(m *grant.Manifest, j *protectJournal, docID string, run *protectRun) (remove, kept []string) {
	inUse := map[string]bool{}
	for _, k := range m.CompoundKeys {
		inUse[k] = true
	}
	for _, d := range m.Documents {
		inUse[d.TTag] = true
	}
	for _, d := range m.Destinations {
		inUse[d.TTag] = true
	}
	for id, other := range j.Documents {
		if id == docID {
			continue
		}
		for _, a := range other.Attempts {
			inUse[a.TTag] = true
		}
	}
	for _, a := range run.Attempts {
		if !a.CreatesKey || a.State != attemptEncrypted || a.TTag == "" {
			continue
		}
		switch {
		case inUse[a.TTag]:
			if !slices.Contains(kept, a.TTag) {
				kept = append(kept, a.TTag)
			}
		case !slices.Contains(remove, a.TTag):
			remove = append(remove, a.TTag)
		}
	}
	return remove, kept
}

// removeKeys removes keys at the Gateway as owner, reading each back
// absent. It returns the keys removed and what it could not remove
// (naming no t-Tag in full).
func removeKeys(ctx context.Context, cfg *gateway.ServiceConfig, l *slog.Logger, owner string, keys []string) (removed, problems []string) {
	c, err := gateway.New(clientConfig(cfg, l))
	if err != nil {
		return nil, []string{err.Error()}
	}
	sess, err := c.Mint(ctx, gateway.MintRequest{ActingAs: owner, Objects: keys, TTL: api.MaxScopedTTL})
	if err != nil {
		return nil, []string{fmt.Sprintf("owner session for %s: %v", owner, err)}
	}
	defer sess.Revoke(context.WithoutCancel(ctx))
	for _, k := range keys {
		if err := sess.RemoveKey(ctx, k); err != nil && !errors.Is(err, &api.Error{Code: api.CodeKeyNotFound}) {
			problems = append(problems, fmt.Sprintf("key %s…: %v", short(k), err))
			continue
		}
		if _, err := sess.ACLGet(ctx, k); !errors.Is(err, &api.Error{Code: api.CodeKeyNotFound}) {
			problems = append(problems, fmt.Sprintf("key %s… still reads back (%v)", short(k), err))
			continue
		}
		removed = append(removed, k)
	}
	return removed, problems
}

// removeRunFiles removes the files protect writes for docID (each
// fragment's ciphertext and the skeleton in documents/<id>/), then the
// folder if nothing else is in it, and checks each gone.
func removeRunFiles(m *grant.Manifest, docID string, run *protectRun, sum *AbandonSummary) []string {
	dir, err := m.Resolve("documents/" + docID)
	if err != nil {
		return []string{err.Error()}
	}
	names := []string{"skeleton" + skeletonExt(compound.FormHL7), "skeleton" + skeletonExt(compound.FormCCDA)}
	for _, a := range run.Attempts {
		names = append(names, a.Fragment+".v1.bin")
	}
	slices.Sort(names)
	names = slices.Compact(names)
	var problems []string
	for _, n := range names {
		if n != filepath.Base(n) || n == ".." {
			// A journal is this program's, but a name that leaves the
			// folder is never followed.
			problems = append(problems, fmt.Sprintf("the journal names a fragment file %q outside %s", n, dir))
			continue
		}
		p := filepath.Join(dir, n)
		err := os.Remove(p)
		switch {
		case err == nil:
			sum.FilesRemoved++
		case !errors.Is(err, fs.ErrNotExist):
			problems = append(problems, err.Error())
			continue
		}
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			problems = append(problems, fmt.Sprintf("%s is still there", p))
		}
	}
	// Only an empty folder goes: anything else in it is not protect's.
	if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		problems = append(problems, fmt.Sprintf("%s holds files protect did not write; move them away (%v)", dir, err))
	}
	return problems
}
