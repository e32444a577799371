package files

import (
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// pcNameMax is pathconf's _PC_NAME_MAX on darwin.
const pcNameMax = 4

// nameMax is the filesystem's limit for one name in folder (pathconf
// NAME_MAX); 255 if unknown.
func nameMax(folder string) int {
	n, err := unix.Pathconf(folder, pcNameMax)
	if err != nil || n <= 0 {
		return 255
	}
	return n
}

// renameNoReplace renames oldname to newname (both native, relative to the
// root, in one folder) unless newname exists: renameatx_np RENAME_EXCL on
// the folder opened through the root.
func renameNoReplace(dir *os.Root, oldname, newname string) error {
	d, err := dir.Open(folderOf(oldname))
	if err != nil {
		return err
	}
	defer d.Close()
	if err := unix.RenameatxNp(int(d.Fd()), filepath.Base(oldname), int(d.Fd()), filepath.Base(newname), unix.RENAME_EXCL); err != nil {
		return &os.LinkError{Op: "renameatx_np", Old: oldname, New: newname, Err: err}
	}
	return nil
}

func folderOf(name string) string {
	if f := filepath.Dir(name); f != "" {
		return f
	}
	return "."
}
