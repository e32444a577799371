//go:build unix

package operator

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lockProtect takes an exclusive lock beside the protect journal, so two
// protect runs on one manifest never interleave their journal writes. The
// kernel drops the lock when the process dies, so a run killed with -9
// leaves nothing to clean up.
func lockProtect(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("protect: lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("protect: another pdmcp protect is working on this manifest (%s is locked); wait for it to end", path)
		}
		return nil, fmt.Errorf("protect: lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}
