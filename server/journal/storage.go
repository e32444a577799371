package journal

import (
	"errors"
	"syscall"
)

// SQLite's primary result codes that mean the storage, not the request,
// failed: another connection holds the lock past the busy timeout, a
// read or write of the file failed, the disk is full.
const (
	sqliteBusy   = 5
	sqliteLocked = 6
	sqliteIOErr  = 10
	sqliteFull   = 13
)

// StorageUnavailable reports whether err is the storage's failure rather
// than the request's: the journal busy past its timeout (another process
// holds its write lock), a disk full or over quota, or an I/O error. Such a
// failure lost nothing that was receipted, and the same request can
// succeed once the storage recovers, so callers answer it as retryable
// instead of as an internal error.
func StorageUnavailable(err error) bool {
	if err == nil {
		return false
	}
	var coded interface{ Code() int }
	if errors.As(err, &coded) {
		switch coded.Code() & 0xff {
		case sqliteBusy, sqliteLocked, sqliteIOErr, sqliteFull:
			return true
		}
	}
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || errors.Is(err, syscall.EIO)
}
