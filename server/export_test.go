package server

import "github.com/pdmcp/pdmcp/server/journal"

// SaveLockFile is the cross-process lock file that a result save to
// destination under idem takes on a stdio server built from cfg: what a
// test holds to play another server stopped in the middle of that save.
func SaveLockFile(cfg Config, destination, idem string) string {
	s := &Server{cfg: cfg}
	key := journal.SaveKey{Caller: s.saveCaller(&call{}), Destination: destination, IdempotencyKey: idem}
	return saveLockPath(s.encryptLockDir(), resultIdemLock(key))
}
