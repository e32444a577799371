package files

import (
	"os"

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
	return renameInFolder(dir, oldname, newname, "renameatx_np", func(fd int, oldBase, newBase string) error {
		return unix.RenameatxNp(fd, oldBase, fd, newBase, unix.RENAME_EXCL)
	})
}
