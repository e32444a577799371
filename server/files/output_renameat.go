//go:build darwin || linux

package files

import (
	"os"
	"path/filepath"
)

// renameInFolder opens the folder of oldname (both names native, relative
// to the root, in one folder) through dir and calls rename on its
// descriptor with the two base names; op names the system call in the
// error.
func renameInFolder(dir *os.Root, oldname, newname, op string, rename func(fd int, oldBase, newBase string) error) error {
	d, err := dir.Open(folderOf(oldname))
	if err != nil {
		return err
	}
	defer d.Close()
	if err := rename(int(d.Fd()), filepath.Base(oldname), filepath.Base(newname)); err != nil {
		return &os.LinkError{Op: op, Old: oldname, New: newname, Err: err}
	}
	return nil
}

func folderOf(name string) string {
	if f := filepath.Dir(name); f != "" {
		return f
	}
	return "."
}
