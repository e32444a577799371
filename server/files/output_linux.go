package files

import (
	"os"

	"golang.org/x/sys/unix"
)

// nameMax is the filesystem's limit for one name in folder, in bytes
// (statfs's f_namelen, as pathconf's NAME_MAX reads it); 255 if unknown.
func nameMax(folder string) int {
	var st unix.Statfs_t
	if err := unix.Statfs(folder, &st); err != nil || st.Namelen <= 0 {
		return 255
	}
	return int(st.Namelen)
}

// renameNoReplace renames oldname to newname (both native, relative to the
// root, in one folder) unless newname exists: renameat2 RENAME_NOREPLACE
// on the folder opened through the root.
func renameNoReplace(dir *os.Root, oldname, newname string) error {
	return renameInFolder(dir, oldname, newname, "renameat2", func(fd int, oldBase, newBase string) error {
		return unix.Renameat2(fd, oldBase, fd, newBase, unix.RENAME_NOREPLACE)
	})
}
