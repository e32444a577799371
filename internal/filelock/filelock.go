// Package filelock is the one cross-process lock the operator's shared files
// are changed under: the manifest, the seed record and the protect journal.
// A lock is an advisory, exclusive lock on a separate lock file beside the
// file it guards (flock on Unix, LockFileEx on Windows), never on the file
// itself, because writers replace that file by renaming a new one over it.
//
// The lock belongs to the open file, so the kernel drops it when the holder
// ends, however it ends: a process killed with -9 leaves a lock file that
// wedges nothing, and no one ever has to delete it. Two locks taken in one
// process exclude each other as two processes do.
package filelock

import (
	"context"
	"errors"
	"fmt"
	"os"
)

// ErrLocked is TryAcquire's answer while another holder has the lock.
var ErrLocked = errors.New("locked by another holder")

// ErrUnsupported is the answer on a system without a file lock this package
// knows: writers refuse rather than risk losing another's change.
var ErrUnsupported = errors.New("no cross-process file lock on this system")

// Lock is a held lock; Release releases it.
type Lock struct {
	f *os.File
}

// Path returns the lock file's name beside the file it guards.
func Path(guarded string) string { return guarded + ".lock" }

// TryAcquire takes the lock on the lock file at path (created, mode 0600,
// if missing) if it is free, and answers [ErrLocked] at once if it is not.
func TryAcquire(path string) (*Lock, error) {
	f, err := openLockFile(path)
	if err != nil {
		return nil, err
	}
	if err := lockFile(f, false); err != nil {
		f.Close()
		return nil, wrap(path, err)
	}
	return &Lock{f: f}, nil
}

// Acquire takes the lock on the lock file at path (created, mode 0600, if
// missing), waiting for its holder to release it or until ctx ends.
func Acquire(ctx context.Context, path string) (*Lock, error) {
	f, err := openLockFile(path)
	if err != nil {
		return nil, err
	}
	err = lockFile(f, false)
	if err == nil {
		return &Lock{f: f}, nil
	}
	if !errors.Is(err, ErrLocked) {
		f.Close()
		return nil, wrap(path, err)
	}
	if ctx.Done() == nil {
		if err := lockFile(f, true); err != nil {
			f.Close()
			return nil, wrap(path, err)
		}
		return &Lock{f: f}, nil
	}
	// The wait is a blocking system call, which a context cannot interrupt:
	// it runs aside, and if ctx ends first, whatever it gets is released
	// as soon as it gets it.
	done := make(chan error, 1)
	go func() { done <- lockFile(f, true) }()
	select {
	case err := <-done:
		if err != nil {
			f.Close()
			return nil, wrap(path, err)
		}
		return &Lock{f: f}, nil
	case <-ctx.Done():
		go func() {
			<-done
			f.Close()
		}()
		return nil, fmt.Errorf("lock %s: %w", path, context.Cause(ctx))
	}
}

// Release releases the lock by closing the lock file; the file itself
// stays, for the next holder. A second Release does nothing.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

func openLockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("lock %s: not a regular file (%s)", path, fi.Mode().Type())
	}
	return f, nil
}

func wrap(path string, err error) error {
	return fmt.Errorf("lock %s: %w", path, err)
}
