//go:build unix

package grant

import (
	"fmt"
	"os"
	"syscall"
)

// keepOwner gives f (a new temporary file) the owner and group of prev,
// the file it will replace. A writer that may not (not root, and not the
// owner, or not in the group) is refused before anything is replaced,
// naming the owner to run the command as.
func keepOwner(f *os.File, prev os.FileInfo) error {
	st, ok := prev.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	uid, gid := int(st.Uid), int(st.Gid)
	if uid == os.Geteuid() && gid == os.Getegid() {
		return nil
	}
	if err := f.Chown(uid, gid); err != nil {
		return fmt.Errorf("it is owned by uid %d, gid %d, and this command (uid %d) cannot give its replacement the same "+
			"owner (%w); nothing was changed; run the command as that user or as root", uid, gid, os.Geteuid(), err)
	}
	return nil
}
