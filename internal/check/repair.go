package check

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/pdmcp/pdmcp/internal/filelock"
	"github.com/pdmcp/pdmcp/server/journal"
	"github.com/pdmcp/pdmcp/server/sidecar"
)

// What Repair did, in Action.Kind.
const (
	ActionJournalSetAside = "journal-set-aside"
	ActionJournalCreated  = "journal-created"
	ActionRecordRebuilt   = "record-rebuilt"
	ActionRemoved         = "removed"
)

// saveLockFiles is how many cross-process save locks the server spreads
// its saves over (server/savepipe.go lockSave: one per first byte of a
// save's digest), in the folder beside the journal.
const saveLockFiles = 256

// lockSaves takes every save's cross-process lock, in one order, waiting
// at most wait for all: while they are held no save of any server on this
// journal is between its file steps (placing, writing its sidecar and
// file, committing), so nothing repair looks at is half made. A server's
// save that wants a lock meanwhile waits (bounded by its own wait) and
// goes on, or is refused with a retryable code. Where the system has no
// file lock, repair goes on without (as the servers do).
func lockSaves(ctx context.Context, jpath string, wait time.Duration) (func(), error) {
	dir := jpath + ".locks"
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("check: the save locks' folder %s: %w", dir, err)
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var held []*filelock.Lock
	release := func() {
		for _, l := range held {
			_ = l.Release()
		}
	}
	for i := range saveLockFiles {
		l, err := filelock.Acquire(ctx, filepath.Join(dir, fmt.Sprintf("save-%02x.lock", i)))
		if errors.Is(err, filelock.ErrUnsupported) {
			release()
			return func() {}, nil
		}
		if err != nil {
			release()
			if ctx.Err() != nil {
				return nil, fmt.Errorf("check: %w (waited %s for the saves in progress; try again)", ErrLocksBusy, wait)
			}
			return nil, fmt.Errorf("check: save lock: %w", err)
		}
		held = append(held, l)
	}
	return release, nil
}

// repair does what is safe about st (see the package doc), with every
// save's lock held, and says what it did.
func (t *task) repair(ctx context.Context, st *state) ([]Action, error) {
	done := []Action{}
	jname := filepath.Base(t.jpath)
	if st.journal == "damaged" {
		aside := fmt.Sprintf("%s.damaged-%s", t.jpath, time.Now().UTC().Format("20060102T150405Z"))
		// The -wal and -shm go with it: replayed into another file they
		// would damage it further.
		for _, suffix := range []string{"-wal", "-shm", ""} {
			err := os.Rename(t.jpath+suffix, aside+suffix)
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return done, fmt.Errorf("check: put the damaged journal aside: %w", err)
			}
		}
		done = append(done, Action{Kind: ActionJournalSetAside, Path: jname,
			Detail: fmt.Sprintf("the damaged journal is kept at %s (with its -wal and -shm): its hand-offs and file encryptions are only there", filepath.Base(aside))})
		st.journal = "missing"
	}
	if st.journal == "other" {
		// Another task's record is never rebuilt or written to.
		return t.removeLeftovers(st, done)
	}
	if st.journal == "missing" && len(st.rebuild) == 0 {
		return t.removeLeftovers(st, done)
	}
	created := false
	if _, err := os.Stat(t.jpath); errors.Is(err, fs.ErrNotExist) {
		created = true
	}
	j, err := journal.Open(ctx, t.jpath)
	if err != nil {
		return done, fmt.Errorf("check: %w", err)
	}
	defer j.Close()
	if err := j.BindTask(ctx, t.m.Task); err != nil {
		return done, fmt.Errorf("check: %w", err)
	}
	if created {
		done = append(done, Action{Kind: ActionJournalCreated, Path: jname,
			Detail: fmt.Sprintf("a new journal, bound to the manifest's task %q", t.m.Task)})
	}
	if len(st.rebuild) > 0 && st.journal != "other" {
		n, err := sidecar.Rebuild(ctx, j, st.rebuild)
		if err != nil {
			return done, fmt.Errorf("check: rebuild the record from the sidecars: %w", err)
		}
		if n > 0 {
			done = append(done, Action{Kind: ActionRecordRebuilt, Path: jname,
				Detail: fmt.Sprintf("%d versions put back in the record from their sidecars; a retry of their saves replays them", n)})
		}
	}
	return t.removeLeftovers(st, done)
}

// removeLeftovers removes the temporary files and the sidecars that
// describe no file.
func (t *task) removeLeftovers(st *state, done []Action) ([]Action, error) {
	for _, f := range st.remove {
		p, err := relJoin(t.dir, f.Path)
		if err != nil {
			return done, err
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return done, fmt.Errorf("check: remove %s: %w", f.Path, err)
		}
		done = append(done, Action{Kind: ActionRemoved, Path: f.Path, Detail: "removed: " + f.Kind})
	}
	return done, nil
}
