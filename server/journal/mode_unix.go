//go:build unix

package journal

import "os"

// checkPrivate refuses a file that group or others may read or write.
func checkPrivate(fi os.FileInfo) error {
	if fi.Mode().Perm()&0o077 != 0 {
		return ErrUnsafeMode
	}
	return nil
}
