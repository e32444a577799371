//go:build !unix && !windows

package safefile

import (
	"fmt"
	"io/fs"
	"os"
)

// openNoFollow refuses a symbolic link found by Lstat, opens the file and
// checks it is the same file that was looked at, so a link swapped in
// between is not read.
func openNoFollow(path string) (*os.File, error) {
	before, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if before.Mode()&fs.ModeSymlink != 0 {
		return nil, fmt.Errorf("%s: %w", path, ErrSymlink)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	after, err := f.Stat()
	if err != nil || !os.SameFile(before, after) {
		f.Close()
		return nil, fmt.Errorf("%s: %w (it changed while being opened)", path, ErrSymlink)
	}
	return f, nil
}

func openFollow(path string) (*os.File, error) { return os.Open(path) }
