// Package check is `pdmcp check`: it reads a task's manifest, its record
// (the journal) and its folder (the version files and their sidecars), says
// where they disagree, and with Repair does what is safe to put them back in
// agreement.
//
// What it compares:
//   - the journal: missing, empty, damaged, or of another task, while the
//     folder holds saved versions;
//   - every version of the record has its file, with the ciphertext's
//     sha256 the record holds (where it holds one);
//   - every version file in results/ and beside a compound document's
//     sections is in the record or the manifest, and every sidecar's
//     version is in the record;
//   - no leftovers of an unfinished write: temporary files, sidecars whose
//     file is missing or holds other bytes;
//   - no hand-off row open past its window;
//   - with a KeyChecker, every key the record names still exists.
//
// Repair does only what loses nothing and cannot race a running server: it
// takes every save's cross-process lock (the writers' own, beside the
// journal), so no save is between its steps while it works; it puts a
// damaged journal aside (never deletes it), creates a missing one bound to
// the manifest's task, puts the sidecars' versions the record lacks back
// (server/sidecar.Rebuild), and removes temporary files and sidecars that
// describe no file. A version an unfinished save holds placed is that
// save's to finish and is left alone. Everything else (a changed or
// missing version file, an unknown file, another task's journal or
// versions, an open hand-off, a gone key) is the operator's, and the
// finding says what to do.
package check

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/filelock"
	"github.com/pdmcp/pdmcp/server/journal"
	"github.com/pdmcp/pdmcp/server/record"
	"github.com/pdmcp/pdmcp/server/sidecar"
)

// Kinds of a Finding. They are part of `pdmcp check --json`'s stable
// shape: new kinds may be added, these keep their meaning.
const (
	// The record.
	KindJournalMissing = "journal-missing" // saved versions, no journal
	KindJournalEmpty   = "journal-empty"   // saved versions, a journal that records no save
	KindJournalDamaged = "journal-damaged" // a journal SQLite cannot read
	KindOtherTask      = "other-task"      // a journal, or a version's sidecar, of another task
	// The versions.
	KindVersionMissing = "version-missing" // a recorded version without its file
	KindVersionChanged = "version-changed" // a recorded version's file holds other bytes
	KindUnrecorded     = "unrecorded"      // a version file with its sidecar that the record lacks
	KindRecordDiffers  = "record-differs"  // a sidecar and the record name different versions at one path or number
	KindUnknownFile    = "unknown-file"    // a version file with neither sidecar nor record
	// Leftovers of an unfinished write.
	KindTemporary         = "temporary"          // a save's or a sidecar's temporary file
	KindSidecarLeftover   = "sidecar-leftover"   // a sidecar whose version file does not exist
	KindSidecarMismatch   = "sidecar-mismatch"   // a sidecar whose version file holds other bytes
	KindSidecarUnreadable = "sidecar-unreadable" // a file named like a sidecar that does not read as one
	// Hand-offs and keys.
	KindHandOffOverdue = "handoff-overdue" // an access entry open past its window
	KindKeyGone        = "key-gone"        // a key the record names no longer exists at the Gateway
	// Notes, not findings: in order, but worth saying.
	KindSaveUnfinished = "save-unfinished" // a save between its placement and its commit
)

// Finding is one disagreement. Path is '/'-separated, relative to the
// task folder (the journal's is its own file name). Detail says what is
// wrong and what to do; it never holds a t-Tag in full, an IV, a token or
// any document text.
type Finding struct {
	Kind       string `json:"kind"`
	Path       string `json:"path"`
	Detail     string `json:"detail"`
	Repairable bool   `json:"repairable"`
}

// Action is one thing Repair did.
type Action struct {
	Kind   string `json:"kind"`
	Path   string `json:"path"`
	Detail string `json:"detail"`
}

// Report is a check's answer: the findings after any repair, the notes,
// and what the repair did. OK is true when there are no findings.
type Report struct {
	Manifest string    `json:"manifest"`
	Journal  string    `json:"journal"`
	OK       bool      `json:"ok"`
	Findings []Finding `json:"findings"`
	Notes    []Finding `json:"notes"`
	Repaired []Action  `json:"repaired"`
}

// KeyChecker answers whether a key still exists at the key server.
type KeyChecker interface {
	KeyExists(ctx context.Context, ttag string) (bool, error)
}

// Options are a check's inputs.
type Options struct {
	ManifestPath string
	// JournalPath is the journal; "" for the one beside the manifest. A
	// path given here that does not exist is an error (ErrNoJournal), not
	// a missing journal: it is more likely mistyped than lost.
	JournalPath string
	Repair      bool
	// Keys, when set, is asked about every key the record names.
	Keys KeyChecker
	// Now is the clock hand-off windows are read against; nil for
	// time.Now.
	Now func() time.Time
	// LockWait bounds the wait for the save locks Repair takes; 0 for
	// DefaultLockWait.
	LockWait time.Duration
}

// DefaultLockWait is how long Repair waits for saves in progress to let go
// of their locks. A save holds one for a Gateway encrypt and a few file
// steps; 30 s is three of a server's own bounded waits.
const DefaultLockWait = 30 * time.Second

// ErrNoJournal: an explicit journal path names no file (the record's
// readers' own error, so every command says it alike).
var ErrNoJournal = record.ErrNoJournal

// ErrLocksBusy: Repair could not take every save's lock in time.
var ErrLocksBusy = errors.New("a save held its lock past the wait; nothing was repaired")

// versionFile is a saved version's file name: <id>.v<N>.bin.
var versionFile = regexp.MustCompile(`^(.+)\.v([1-9][0-9]*)\.bin$`)

// Run checks, and with o.Repair repairs, the task o names. The error is
// for what stops a check (an unreadable manifest or folder, a journal path
// that is not there, a lock wait that ran out); disagreements are findings.
func Run(ctx context.Context, o Options) (*Report, error) {
	manifestPath, err := grant.RealPath(o.ManifestPath)
	if err != nil {
		return nil, fmt.Errorf("check: manifest %s: %w", o.ManifestPath, err)
	}
	m, err := grant.LoadManifest(manifestPath)
	if err != nil {
		return nil, fmt.Errorf("check: %w", err)
	}
	jpath := o.JournalPath
	if jpath == "" {
		jpath = journal.DefaultPath(manifestPath)
	} else if _, err := os.Stat(jpath); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("check: --journal %s: %w (name the journal that exists, or leave --journal out for the one beside the manifest)", jpath, ErrNoJournal)
	}
	if jpath, err = realPath(jpath); err != nil {
		return nil, fmt.Errorf("check: journal %s: %w", o.JournalPath, err)
	}
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	t := &task{m: m, dir: m.Dir(), manifestPath: manifestPath, jpath: jpath, keys: o.Keys, now: now}
	if t.dir == "" {
		t.dir = filepath.Dir(manifestPath)
	}
	rep := &Report{Manifest: manifestPath, Journal: jpath, Findings: []Finding{}, Notes: []Finding{}, Repaired: []Action{}}
	if o.Repair {
		release, err := lockSaves(ctx, jpath, cmpOr(o.LockWait, DefaultLockWait))
		if err != nil {
			return nil, err
		}
		defer release()
		t.locked = true
		st, err := t.look(ctx)
		if err != nil {
			return nil, err
		}
		rep.Repaired, err = t.repair(ctx, st)
		if err != nil {
			return nil, err
		}
	}
	st, err := t.look(ctx)
	if err != nil {
		return nil, err
	}
	rep.Findings, rep.Notes = st.findings, st.notes
	rep.OK = len(rep.Findings) == 0
	return rep, nil
}

func cmpOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// realPath is path absolute with its links resolved; a path that does not
// exist yet is only made absolute.
func realPath(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	if resolved, err := filepath.EvalSymlinks(abs); err == nil {
		return resolved, nil
	}
	return abs, nil
}

// task is one check's inputs, resolved.
type task struct {
	m            *grant.Manifest
	dir          string
	manifestPath string
	jpath        string
	keys         KeyChecker
	now          func() time.Time
	// locked: this check holds every save's lock (Repair), so no save is
	// in progress.
	locked bool
}

// saveInProgress reports whether the save temporary file rel
// (.pdmcp-save-<hex>.tmp) belongs to a save that holds its cross-process
// lock now: the lock file is named by the first byte of the digest the
// temporary name is made of (server/savepipe.go). A check without
// --repair takes no lock, so it tells a save being written from one that
// stopped this way.
func (t *task) saveInProgress(rel string) bool {
	name := path.Base(rel)
	hexPart, ok := strings.CutPrefix(name, ".pdmcp-save-")
	if !ok || len(hexPart) < 2 {
		return false
	}
	if _, err := hex.DecodeString(hexPart[:2]); err != nil {
		return false
	}
	l, err := filelock.TryAcquire(filepath.Join(t.jpath+".locks", "save-"+hexPart[:2]+".lock"))
	if errors.Is(err, filelock.ErrLocked) {
		return true
	}
	if err == nil {
		_ = l.Release()
	}
	return false
}

// state is what look found: the findings and notes, and what repair needs.
type state struct {
	findings, notes []Finding
	journal         string // "ok", "missing", "empty", "damaged", "other"
	damaged         error
	// rebuild: the sidecars' versions of this task the record lacks.
	rebuild []sidecar.Version
	// remove: leftovers repair may remove, '/'-separated.
	remove []Finding
}

func (st *state) add(kind, p string, repairable bool, format string, args ...any) {
	st.findings = append(st.findings, Finding{Kind: kind, Path: p, Detail: fmt.Sprintf(format, args...), Repairable: repairable})
}

// look reads manifest, journal and folder and compares them.
func (t *task) look(ctx context.Context) (*state, error) {
	st := &state{journal: "ok"}
	scanned, problems, err := sidecar.Scan(t.dir)
	if err != nil {
		return nil, fmt.Errorf("check: %w", err)
	}
	manifestNamed := map[string]bool{}
	// Where saves put versions: results/ (any destination, in the
	// manifest or not), and the folder of each compound document's
	// sections (those sections' ids).
	folders := map[string]map[string]bool{"results": nil}
	for _, d := range t.m.Destinations {
		for _, v := range d.Versions {
			manifestNamed[v.Path] = true
		}
	}
	for _, d := range t.m.Documents {
		if d.Path != "" {
			manifestNamed[d.Path] = true
		}
		for _, f := range d.Fragments {
			manifestNamed[f.Path] = true
			folder := path.Dir(f.Path)
			if folder == "results" {
				continue
			}
			if folders[folder] == nil {
				folders[folder] = map[string]bool{}
			}
			folders[folder][f.ID] = true
		}
	}
	files, err := versionFiles(t.dir, folders)
	if err != nil {
		return nil, err
	}
	saved := 0 // version files the manifest does not name: what only a record explains
	for _, f := range files {
		if !manifestNamed[f] {
			saved++
		}
	}

	jname := filepath.Base(t.jpath)
	var (
		recorded []journal.Version
		placed   []string
		j        *journal.Journal
	)
	if _, err := os.Stat(t.jpath); errors.Is(err, fs.ErrNotExist) {
		st.journal = "missing"
	} else if j, err = journal.Open(ctx, t.jpath); err != nil {
		if !journal.IsDamaged(err) {
			return nil, fmt.Errorf("check: %w", err)
		}
		st.journal, st.damaged = "damaged", err
	} else {
		defer j.Close()
		if err := j.QuickCheck(ctx); err != nil {
			if !journal.IsDamaged(err) {
				return nil, fmt.Errorf("check: %w", err)
			}
			st.journal, st.damaged = "damaged", err
		}
	}
	if st.journal == "ok" {
		if err := j.CheckTask(ctx, t.m.Task); err != nil {
			var te *journal.TaskError
			if !errors.As(err, &te) {
				return nil, fmt.Errorf("check: %w", err)
			}
			st.journal = "other"
			st.add(KindOtherTask, jname, false,
				"the journal belongs to task %q, the manifest is task %q: its versions are not this task's; move the journal (with its -wal and -shm files) away, or point --manifest at its own task's manifest", te.Journal, te.Want)
		}
	}
	if st.journal == "ok" {
		if recorded, err = j.Versions(ctx); err != nil {
			return nil, fmt.Errorf("check: %w", err)
		}
		if placed, err = j.UnfinishedPlacements(ctx); err != nil {
			return nil, fmt.Errorf("check: %w", err)
		}
		// A journal with no version beside saved version files (other
		// than those a save in progress holds) cannot vouch for them:
		// new, or not the one they were saved with.
		if len(recorded) == 0 && saved > len(placed) {
			st.journal = "empty"
		}
	}
	repairable := len(scanned) > 0
	switch st.journal {
	case "missing":
		if saved > 0 || len(scanned) > 0 {
			st.add(KindJournalMissing, jname, repairable,
				"there is no journal, yet %d saved version files are in the folder: only the record says which version each is and what opens it; restore the journal from a backup, or `pdmcp check --repair` rebuilds it from the sidecars", saved)
		}
	case "empty":
		st.add(KindJournalEmpty, jname, repairable,
			"the journal records no save, yet %d saved version files are in the folder; restore the journal from a backup, or `pdmcp check --repair` rebuilds the record from the sidecars", saved)
	case "damaged":
		st.add(KindJournalDamaged, jname, true,
			"SQLite cannot read the journal (%v); restore it from a backup, or `pdmcp check --repair` puts it aside (kept, never deleted) and rebuilds the record from the sidecars: hand-offs and file encryptions it held are then only in the copy put aside", st.damaged)
	}

	t.compare(st, recorded, placed, scanned, problems, files, manifestNamed)
	if j != nil && st.journal == "ok" {
		if err := t.handOffs(ctx, st, j); err != nil {
			return nil, err
		}
	}
	if t.keys != nil && st.journal == "ok" {
		if err := t.checkKeys(ctx, st, recorded); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// compare holds the record, the sidecars and the folder's files against
// each other.
func (t *task) compare(st *state, recorded []journal.Version, placed []string, scanned []sidecar.Version,
	problems []sidecar.Problem, files []string, manifestNamed map[string]bool) {
	byPath := map[string]journal.Version{}
	type slot struct {
		kind, target, fragment string
		version                int
	}
	slotOf := func(v journal.Version) slot {
		if v.Destination != "" {
			return slot{"result", v.Destination, "", v.Version}
		}
		return slot{"fragment", v.DocumentID, v.FragmentID, v.Version}
	}
	bySlot := map[slot]journal.Version{}
	for _, v := range recorded {
		byPath[v.Path] = v
		bySlot[slotOf(v)] = v
	}
	unfinished := map[string]bool{}
	for _, p := range placed {
		unfinished[p] = true
	}
	for _, v := range recorded {
		sum, err := fileSHA256(filepath.Join(t.dir, filepath.FromSlash(v.Path)))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			st.add(KindVersionMissing, v.Path, false,
				"version %d is in the record but its file is not in the folder; restore the file from a backup (results/ and documents/ with their .json sidecars)", v.Version)
		case err != nil:
			st.add(KindVersionMissing, v.Path, false, "version %d's file cannot be read: %v", v.Version, err)
		case v.CiphertextSHA256 != "" && sum != v.CiphertextSHA256:
			st.add(KindVersionChanged, v.Path, false,
				"version %d's file holds other bytes than the ones saved (its sha256 differs from the record's); restore the file from a backup: the record's IV opens only the saved bytes", v.Version)
		}
	}
	sidecarOf := map[string]bool{}
	for _, sv := range scanned {
		v := sv.Record
		sidecarOf[v.Path] = true
		if r, ok := byPath[v.Path]; ok {
			if r.IV != v.IV || r.Version != v.Version {
				st.add(KindRecordDiffers, v.Path, false,
					"the record and the file's sidecar describe different versions at this path; restore the journal or the file from one backup")
				continue
			}
			// Recorded already: passed to the rebuild all the same (it
			// skips it), as a section's document version is counted
			// over every save of its document's generation.
			st.rebuild = append(st.rebuild, sv)
			continue
		}
		if t.m.Task != "" && sv.Task != "" && sv.Task != t.m.Task {
			st.add(KindOtherTask, sidecar.PathOf(v.Path), false,
				"the version's sidecar is of task %q, the manifest is task %q; move the file and its sidecar out of the folder", sv.Task, t.m.Task)
			continue
		}
		if unfinished[v.Path] {
			st.notes = append(st.notes, Finding{Kind: KindSaveUnfinished, Path: v.Path,
				Detail: "a save placed this version and has not committed it yet (in progress, or stopped): its retry with the same idempotency key finishes it"})
			continue
		}
		if r, ok := bySlot[slotOf(v)]; ok {
			st.add(KindRecordDiffers, v.Path, false,
				"the record holds version %d at %s, the sidecar names this file for it; restore the journal or the files from one backup", r.Version, r.Path)
			continue
		}
		if st.journal == "ok" {
			st.add(KindUnrecorded, v.Path, true,
				"version %d's file and sidecar are in the folder but not in the record (a journal older than the folder); `pdmcp check --repair` puts it back in the record", v.Version)
		}
		if st.journal != "other" {
			st.rebuild = append(st.rebuild, sv)
		}
	}
	for _, f := range files {
		if manifestNamed[f] || sidecarOf[f] {
			continue
		}
		if _, ok := byPath[f]; ok {
			continue
		}
		if unfinished[f] {
			st.notes = append(st.notes, Finding{Kind: KindSaveUnfinished, Path: f,
				Detail: "a save placed this version and has not committed it yet: its retry with the same idempotency key finishes it"})
			continue
		}
		// A sidecar reported as a problem is said below; the file itself
		// is unknown to both record and manifest.
		st.add(KindUnknownFile, f, false,
			"a version file that neither the record nor the manifest names, with no valid sidecar; if it is this task's, restore its sidecar or the journal from a backup, else move it out of the folder")
	}
	for _, p := range problems {
		switch p.Kind {
		case sidecar.ProblemTemporary:
			if !t.locked && t.saveInProgress(p.Path) {
				st.notes = append(st.notes, Finding{Kind: KindSaveUnfinished, Path: p.Path,
					Detail: "the temporary file of a save a server is writing now (it holds the save's lock)"})
				continue
			}
			f := Finding{Kind: KindTemporary, Path: p.Path, Repairable: true,
				Detail: "the temporary file of a write that stopped before it finished; `pdmcp check --repair` removes it"}
			st.findings = append(st.findings, f)
			st.remove = append(st.remove, f)
		case sidecar.ProblemLeftover:
			versionPath := strings.TrimSuffix(p.Path, ".json") + ".bin"
			if unfinished[versionPath] {
				st.notes = append(st.notes, Finding{Kind: KindSaveUnfinished, Path: versionPath,
					Detail: "a save wrote this version's sidecar and has not placed its file yet (in progress, or stopped): its retry finishes it"})
				continue
			}
			f := Finding{Kind: KindSidecarLeftover, Path: p.Path, Repairable: st.journal != "other",
				Detail: p.Detail + "; it describes nothing, and `pdmcp check --repair` removes it"}
			st.findings = append(st.findings, f)
			if f.Repairable {
				st.remove = append(st.remove, f)
			}
		case sidecar.ProblemMismatch:
			versionPath := strings.TrimSuffix(p.Path, ".json") + ".bin"
			if _, ok := byPath[versionPath]; ok {
				continue // the record's own comparison of the file says it
			}
			st.add(KindSidecarMismatch, p.Path, false,
				"%s; if the file is this task's, restore it from a backup, else move the file and the sidecar out of the folder", p.Detail)
		default:
			st.add(KindSidecarUnreadable, p.Path, false, "%s; restore it from a backup, or move it out of the folder", p.Detail)
		}
	}
}

// handOffs reports access entries still open past their window.
func (t *task) handOffs(ctx context.Context, st *state, j *journal.Journal) error {
	open, err := j.AllOpenHandOffs(ctx)
	if err != nil {
		return fmt.Errorf("check: %w", err)
	}
	now := t.now()
	for _, h := range open {
		if h.EndTime.After(now) {
			continue
		}
		st.add(KindHandOffOverdue, filepath.Base(t.jpath), false,
			"hand-off %d of step %q gave READ on key %s to principal %s until %s and is still open: its server stopped before revoking it; run `pdmcp close-step --step %s`",
			h.ID, h.Step, short(h.TTag), h.PrincipalID, h.EndTime.UTC().Format(time.RFC3339), h.Step)
	}
	return nil
}

// checkKeys asks the key server about each key the record names.
func (t *task) checkKeys(ctx context.Context, st *state, recorded []journal.Version) error {
	under := map[string][]string{}
	for _, v := range recorded {
		if v.TTag != "" {
			under[v.TTag] = append(under[v.TTag], v.Path)
		}
	}
	for _, k := range sortedKeys(under) {
		ok, err := t.keys.KeyExists(ctx, k)
		if err != nil {
			return fmt.Errorf("check: ask the key server about key %s: %w", short(k), err)
		}
		if !ok {
			paths := under[k]
			st.add(KindKeyGone, paths[0], false,
				"key %s is gone at the key server (KEY_NOT_FOUND): the %d recorded versions under it (%s) can no longer be opened by anyone",
				short(k), len(paths), strings.Join(paths[:min(len(paths), 3)], ", "))
		}
	}
	return nil
}

func sortedKeys(m map[string][]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// short is a t-Tag's first 8 characters: enough to tell keys apart.
func short(ttag string) string {
	if len(ttag) > 8 {
		return ttag[:8] + "…"
	}
	return ttag
}

// versionFiles lists the non-empty <id>.v<N>.bin files in the folders
// saves write to ('/'-separated folder -> the ids saved there; nil for
// any), '/'-separated, sorted. An empty one holds no version (a ciphertext
// is never empty): a stopped save's, which the next steps over.
func versionFiles(dir string, folders map[string]map[string]bool) ([]string, error) {
	var out []string
	for folder, ids := range folders {
		entries, err := os.ReadDir(filepath.Join(dir, filepath.FromSlash(folder)))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("check: read %s: %w", folder, err)
		}
		for _, e := range entries {
			sub := versionFile.FindStringSubmatch(e.Name())
			if sub == nil || !e.Type().IsRegular() || (ids != nil && !ids[sub[1]]) {
				continue
			}
			if fi, err := e.Info(); err != nil || fi.Size() == 0 {
				continue
			}
			out = append(out, path.Join(folder, e.Name()))
		}
	}
	slices.Sort(out)
	return out, nil
}

func fileSHA256(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// relJoin is dir/rel for a '/'-separated rel that stays inside dir.
func relJoin(dir, rel string) (string, error) {
	if rel == "" || path.IsAbs(rel) || path.Clean(rel) != rel || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("check: %q is not a path inside the task folder", rel)
	}
	return filepath.Join(dir, filepath.FromSlash(rel)), nil
}
