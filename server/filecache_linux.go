package server

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// identOf is what fi, a stat's answer, says of its file.
func identOf(fi os.FileInfo) (fileIdent, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileIdent{}, false
	}
	return fileIdent{dev: st.Dev, ino: st.Ino, dir: st.Mode&syscall.S_IFMT == syscall.S_IFDIR,
		size: st.Size, mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}, true
}

// lstatAt is what the entry name in the folder open as dirfd is, its
// symbolic link itself when it is one.
func lstatAt(dirfd int, name string) (fileIdent, error) {
	var st unix.Stat_t
	err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	for err == unix.EINTR {
		err = unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	}
	if err != nil {
		return fileIdent{}, err
	}
	return fileIdent{dev: st.Dev, ino: st.Ino, dir: st.Mode&unix.S_IFMT == unix.S_IFDIR,
		size: st.Size, mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}, nil
}
