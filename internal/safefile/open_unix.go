//go:build unix

package safefile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// openNoFollow opens path for reading, refusing a symbolic link at its
// last element. O_NONBLOCK keeps a FIFO planted at the path from blocking
// the open; the file is then refused as not regular.
func openNoFollow(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("%s: %w", path, ErrSymlink)
	}
	return f, err
}

func openFollow(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
}

// checkMode applies the permission bits: a secret must give group and
// others nothing, a configuration file must not let them write.
func checkMode(path string, fi fs.FileInfo, secret bool) error {
	mask := fs.FileMode(0o022)
	if secret {
		mask = 0o077
	}
	if fi.Mode().Perm()&mask != 0 {
		return &ModeError{Path: path, Mode: fi.Mode(), Secret: secret}
	}
	return nil
}
