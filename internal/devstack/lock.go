package devstack

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/pdmcp/pdmcp/internal/filelock"
)

// ErrStateInUse is LockState's answer while another pdmcp dev holds the
// state folder.
var ErrStateInUse = errors.New("the state folder is in use")

// LockPath is the lock a running pdmcp dev (or pdmcp dev gateway) holds on
// its state folder; it holds the holder's process id.
func LockPath(state string) string { return filepath.Join(state, "dev.lock") }

// LockState takes the state folder's lock, or fails at once naming the
// process that holds it: two stacks on one folder would serve one Gateway
// database twice and rewrite each other's dev.json, ports.json and grant.
// The lock goes with the process, however it ends; release gives it back
// sooner.
func LockState(state string) (release func(), err error) {
	if err := os.MkdirAll(state, 0o700); err != nil {
		return nil, err
	}
	path := LockPath(state)
	l, err := filelock.TryAcquire(path)
	if errors.Is(err, filelock.ErrLocked) {
		holder := "another process"
		// The holder writes its pid just after it takes the lock: an empty
		// file is a holder that has not written it yet.
		if b, rerr := os.ReadFile(path); rerr == nil {
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil && pid > 0 {
				holder = fmt.Sprintf("process %d", pid)
			}
		}
		return nil, fmt.Errorf("%w: %s runs pdmcp dev on %s (it holds %s); stop it first, or give this one another --state",
			ErrStateInUse, holder, state, path)
	}
	if err != nil {
		return nil, err
	}
	// The lock is advisory, on the open file: writing through another
	// descriptor leaves it held.
	if err := os.WriteFile(path, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
		_ = l.Release()
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	return func() { _ = l.Release() }, nil
}
