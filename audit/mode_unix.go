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
// the file keep one chain. It returns the unlock. A file that cannot be
// locked is written unlocked: a line is never held back for the lock.
func lockFile(f any) (unlock func()) {
	fd, ok := f.(interface{ Fd() uintptr })
	if !ok {
		return func() {}
	}
	for {
		err := syscall.Flock(int(fd.Fd()), syscall.LOCK_EX)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EINTR) {
			return func() {}
		}
	}
	return func() { _ = syscall.Flock(int(fd.Fd()), syscall.LOCK_UN) }
}
