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
