//go:build !windows

package grant

// renameRefusedInUse is false: outside Windows a rename over a file that
// another process has open succeeds, and the reader keeps the old file.
func renameRefusedInUse(error) bool { return false }
