package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"

	"github.com/pdmcp/pdmcp/internal/filelock"
	"github.com/pdmcp/pdmcp/server/journal"
	"github.com/pdmcp/pdmcp/server/refusal"
)

// Two pdmcp processes on one journal can be asked to encrypt the same
// content at the same path at once. The journal lets only one of them send
// it (ClaimSend), but on its own it cannot tell the other whether the
// claimant is still waiting for its answer or died waiting: both look like
// an answer that never came. So an encrypt also holds a cross-process lock
// while it works: the second call waits for the first to finish, then
// replays its result; and a lock whose holder died is free again (the
// kernel drops it), so a call that finds the row claimed while holding the
// lock knows that answer is lost. Keys share one of 256 lock files by the
// first byte of their digest: a file per key would pile up for ever, and a
// lock file may never be removed while others may be waiting on it.

// encryptLockDir holds the encrypt locks, beside the journal.
func (s *Server) encryptLockDir() string { return s.cfg.Journal.Path() + ".locks" }

// lockEncrypt takes key's cross-process encrypt lock, waiting for another
// holder at most Config.LockWait; past that the call is refused FILE_BUSY
// before anything is reserved or sent, so a stopped holder never wedges
// a caller. It is taken before the in-process lock of the key, so no
// in-process lock is held while waiting for another process. Without it (a
// folder that cannot be made, a system with no file lock) the call goes on
// as before, logged: the journal still makes sure only one process sends,
// and the lock only spares the other a misleading ENCRYPT_ANSWER_LOST.
func (s *Server) lockEncrypt(ctx context.Context, key journal.FileKey) (release func(), err error) {
	dir := s.encryptLockDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		s.log.Warn("encrypt lock folder not made; going on without the cross-process lock", "err", err)
		return func() {}, nil
	}
	wait, cancel := context.WithTimeoutCause(ctx, s.cfg.LockWait, errLockWait)
	defer cancel()
	l, err := filelock.Acquire(wait, encryptLockPath(dir, key))
	if err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		if errors.Is(context.Cause(wait), errLockWait) {
			s.log.Warn("an encrypt_file's cross-process lock stayed held by another server; refused FILE_BUSY",
				"waited", s.cfg.LockWait.String())
			return nil, refuseCode(refusal.FileBusy,
				"another server has held this file's encrypt lock for %s (it may be stopped); nothing was sent; call again shortly",
				s.cfg.LockWait)
		}
		s.log.Warn("encrypt lock not taken; going on without the cross-process lock", "err", err)
		return func() {}, nil
	}
	return func() { _ = l.Release() }, nil
}

// encryptLockPath is key's encrypt lock file in dir.
func encryptLockPath(dir string, key journal.FileKey) string {
	sum := sha256.Sum256([]byte(key.String()))
	return filepath.Join(dir, hex.EncodeToString(sum[:1])+".lock")
}
