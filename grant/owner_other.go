//go:build !unix

package grant

import "os"

// keepOwner does nothing where files have no Unix owner: on Windows the
// replacement inherits its folder's access rules.
func keepOwner(*os.File, os.FileInfo) error { return nil }
