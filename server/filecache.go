package server

import (
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// A read's ciphertext is read from the manifest's folder on every call:
// opened, read and closed, a dozen system calls. fileCache answers a file
// unchanged since it was read from memory after a stat (see heldDir for
// how it is found). Unchanged means
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

// A kept file is checked on each read with one fstatat of its name,
// without following a symbolic link, in its folder held open since the
// file was read, and one more for each folder on its path: its name in
// the folder above it (the root's own folder held as well) is still
// that folder, no symbolic link. That is the walk os.Root.Stat makes,
// without opening and closing each folder again, so it reaches only what
// the root would. Whatever it does not find so (a name that is or passes
// through a symbolic link, a folder renamed, removed or replaced, a name
// not plain, a folder not held) is asked of the root as before: the
// shortcut only ever answers "unchanged" where root.Stat would.

// Bounds on what a fileCache keeps: a read's ciphertext is its text (at
// most MaxTextBytes) and a tag; a larger file is read every time.
// All the files kept hold at most maxCachedBytes: a server with many
// documents keeps the last ones read, not all of them. maxHeldDirs
// bounds the folders held open, the root's own included: at most that
// many descriptors; the files of a folder beyond it are checked through
// the root.
const (
	maxCachedFile  = 2 * MaxTextBytes
	maxCachedFiles = 512
	maxCachedBytes = 8 << 20
	maxHeldDirs    = 64
)

// fileCache is the bytes of files read under a root, by name. Its bytes
// are shared by every call that reads the file: callers never change them.
type fileCache struct {
	// now is the wall clock the file system's times are compared with.
	now func() time.Time
	// holdDirs is whether kept files are checked in their held folders
	// (false: through the root every time, as a test compares).
	holdDirs bool
	mu       sync.Mutex
	entries  map[string]cachedFile
	bytes    int // of the entries' data
	// root is the root the held folders were opened through; a read
	// through another one is checked through it. dirs are the folders
	// held, by name under root ("." for its own).
	root   *os.Root
	dirs   map[string]*heldDir
	closed bool
}

type cachedFile struct {
	fi   os.FileInfo
	data []byte
	// dir is the folder held that the file was found in as base, the
	// file then being id; nil when the file is checked through the root.
	dir  *heldDir
	base string
	id   fileIdent
}

// fileIdent is what a stat says of a file that a check compares: which
// file it is, whether a folder, its size and times (nanoseconds).
type fileIdent struct {
	dev, ino     uint64
	dir          bool
	size         int64
	mtime, ctime int64
}

// heldDir is a folder under the root held open, to check the kept files
// in it without opening it again (see fileCache's bounds).
type heldDir struct {
	f      *os.File
	fd     int
	parent *heldDir // nil for the root's own folder
	name   string   // in parent
	key    string   // in fileCache.dirs
	id     fileIdent
	// refs counts the entries in it, the held folders in it and the
	// checks using it: it is closed when none is left, never while a
	// check uses its descriptor.
	refs int
}

func newFileCache() *fileCache {
	return &fileCache{now: time.Now, holdDirs: true, entries: map[string]cachedFile{}, dirs: map[string]*heldDir{}}
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
	held := kept && e.dir != nil && root == c.root
	if held {
		e.dir.refs++
	}
	c.mu.Unlock()
	if held {
		same := e.dir.inPlace() && sameAt(e.dir.fd, e.base, e.id)
		c.mu.Lock()
		c.releaseLocked(e.dir)
		c.mu.Unlock()
		if same {
			return e.data, nil
		}
	}
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
		e := cachedFile{fi: fi, data: data}
		if id, ok := identOf(fi); ok && c.holdDirs && plainName(name) {
			e.dir, e.base, e.id = c.holdDir(root, filepath.Dir(name)), filepath.Base(name), id
		}
		c.mu.Lock()
		c.removeLocked(name)
		if c.closed {
			c.releaseLocked(e.dir)
			c.mu.Unlock()
			return data, nil
		}
		// Room for it: any other entry goes first (map order).
		for k := range c.entries {
			if len(c.entries) < maxCachedFiles && c.bytes+len(data) <= maxCachedBytes {
				break
			}
			c.removeLocked(k)
		}
		c.entries[name] = e
		c.bytes += len(data)
		c.mu.Unlock()
	} else if kept {
		c.drop(name)
	}
	return data, nil
}

// plainName reports whether name is a path under the root with nothing
// to resolve: no "..", ".", empty or trailing element.
func plainName(name string) bool {
	return filepath.IsLocal(name) && filepath.Clean(name) == name
}

// sameAt reports whether the entry name in the folder open as dirfd is
// the file id, unchanged.
func sameAt(dirfd int, name string, id fileIdent) bool {
	got, err := lstatAt(dirfd, name)
	return err == nil && got == id
}

// inPlace reports whether d is still where it was held: each folder on
// its path, from the root's down, found by its name in the folder above
// it, not through a symbolic link, as the same folder. Held, a folder's
// inode cannot be another's.
func (d *heldDir) inPlace() bool {
	if d.parent == nil {
		return true
	}
	return d.parent.inPlace() && d.atItsName()
}

// atItsName reports whether d's name in its parent is d, a folder, not a
// symbolic link.
func (d *heldDir) atItsName() bool {
	id, err := lstatAt(d.parent.fd, d.name)
	return err == nil && id.dir && id.dev == d.id.dev && id.ino == d.id.ino
}

// holdDir is the folder name (a plain name under root, or ".") held, one
// reference more taken on it; nil when it cannot be held: another root,
// the cache closed, maxHeldDirs reached, or the folder not found where
// its name says without a symbolic link.
func (c *fileCache) holdDir(root *os.Root, name string) *heldDir {
	c.mu.Lock()
	if c.closed || c.root != nil && c.root != root {
		c.mu.Unlock()
		return nil
	}
	c.root = root
	if d, ok := c.dirs[name]; ok {
		d.refs++
		c.mu.Unlock()
		return d
	}
	full := len(c.dirs) >= maxHeldDirs
	c.mu.Unlock()
	if full {
		return nil
	}
	var parent *heldDir
	if name != "." {
		if parent = c.holdDir(root, filepath.Dir(name)); parent == nil {
			return nil
		}
	}
	d := openHeld(root, name, parent)
	c.mu.Lock()
	defer c.mu.Unlock()
	if d == nil || c.closed || len(c.dirs) >= maxHeldDirs {
		if d != nil {
			d.f.Close()
		}
		c.releaseLocked(parent)
		return nil
	}
	if had, ok := c.dirs[name]; ok {
		// Held by another read meanwhile.
		d.f.Close()
		c.releaseLocked(parent)
		had.refs++
		return had
	}
	d.refs = 1
	c.dirs[name] = d
	return d
}

// openHeld opens the folder name through root, nil unless it is a folder
// found in parent (nil: it is the root's own) by its name, not through a
// symbolic link.
func openHeld(root *os.Root, name string, parent *heldDir) *heldDir {
	f, err := root.Open(name)
	if err != nil {
		return nil
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil
	}
	id, ok := identOf(fi)
	if !ok || !id.dir {
		f.Close()
		return nil
	}
	d := &heldDir{f: f, fd: int(f.Fd()), parent: parent, name: filepath.Base(name), key: name, id: id}
	if parent != nil && !d.atItsName() {
		f.Close()
		return nil
	}
	return d
}

// releaseLocked gives up one reference on d, closing it, and so on up,
// when it was the last.
func (c *fileCache) releaseLocked(d *heldDir) {
	for d != nil {
		if d.refs--; d.refs > 0 {
			return
		}
		delete(c.dirs, d.key)
		d.f.Close()
		d = d.parent
	}
}

// close forgets every file kept and closes the folders held (one still
// used by a check is closed when it ends); reads after it go through
// the root, nothing kept.
func (c *fileCache) close() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for name := range c.entries {
		c.removeLocked(name)
	}
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
		c.releaseLocked(e.dir)
	}
}

// keepable reports whether a file of fi may be kept when read at read: a
// regular file whose times are quietFor behind the read.
func keepable(fi os.FileInfo, read time.Time) bool {
	id, ok := identOf(fi)
	if !ok || !fi.Mode().IsRegular() {
		return false
	}
	limit := read.Add(-quietFor)
	return time.Unix(0, id.ctime).Before(limit) && fi.ModTime().Before(limit)
}

// unchanged reports whether fi is the file seen as seen: the same file,
// size, modification and change time.
func unchanged(fi, seen os.FileInfo) bool {
	a, okA := identOf(fi)
	b, okB := identOf(seen)
	return okA && okB && a == b
}
