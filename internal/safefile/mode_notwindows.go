//go:build !windows

package safefile

import "io/fs"

// checkMode applies the permission bits where the system has them: a
// secret must give group and others nothing, a configuration file must not
// let them write.
func checkMode(path string, fi fs.FileInfo, secret bool) error {
	mask := fs.FileMode(0o022)
	if secret {
		mask = 0o077
	}
	if fi.Mode().Perm()&mask != 0 {
		return &ModeError{Path: path, Mode: fi.Mode(), Secret: secret}
	}
	return nil
}
