//go:build windows

package operator

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/windows"
)

// lockProtect takes an exclusive lock beside the protect journal, so two
// protect runs on one manifest never interleave their journal writes.
// Windows releases the lock when the process ends, however it ends.
func lockProtect(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("protect: lock %s: %w", path, err)
	}
	var ol windows.Overlapped
	err = windows.LockFileEx(windows.Handle(f.Fd()), windows.LOCKFILE_EXCLUSIVE_LOCK|windows.LOCKFILE_FAIL_IMMEDIATELY,
		0, 1, 0, &ol)
	if err != nil {
		f.Close()
		if errors.Is(err, windows.ERROR_LOCK_VIOLATION) {
			return nil, fmt.Errorf("protect: another pdmcp protect is working on this manifest (%s is locked); wait for it to end", path)
		}
		return nil, fmt.Errorf("protect: lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}
