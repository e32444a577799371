//go:build !unix

package audit

import "os"

// openAppend opens path for appending, and for reading (see the Unix one).
func openAppend(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_RDWR, 0o600)
}

// checkPrivate has nothing to check where permission bits do not describe
// access (Windows uses ACLs, which the operator sets on the folder).
func checkPrivate(os.FileInfo) error { return nil }

// lockFile locks nothing here: one process per audit file keeps one
// chain (see chain.go).
func lockFile(any) (locked bool) { return false }

// unlockFile has no lock to release here.
func unlockFile(any, bool) {}
