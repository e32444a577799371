package files

import (
	"os"
	"path/filepath"

	"golang.org/x/sys/windows"
)

// nameMax is Windows' limit for one name: 255 UTF-16 code units on NTFS,
// FAT32's long names and exFAT alike.
func nameMax(string) int { return 255 }

// renameNoReplace renames oldname to newname (both native, relative to the
// root, in one folder) unless newname exists: MoveFileEx without
// MOVEFILE_REPLACE_EXISTING, which fails on an existing name.
func renameNoReplace(dir *os.Root, oldname, newname string) error {
	from, err := windows.UTF16PtrFromString(filepath.Join(dir.Name(), oldname))
	if err != nil {
		return err
	}
	to, err := windows.UTF16PtrFromString(filepath.Join(dir.Name(), newname))
	if err != nil {
		return err
	}
	if err := windows.MoveFileEx(from, to, windows.MOVEFILE_WRITE_THROUGH); err != nil {
		return &os.LinkError{Op: "MoveFileEx", Old: oldname, New: newname, Err: err}
	}
	return nil
}
