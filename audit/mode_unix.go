//go:build unix

package audit

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// openAppend opens path for appending without following a symbolic link, so
// a link planted at the audit path cannot send lines elsewhere. It is
// opened for reading too: Open reads the last byte to fence off a torn
// line, and a failed write reads back what it left before taking it back.
func openAppend(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_RDWR|syscall.O_NOFOLLOW, 0o600)
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("refusing a symbolic link: %w", err)
	}
	return f, err
}

// checkPrivate refuses a file that group or others may read or write.
func checkPrivate(fi os.FileInfo) error {
	if fi.Mode().Perm()&0o077 != 0 {
		return ErrUnsafeMode
	}
	return nil
}

// lockFile takes an exclusive flock(2) of f for one line: the read of the
// file's last line and the write that chains from it, so processes sharing
// the file keep one chain. It reports whether it took the lock, for
// unlockFile. A file that cannot be locked is written unlocked: a line is
// never held back for the lock.
func lockFile(f any) (locked bool) {
	fd, ok := f.(interface{ Fd() uintptr })
	if !ok {
		return false
	}
	for {
		err := syscall.Flock(int(fd.Fd()), syscall.LOCK_EX)
		if err == nil {
			return true
		}
		if !errors.Is(err, syscall.EINTR) {
			return false
		}
	}
}

// unlockFile releases the lock lockFile took (locked), and does nothing
// when it took none. The two are apart, not a returned closure, so that a
// line allocates nothing for its lock.
func unlockFile(f any, locked bool) {
	if fd, ok := f.(interface{ Fd() uintptr }); ok && locked {
		_ = syscall.Flock(int(fd.Fd()), syscall.LOCK_UN)
	}
}
