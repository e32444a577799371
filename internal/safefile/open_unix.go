//go:build unix

package safefile

import (
	"errors"
	"fmt"
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
