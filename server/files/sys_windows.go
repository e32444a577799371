//go:build windows

package files

import (
	"io/fs"
	"os"
	"syscall"
)

const openFlags = 0

// linkCount is a file's number of names. Windows reports it only for an open
// handle, so the check before the open does not know it and the check
// after the open does.
func linkCount(_ fs.FileInfo, f *os.File) (uint64, bool) {
	if f == nil {
		return 0, false
	}
	var info syscall.ByHandleFileInformation
	if err := syscall.GetFileInformationByHandle(syscall.Handle(f.Fd()), &info); err != nil {
		return 0, false
	}
	return uint64(info.NumberOfLinks), true
}
