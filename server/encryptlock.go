package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"

	"github.com/pdmcp/pdmcp/internal/filelock"
	"github.com/pdmcp/pdmcp/server/journal"
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
// holder until ctx ends. Without it (a folder that cannot be made, a system
// with no file lock) the call goes on as before, logged: the journal still
// makes sure only one process sends, and the lock only spares the other a
// misleading ENCRYPT_ANSWER_LOST.
func (s *Server) lockEncrypt(ctx context.Context, key journal.FileKey) (release func(), err error) {
	dir := s.encryptLockDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		s.log.Warn("encrypt lock folder not made; going on without the cross-process lock", "err", err)
		return func() {}, nil
	}
	sum := sha256.Sum256([]byte(key.String()))
	l, err := filelock.Acquire(ctx, filepath.Join(dir, hex.EncodeToString(sum[:1])+".lock"))
	if err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		s.log.Warn("encrypt lock not taken; going on without the cross-process lock", "err", err)
		return func() {}, nil
	}
	return func() { _ = l.Release() }, nil
}
