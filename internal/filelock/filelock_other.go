//go:build !(unix && !aix) && !windows

package filelock

import "os"

// lockFile refuses: without a lock, two writers could lose each other's
// change, and a writer that says so is better than one that does it.
func lockFile(*os.File, bool) error { return ErrUnsupported }
