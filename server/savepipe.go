package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"time"

	"github.com/pdmcp/pdmcp/internal/crashpoint"
	"github.com/pdmcp/pdmcp/internal/filelock"
	"github.com/pdmcp/pdmcp/server/journal"
	"github.com/pdmcp/pdmcp/server/refusal"
	"github.com/pdmcp/pdmcp/server/sidecar"
)

// The one save pipeline of save_protected_result and
// save_protected_fragment. Each step is journaled before the next starts
// (server/journal/saves.go), so a save killed anywhere is finished by its
// retry, and the version lands in the record exactly once:
//
//	reserve   the idempotency key and the text's sha256
//	encrypt   under the existing key; the answer is journaled
//	place     the version and file name are chosen in a journal transaction
//	          (above the manifest's history, the record and every other
//	          save's placement, so two processes never place two saves at one
//	          version)
//	sidecar   the version's record beside its name (server/sidecar), made
//	          durable with the file, before the commit
//	write     the ciphertext under this save's temporary name, fsync
//	link      the temporary file to the version's name: never over an
//	          existing file; a file already there that is not this save's
//	          is left alone, logged, and the save placed above it
//	commit    the version into the record and the save's receipt, one
//	          journal transaction
//
// What differs between a result and a section is a placer. The locks are
// taken in one order, and each wait is bounded: first the save's own
// cross-process lock (lockSave), before any in-process lock and before
// the Gateway is asked, held to the end, so two processes running one
// save never both encrypt it nor touch each other's temporary file; a
// holder that hangs (a stopped process) costs a waiter at most
// Config.LockWait, then DESTINATION_BUSY with nothing sent. Then the
// in-process lock of the idempotency key, then the target's: the target's
// keeps its saves from placing against each other for nothing, and the
// journal's write lock is what makes allocation safe between processes.
// No in-process lock is held while waiting for a cross-process one, so a
// stopped process never wedges a target for the other saves of a server.

// crashPoints names one kind of save's step boundaries, for
// Config.CrashPoint.
type crashPoints struct {
	reserved, encrypted, placed, sidecar, created, written, linked, committed crashpoint.Point
}

// placer is what one kind of save decides for itself.
type placer interface {
	// floor is the highest version the manifest names: the record's go
	// above it.
	floor() int
	// versionPath is version n's file, relative to the manifest's folder.
	versionPath(n int) string
	// base is the manifest's document a section is counted against;
	// zero for a result.
	base() journal.DocumentBase
	points() crashPoints
}

// saveJob is one save as its tool has checked it.
type saveJob struct {
	key journal.SaveID
	// idemLock names this save's idempotency key, placeLock its target
	// (destination, or section) for the in-process locks.
	idemLock, placeLock string
	idem                string
	ttag, text, textSHA string
	placer              placer
}

// maxPlacements bounds how many stray files one save steps over before it
// gives up (each is logged): a folder full of them is the operator's to
// look at, not a reason to loop.
const maxPlacements = 64

// runSave runs the pipeline. It returns the receipt and whether it was a
// replay of a committed save.
func (s *Server) runSave(ctx context.Context, c *call, job saveJob) (journal.Receipt, bool, error) {
	if err := s.checkJournal(); err != nil {
		return journal.Receipt{}, false, err
	}
	// The cross-process lock first (see the order above): a retry of this
	// save running in another process is finished, or refused, before
	// this one reserves or asks the Gateway anything.
	release, err := s.lockSave(ctx, job)
	if err != nil {
		return journal.Receipt{}, false, err
	}
	defer release()
	// Only a retry of this very save waits here: another user's save, or
	// this user's save under another key, goes on while this one waits
	// for the Gateway (unless it shares the cross-process lock file).
	unlock, err := s.idemLocks.lock(ctx, job.idemLock)
	if err != nil {
		return journal.Receipt{}, false, err
	}
	defer unlock()
	pts := job.placer.points()
	res, err := s.cfg.Journal.Reserve(ctx, job.key, job.textSHA)
	if errors.Is(err, journal.ErrIdempotencyConflict) {
		return journal.Receipt{}, false, refuseCode(refusal.IdempotencyConflict,
			"idempotencyKey %q was already used for different text; nothing was sent; choose a new key for a new save", job.idem)
	}
	if err != nil {
		return journal.Receipt{}, false, fmt.Errorf("reserve save: %w", err)
	}
	if res.State == journal.SaveCommitted && res.Receipt != nil {
		// A crash after the commit may have left this save's temporary
		// name; the save's lock is held, so no other process is between
		// the same save's steps.
		s.removeTemp(job, res.Receipt.Path)
		return *res.Receipt, true, nil
	}
	s.cfg.CrashPoint(pts.reserved)
	var answer *journal.EncryptedPayload
	if res.Encrypted == nil {
		// No answer was recorded: ask (again). The key is the target's
		// existing one, so a repeated ask creates nothing at the key server.
		// The answer is journaled with the save's placement, in one
		// transaction.
		if answer, err = s.encryptUnderKey(ctx, c, job.ttag, job.text); err != nil {
			return journal.Receipt{}, false, err
		}
	}
	return s.placeAndCommit(ctx, job, answer)
}

// placeAndCommit places the recorded ciphertext at a free version, makes
// its file durable at that version's name, and commits it into the record.
// Every step can be repeated after a crash: a file at the placed name with
// this save's bytes (they hold its fresh IV, so no other save's match) is
// this save's own. The caller holds the save's cross-process lock
// (lockSave), which makes the temporary name, and every file step below,
// this attempt's alone: the in-process locks do not reach another process
// running this very save (a retry that landed on a second server).
//
// answer, when not nil, is the Gateway's answer this attempt got: it is
// journaled with the first placement. The second result says whether the
// receipt is another attempt's (one that committed while this one waited).
func (s *Server) placeAndCommit(ctx context.Context, job saveJob, answer *journal.EncryptedPayload) (journal.Receipt, bool, error) {
	unlock, err := s.destLocks.lock(ctx, job.placeLock)
	if err != nil {
		return journal.Receipt{}, false, err
	}
	defer unlock()
	// Read the row again under the target's lock: another save of this
	// process may have placed meanwhile.
	res, err := s.cfg.Journal.Get(ctx, job.key)
	if err != nil {
		return journal.Receipt{}, false, fmt.Errorf("read the save's journal row: %w", err)
	}
	if res.State == journal.SaveCommitted && res.Receipt != nil {
		s.removeTemp(job, res.Receipt.Path)
		return *res.Receipt, true, nil
	}
	pts := job.placer.points()
	tmp := ""
	after := 0
	if answer != nil {
		// Place keeps an answer recorded first, and this one is dropped.
		if res, err = s.cfg.Journal.Place(ctx, job.key, answer, job.placer.floor(), 0, job.placer.versionPath); err != nil {
			return journal.Receipt{}, false, fmt.Errorf("record encrypted save: %w", err)
		}
		s.cfg.CrashPoint(pts.encrypted)
	}
	// Another attempt's answer, when it was recorded first.
	enc := res.Encrypted
	for range maxPlacements {
		if res.State != journal.SavePlaced {
			// A journal from before the record left the save encrypted but
			// not placed, or a stray file took the placed version.
			if res, err = s.cfg.Journal.Place(ctx, job.key, nil, job.placer.floor(), after, job.placer.versionPath); err != nil {
				return journal.Receipt{}, false, fmt.Errorf("place save: %w", err)
			}
			s.cfg.CrashPoint(pts.placed)
		}
		pl := *res.Placement
		rel := filepath.FromSlash(pl.Path)
		var v journal.Version
		switch ours, err := s.holds(rel, enc.Ciphertext); {
		case err == nil && !ours:
			s.log.Warn("a file at the next version's name is not this save's: it is left alone and the save takes a later version",
				"path", pl.Path, "version", pl.Version)
			after, res.State = pl.Version, journal.SaveEncrypted
			continue
		case err == nil && ours:
			// Linked before a crash: nothing to write but the sidecar, the
			// same one again.
			if v, err = s.writeSidecar(job, pl, enc, true); err != nil {
				return journal.Receipt{}, false, err
			}
		case errors.Is(err, fs.ErrNotExist):
			// The version's record beside it before it is placed.
			if v, err = s.writeSidecar(job, pl, enc, false); errors.Is(err, errSidecarTaken) {
				s.log.Warn("the next version's sidecar describes another file; the save takes a later version",
					"path", pl.Path, "version", pl.Version)
				after, res.State = pl.Version, journal.SaveEncrypted
				continue
			} else if err != nil {
				return journal.Receipt{}, false, err
			}
			s.cfg.CrashPoint(pts.sidecar)
			if tmp == "" {
				if err = fileStep(ctx, SpanFileWrite, func() (err error) {
					tmp, err = s.writeTemp(job, pl.Path, enc.Ciphertext)
					return err
				}); err != nil {
					return journal.Receipt{}, false, err
				}
				s.cfg.CrashPoint(pts.written)
			}
			if err := fileStep(ctx, SpanFileLink, func() error { return s.root.Link(tmp, rel) }); err != nil {
				if errors.Is(err, fs.ErrExist) {
					// Taken between the look and the link: look again.
					res.State = journal.SavePlaced
					continue
				}
				return journal.Receipt{}, false, fmt.Errorf("link the saved file into place: %w", err)
			}
			s.cfg.CrashPoint(pts.linked)
		default:
			return journal.Receipt{}, false, fmt.Errorf("look at the saved file's name: %w", err)
		}
		// The file's bytes and its name made durable before the commit,
		// also when an earlier attempt linked it (a killed process's
		// writes may still be only in the OS's cache). Syncing after the
		// link rather than before it lets one file-system journal commit
		// carry both the data and the new name (ext4 commits the link with
		// the file's fsync, leaving the folder's, issued at the same time,
		// nothing to do); a crash
		// before the commit leaves at most a file that holds() does not
		// take for this save's, which the retry skips.
		// The sidecar's bytes in the same round (server/sidecars.go).
		if !s.cfg.NonDurableForBenchmarks {
			if err := fileStep(ctx, SpanFileSync, func() error {
				return s.syncFileAndFolder(s.root, rel, filepath.FromSlash(sidecar.PathOf(pl.Path)))
			}); err != nil {
				return journal.Receipt{}, false, fmt.Errorf("make the saved file durable: %w", err)
			}
		}
		r, err := s.cfg.Journal.CommitVersion(ctx, job.key, v, job.placer.base())
		if errors.Is(err, journal.ErrVersionTaken) {
			// The record names this version already (an operator's hand
			// in the journal): take our link back and place again.
			s.log.Warn("a version the save placed is already in the record; placing it again", "path", pl.Path, "version", pl.Version)
			if err := s.root.Remove(rel); err != nil {
				return journal.Receipt{}, false, fmt.Errorf("take back the saved file's link: %w", err)
			}
			s.removeSidecar(pl.Path)
			after, res.State = pl.Version, journal.SaveEncrypted
			continue
		}
		if err != nil {
			return journal.Receipt{}, false, fmt.Errorf("commit save: %w", err)
		}
		s.cfg.CrashPoint(pts.committed)
		s.removeTemp(job, pl.Path)
		return *r.Receipt, false, nil
	}
	return journal.Receipt{}, false, fmt.Errorf("save: %d versions in a row are taken by files that are not this save's; tell the operator", maxPlacements)
}

// DefaultLockWait is how long a save or an encrypt_file waits for its
// cross-process lock (Config.LockWait) before it is refused
// DESTINATION_BUSY or FILE_BUSY. A holder keeps the lock for one Gateway
// encrypt and a few local file steps, well under a second as a rule; 10 s
// rides out a slow Gateway answer while a stopped holder costs each caller
// one bounded wait, not a wedge.
const DefaultLockWait = 10 * time.Second

// lockSave takes the save's cross-process lock, waiting for another holder
// at most Config.LockWait; past that the save is refused
// DESTINATION_BUSY, before anything is reserved or sent. Saves share one
// of 256 lock files (by the first byte of the digest the temporary name is
// made of), beside the encrypt locks: a file per save would pile up, and a
// lock file may never be removed while another may wait on it. A holder
// waits on the Gateway's encrypt and local files only, both bounded, so
// two saves sharing a file take turns. Where no lock can be taken (a
// folder that cannot be made, a system without file locks) the save goes
// on, logged, as before the lock: only two processes running the very same
// save at the very same time need it.
func (s *Server) lockSave(ctx context.Context, job saveJob) (release func(), err error) {
	dir := s.encryptLockDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		s.log.Warn("save lock folder not made; going on without the cross-process lock", "err", err)
		return func() {}, nil
	}
	wait, cancel := context.WithTimeoutCause(ctx, s.cfg.LockWait, errLockWait)
	defer cancel()
	l, err := filelock.Acquire(wait, saveLockPath(dir, job.idemLock))
	if err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		if errors.Is(context.Cause(wait), errLockWait) {
			s.log.Warn("a save's cross-process lock stayed held by another server; refused DESTINATION_BUSY",
				"waited", s.cfg.LockWait.String())
			return nil, refuseCode(refusal.DestinationBusy,
				"another server has held this save's lock for %s (it may be stopped); nothing was sent; call again with the same idempotencyKey shortly",
				s.cfg.LockWait)
		}
		s.log.Warn("save lock not taken; going on without the cross-process lock", "err", err)
		return func() {}, nil
	}
	return func() { _ = l.Release() }, nil
}

// errLockWait is the cause of a cross-process lock wait that ran out.
var errLockWait = errors.New("cross-process lock wait ran out")

// saveLockPath is the lock file, in dir, of the save whose in-process
// idempotency lock is named idemLock.
func saveLockPath(dir, idemLock string) string {
	sum := sha256.Sum256([]byte(idemLock))
	return filepath.Join(dir, "save-"+hex.EncodeToString(sum[:1])+".lock")
}

// holds reports whether the file rel exists with exactly data in it; an
// fs.ErrNotExist error when there is none.
func (s *Server) holds(rel string, data []byte) (bool, error) {
	fi, err := s.root.Lstat(rel)
	if err != nil {
		return false, err
	}
	if !fi.Mode().IsRegular() || fi.Size() != int64(len(data)) {
		return false, nil
	}
	have, err := s.root.ReadFile(rel)
	if err != nil {
		return false, err
	}
	return bytes.Equal(have, data), nil
}

// tempName is the save's temporary file beside versionPath: one name per
// save, so a retry after a crash replaces its own leftover and nothing
// else's. It is only touched under the save's lock (lockSave).
func tempName(job saveJob, versionPath string) string {
	sum := sha256.Sum256([]byte(job.idemLock))
	return path.Join(path.Dir(versionPath), ".pdmcp-save-"+hex.EncodeToString(sum[:12])+".tmp")
}

// writeTemp writes data under the save's temporary name. An earlier attempt's file there is removed first, never
// truncated: it may share its bytes with a version's name.
func (s *Server) writeTemp(job saveJob, versionPath string, data []byte) (string, error) {
	rel := filepath.FromSlash(tempName(job, versionPath))
	if err := mkdirDurable(s.root, filepath.Dir(rel)); err != nil {
		return "", fmt.Errorf("make the saved file's folder: %w", err)
	}
	if err := s.root.Remove(rel); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("remove an earlier temporary file: %w", err)
	}
	f, err := s.root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", fmt.Errorf("create the temporary file: %w", err)
	}
	s.cfg.CrashPoint(job.placer.points().created)
	// Not synced here: placeAndCommit syncs the file once it has its
	// version's name.
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = s.root.Remove(rel)
		return "", fmt.Errorf("write the temporary file: %w", err)
	}
	return rel, nil
}

// removeTemp removes the save's temporary name once its version is
// committed; a failure leaves a file no one reads, and is logged.
func (s *Server) removeTemp(job saveJob, versionPath string) {
	rel := filepath.FromSlash(tempName(job, versionPath))
	if err := s.root.Remove(rel); err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.log.Warn("a committed save's temporary file was not removed", "path", tempName(job, versionPath), "err", err)
	}
}

// syncFileAndFolder makes the file rel's bytes and its name durable
// before the save commits, and those of the files also beside it: the
// fsyncs of the files and of their folder are issued at once, as none
// needs another done first and all are waited for, so the folder's costs
// nothing beside the file's. A failure of any fails the save (no receipt
// names a file that may not be on disk), except the folder's on Windows,
// which cannot fsync a folder (NTFS makes the name durable with its own
// journal).
func (s *Server) syncFileAndFolder(dir *os.Root, rel string, also ...string) error {
	others := []<-chan error{background(s, "syncing a saved file's folder", func() error { return syncFolder(dir, filepath.Dir(rel)) },
		func(err error) error { return err })}
	for _, f := range also {
		others = append(others, background(s, "syncing a saved file's sidecar", func() error { return syncFile(dir, f) },
			func(err error) error { return err }))
	}
	err := syncFile(dir, rel)
	for _, o := range others {
		err = errors.Join(err, <-o)
	}
	return err
}

// syncFolder fsyncs the folder rel (relative to dir); nothing on Windows.
func syncFolder(dir *os.Root, rel string) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	return syncFile(dir, rel)
}

// mkdirDurable makes the folder rel (relative to dir) and any missing
// folder above it, and fsyncs the folder holding each one it made: the
// first save to a destination makes results/, and the folder fsync before
// its commit covers only the entries inside results/, not results/ itself.
// A folder that exists costs one Lstat.
func mkdirDurable(dir *os.Root, rel string) error {
	var made []string
	for f := rel; f != "." && f != string(filepath.Separator); f = filepath.Dir(f) {
		if _, err := dir.Lstat(f); err == nil {
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		made = append(made, f)
	}
	if len(made) == 0 {
		return nil
	}
	if err := dir.MkdirAll(rel, 0o700); err != nil {
		return err
	}
	for _, f := range made {
		if err := syncFolder(dir, filepath.Dir(f)); err != nil {
			return err
		}
	}
	return nil
}

// syncFile makes the file (or folder) rel's bytes durable.
func syncFile(dir *os.Root, rel string) error {
	f, err := dir.Open(rel)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
