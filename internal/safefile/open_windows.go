//go:build windows

package safefile

import (
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// openNoFollow opens path for reading without following a symbolic link or
// junction at its last element: the reparse point itself is opened, and
// refused.
func openNoFollow(path string) (*os.File, error) {
	p, err := syscall.UTF16PtrFromString(path)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	h, err := syscall.CreateFile(p, syscall.GENERIC_READ, syscall.FILE_SHARE_READ, nil, syscall.OPEN_EXISTING,
		syscall.FILE_ATTRIBUTE_NORMAL|syscall.FILE_FLAG_OPEN_REPARSE_POINT|syscall.FILE_FLAG_BACKUP_SEMANTICS, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	var info syscall.ByHandleFileInformation
	if err := syscall.GetFileInformationByHandle(h, &info); err != nil {
		syscall.CloseHandle(h)
		return nil, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	if info.FileAttributes&syscall.FILE_ATTRIBUTE_REPARSE_POINT != 0 {
		syscall.CloseHandle(h)
		return nil, fmt.Errorf("%s: %w", path, ErrSymlink)
	}
	return os.NewFile(uintptr(h), path), nil
}

func openFollow(path string) (*os.File, error) { return os.Open(path) }

// checkMode has no bits to check: Windows decides access by ACLs, which the
// operator sets on the folder (docs/operating.md says how).
func checkMode(string, fs.FileInfo, bool) error { return nil }
