package files

import (
	"os"
	"path/filepath"

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
	d, err := dir.Open(folderOf(oldname))
	if err != nil {
		return err
	}
	defer d.Close()
	if err := unix.Renameat2(int(d.Fd()), filepath.Base(oldname), int(d.Fd()), filepath.Base(newname), unix.RENAME_NOREPLACE); err != nil {
		return &os.LinkError{Op: "renameat2", Old: oldname, New: newname, Err: err}
	}
	return nil
}

func folderOf(name string) string {
	if f := filepath.Dir(name); f != "" {
		return f
	}
	return "."
}
