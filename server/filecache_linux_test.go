package server

import (
	"io/fs"
	"syscall"
	"testing"
	"time"
)

// statInfo is a FileInfo with the times and mode given.
type statInfo struct {
	mode         fs.FileMode
	mtime, ctime time.Time
	noSys        bool
}

func (f statInfo) Name() string       { return "a.bin" }
func (f statInfo) Size() int64        { return 9 }
func (f statInfo) Mode() fs.FileMode  { return f.mode }
func (f statInfo) ModTime() time.Time { return f.mtime }
func (f statInfo) IsDir() bool        { return f.mode.IsDir() }
func (f statInfo) Sys() any {
	if f.noSys {
		return nil
	}
	return &syscall.Stat_t{Ctim: syscall.NsecToTimespec(f.ctime.UnixNano())}
}

func TestKeepableOnlyAQuietRegularFile(t *testing.T) {
	read := time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC)
	old := read.Add(-quietFor - time.Millisecond)
	recent := read.Add(-quietFor + time.Millisecond)
	for _, tc := range []struct {
		name string
		fi   statInfo
		want bool
	}{
		{"both times quiet", statInfo{mtime: old, ctime: old}, true},
		{"changed lately", statInfo{mtime: old, ctime: recent}, false},
		{"modified lately", statInfo{mtime: recent, ctime: old}, false},
		{"changed after the read began", statInfo{mtime: old, ctime: read.Add(time.Second)}, false},
		{"no change time known", statInfo{mtime: old, ctime: old, noSys: true}, false},
		{"not a regular file", statInfo{mode: fs.ModeNamedPipe, mtime: old, ctime: old}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := keepable(tc.fi, read); got != tc.want {
				t.Fatalf("keepable = %v, want %v", got, tc.want)
			}
		})
	}
}
