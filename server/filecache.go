package server

import (
	"io"
	"os"
	"sync"
	"time"
)

// A read's ciphertext is read from the manifest's folder on every call:
// opened, read and closed, a dozen system calls. fileCache answers a file
// unchanged since it was read from memory after one stat. Unchanged means
// the same file (device and inode: a writer that renames a new file into
// place makes another), size, modification time and change time. The
// change time is the kernel's, which no writer can set back (a restore
// that keeps the old modification time still moves it), and a file is
// kept only when that time is quietFor older than the read: a file
// written again within one tick of the file system's clock would keep
// its times, so one changed lately is read anew every time. A file that
// cannot be stat'ed is an error, never what was read before.

// quietFor is how long a file's times must lie behind a read for its
// bytes to be kept: well over the coarsest timestamp a file system keeps
// (two seconds) and a tick of the kernel's clock.
const quietFor = 5 * time.Second

// Bounds on what a fileCache keeps: a read's ciphertext is its text (at
// most MaxTextBytes) and a tag; a larger file is read every time.
// All the files kept hold at most maxCachedBytes: a server with many
// documents keeps the last ones read, not all of them.
const (
	maxCachedFile  = 2 * MaxTextBytes
	maxCachedFiles = 512
	maxCachedBytes = 8 << 20
)

// fileCache is the bytes of files read under a root, by name. Its bytes
// are shared by every call that reads the file: callers never change them.
type fileCache struct {
	// now is the wall clock the file system's times are compared with.
	now     func() time.Time
	mu      sync.Mutex
	entries map[string]cachedFile
	bytes   int // of the entries' data
}

type cachedFile struct {
	fi   os.FileInfo
	data []byte
}

func newFileCache() *fileCache {
	return &fileCache{now: time.Now, entries: map[string]cachedFile{}}
}

// readFile is root.ReadFile(name), from memory when the file is the one
// kept, unchanged. A file not kept is read as root.ReadFile reads it, its
// times taken from the file opened, with no stat more.
func (c *fileCache) readFile(root *os.Root, name string) ([]byte, error) {
	if c == nil {
		return root.ReadFile(name)
	}
	c.mu.Lock()
	e, kept := c.entries[name]
	c.mu.Unlock()
	if kept {
		fi, err := root.Stat(name)
		if err != nil {
			c.drop(name)
			return nil, err
		}
		if unchanged(fi, e.fi) {
			return e.data, nil
		}
	}
	read := c.now()
	data, fi, err := readOpened(root, name)
	if err != nil {
		c.drop(name)
		return nil, err
	}
	// Kept with the times seen before it was read: a change while it was
	// read moves them, so the next stat misses.
	if keepable(fi, read) && int64(len(data)) == fi.Size() && len(data) <= maxCachedFile {
		c.mu.Lock()
		c.removeLocked(name)
		// Room for it: any other entry goes first (map order).
		for k := range c.entries {
			if len(c.entries) < maxCachedFiles && c.bytes+len(data) <= maxCachedBytes {
				break
			}
			c.removeLocked(k)
		}
		c.entries[name] = cachedFile{fi: fi, data: data}
		c.bytes += len(data)
		c.mu.Unlock()
	} else if kept {
		c.drop(name)
	}
	return data, nil
}

// readOpened is root.ReadFile(name) that also returns what the file
// opened was before it was read.
func readOpened(root *os.Root, name string) ([]byte, os.FileInfo, error) {
	f, err := root.Open(name)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	// As os.ReadFile: room for the whole file and the read that finds its
	// end, and more as long as it grows.
	size := 512
	if n := fi.Size() + 1; n > int64(size) && int64(int(n)) == n {
		size = int(n)
	}
	data := make([]byte, 0, size)
	for {
		n, err := f.Read(data[len(data):cap(data)])
		data = data[:len(data)+n]
		if err == io.EOF {
			return data, fi, nil
		}
		if err != nil {
			return nil, nil, err
		}
		if len(data) == cap(data) {
			data = append(data, 0)[:len(data)]
		}
	}
}

func (c *fileCache) drop(name string) {
	c.mu.Lock()
	c.removeLocked(name)
	c.mu.Unlock()
}

func (c *fileCache) removeLocked(name string) {
	if e, ok := c.entries[name]; ok {
		c.bytes -= len(e.data)
		delete(c.entries, name)
	}
}

// keepable reports whether a file of fi may be kept when read at read: a
// regular file whose times are quietFor behind the read.
func keepable(fi os.FileInfo, read time.Time) bool {
	ctime, ok := changeTime(fi)
	if !ok || !fi.Mode().IsRegular() {
		return false
	}
	limit := read.Add(-quietFor)
	return ctime.Before(limit) && fi.ModTime().Before(limit)
}

// unchanged reports whether fi is the file seen as seen: the same file,
// size, modification and change time.
func unchanged(fi, seen os.FileInfo) bool {
	if !os.SameFile(fi, seen) || fi.Size() != seen.Size() || !fi.ModTime().Equal(seen.ModTime()) {
		return false
	}
	a, okA := changeTime(fi)
	b, okB := changeTime(seen)
	return okA && okB && a.Equal(b)
}
