//go:build unix && !linux

package journal

import (
	"errors"
	"syscall"
)

// processAlive reports whether a process with this id runs on this
// machine (signal 0 checks without sending anything; EPERM means it runs
// under another user).
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
