//go:build linux || darwin

package server

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// cacheRoot is a root with the file name in a folder, holding v1.
func cacheRoot(t *testing.T) (*os.Root, string, string) {
	t.Helper()
	return cacheRootAt(t, filepath.Join("docs", "a.bin"))
}

// cacheRootAt is a root holding v1 as the file name, its folders made.
func cacheRootAt(t *testing.T, name string) (*os.Root, string, string) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("version-1"), 0o600); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	return root, name, path
}

// later is a fileCache whose clock is an hour ahead: every file it reads
// is quiet, so it keeps each one.
func later() *fileCache {
	c := newFileCache()
	c.now = func() time.Time { return time.Now().Add(time.Hour) }
	return c
}

// throughRoot is later, checking every kept file through the root.
func throughRoot() *fileCache {
	c := later()
	c.holdDirs = false
	return c
}

// checkHeld fails unless the folders c holds are exactly those its kept
// files and held folders refer to, each open, counted once per
// reference, within maxHeldDirs (no check is in flight in a test).
func checkHeld(t *testing.T, c *fileCache) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	refs := map[*heldDir]int{}
	for name, e := range c.entries {
		if e.dir != nil {
			if c.dirs[e.dir.key] != e.dir {
				t.Fatalf("%s is checked in %s, not held", name, e.dir.key)
			}
			refs[e.dir]++
		}
	}
	for key, d := range c.dirs {
		if d.key != key || d.f.Fd() == ^uintptr(0) {
			t.Fatalf("folder %s held as %s, descriptor %d", d.key, key, int(d.f.Fd()))
		}
		if d.parent != nil {
			if c.dirs[d.parent.key] != d.parent {
				t.Fatalf("folder %s is in %s, not held", key, d.parent.key)
			}
			refs[d.parent]++
		}
	}
	for key, d := range c.dirs {
		if d.refs != refs[d] || d.refs <= 0 {
			t.Fatalf("folder %s: %d references counted, %d found", key, d.refs, refs[d])
		}
	}
	if len(c.dirs) > maxHeldDirs {
		t.Fatalf("%d folders held, over %d", len(c.dirs), maxHeldDirs)
	}
}

// heldSame is the held check of the file kept as name: ok is false when
// it is not checked in a held folder.
func heldSame(c *fileCache, name string) (same, ok bool) {
	c.mu.Lock()
	e, kept := c.entries[name]
	c.mu.Unlock()
	if !kept || e.dir == nil {
		return false, false
	}
	return e.dir.inPlace() && sameAt(e.dir.fd, e.base, e.id), true
}

func TestFileCacheAnswersAnUnchangedQuietFileFromMemory(t *testing.T) {
	root, name, _ := cacheRoot(t)
	c := later()
	a, err := c.readFile(root, name)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.readFile(root, name)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != "version-1" || &a[0] != &b[0] {
		t.Fatalf("second read = %q, same bytes %v; want version-1 from memory", b, &a[0] == &b[0])
	}
}

// setTimesBack gives path the modification time it had, as a restore
// that keeps times does.
func setTimesBack(t *testing.T, path string, fi os.FileInfo) {
	t.Helper()
	if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
}

// waitForNewChangeTime returns once a change to path gets another change
// time than fi's (the file system's clock moved on), touching its mode.
func waitForNewChangeTime(t *testing.T, path string, fi os.FileInfo) {
	t.Helper()
	was, _ := identOf(fi)
	for {
		if err := os.Chmod(path, 0o600); err != nil {
			t.Fatal(err)
		}
		now, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if id, _ := identOf(now); id.ctime != was.ctime {
			return
		}
	}
}

func TestFileCacheSeesEveryChange(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, path, top string, fi os.FileInfo)
		want   string // "" for an error
	}{
		{"replaced by rename, same size and times", func(t *testing.T, path, _ string, fi os.FileInfo) {
			tmp := path + ".tmp"
			if err := os.WriteFile(tmp, []byte("version-2"), 0o600); err != nil {
				t.Fatal(err)
			}
			setTimesBack(t, tmp, fi)
			if err := os.Rename(tmp, path); err != nil {
				t.Fatal(err)
			}
		}, "version-2"},
		{"rewritten in place, same size, times set back", func(t *testing.T, path, _ string, fi os.FileInfo) {
			waitForNewChangeTime(t, path, fi)
			if err := os.WriteFile(path, []byte("version-3"), 0o600); err != nil {
				t.Fatal(err)
			}
			setTimesBack(t, path, fi)
		}, "version-3"},
		{"grown in place", func(t *testing.T, path, _ string, _ os.FileInfo) {
			if err := os.WriteFile(path, []byte("version-10"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, "version-10"},
		{"removed", func(t *testing.T, path, _ string, _ os.FileInfo) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}, ""},
		{"replaced by a symbolic link to another file of the same size and times", func(t *testing.T, path, _ string, fi os.FileInfo) {
			other := filepath.Join(filepath.Dir(path), "b.bin")
			if err := os.WriteFile(other, []byte("version-4"), 0o600); err != nil {
				t.Fatal(err)
			}
			setTimesBack(t, other, fi)
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("b.bin", path); err != nil {
				t.Fatal(err)
			}
		}, "version-4"},
		{"restored from an older copy, its times kept", func(t *testing.T, path, _ string, fi os.FileInfo) {
			// The copy an operator kept, taken before the file was read.
			old := filepath.Join(t.TempDir(), "a.bin")
			if err := os.WriteFile(old, []byte("version-0"), 0o600); err != nil {
				t.Fatal(err)
			}
			setTimesBack(t, old, fi)
			waitForNewChangeTime(t, path, fi)
			b, err := os.ReadFile(old)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			setTimesBack(t, path, fi)
		}, "version-0"},
		{"replaced by a folder", func(t *testing.T, path, _ string, _ os.FileInfo) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		}, ""},
		{"moved out of the root, a symbolic link to it in its place", func(t *testing.T, path, _ string, _ os.FileInfo) {
			out := filepath.Join(t.TempDir(), "a.bin")
			if err := os.Rename(path, out); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(out, path); err != nil {
				t.Fatal(err)
			}
		}, ""},
		{"its folder renamed", func(t *testing.T, path, _ string, _ os.FileInfo) {
			dir := filepath.Dir(path)
			if err := os.Rename(dir, dir+".old"); err != nil {
				t.Fatal(err)
			}
		}, ""},
		{"its folder removed", func(t *testing.T, path, _ string, _ os.FileInfo) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(filepath.Dir(path)); err != nil {
				t.Fatal(err)
			}
		}, ""},
		{"its folder replaced by another holding a file of the same size and times", func(t *testing.T, path, _ string, fi os.FileInfo) {
			dir := filepath.Dir(path)
			if err := os.Mkdir(dir+".new", 0o700); err != nil {
				t.Fatal(err)
			}
			other := filepath.Join(dir+".new", filepath.Base(path))
			if err := os.WriteFile(other, []byte("version-5"), 0o600); err != nil {
				t.Fatal(err)
			}
			setTimesBack(t, other, fi)
			if err := os.Rename(dir, dir+".old"); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(dir+".new", dir); err != nil {
				t.Fatal(err)
			}
		}, "version-5"},
		{"its folder replaced by a symbolic link to it, renamed within the root", func(t *testing.T, path, _ string, _ os.FileInfo) {
			// The root follows a link that stays inside it: the same
			// file, unchanged, is what it finds.
			dir := filepath.Dir(path)
			if err := os.Rename(dir, dir+".old"); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(filepath.Base(dir)+".old", dir); err != nil {
				t.Fatal(err)
			}
		}, "version-1"},
		{"the folder under the root moved out of it, a symbolic link to it in its place", func(t *testing.T, _, top string, _ os.FileInfo) {
			// The very file, unchanged, now outside the root.
			out := filepath.Join(t.TempDir(), "docs")
			if err := os.Rename(top, out); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(out, top); err != nil {
				t.Fatal(err)
			}
		}, ""},
		{"the folder under the root moved out of it", func(t *testing.T, _, top string, _ os.FileInfo) {
			if err := os.Rename(top, filepath.Join(t.TempDir(), "docs")); err != nil {
				t.Fatal(err)
			}
		}, ""},
	} {
		for _, layout := range []string{filepath.Join("docs", "a.bin"), filepath.Join("docs", "sub", "a.bin")} {
			for _, mode := range []struct {
				name string
				new  func() *fileCache
			}{{"held", later}, {"through the root", throughRoot}} {
				t.Run(tc.name+"/"+layout+"/"+mode.name, func(t *testing.T) {
					root, name, path := cacheRootAt(t, layout)
					top := filepath.Join(strings.TrimSuffix(path, name), "docs")
					c := mode.new()
					if _, err := c.readFile(root, name); err != nil {
						t.Fatal(err)
					}
					checkHeld(t, c)
					same, held := heldSame(c, name)
					if held != c.holdDirs || held && !same {
						t.Fatalf("before the change: held %v, unchanged %v", held, same)
					}
					fi, err := os.Stat(path)
					if err != nil {
						t.Fatal(err)
					}
					tc.change(t, path, top, fi)
					// Held, the check no longer answers from memory: the
					// root decides.
					if same, _ := heldSame(c, name); same {
						t.Fatal("the held check still finds the file unchanged")
					}
					got, err := c.readFile(root, name)
					switch {
					case tc.want == "" && err == nil:
						t.Fatalf("read after the change = %q, want an error", got)
					case tc.want != "" && (err != nil || string(got) != tc.want):
						t.Fatalf("read after the change = %q, %v; want %q", got, err, tc.want)
					}
					if (tc.name == "removed" || strings.HasPrefix(tc.name, "its folder r")) && tc.want == "" && !errors.Is(err, fs.ErrNotExist) {
						t.Fatalf("read of a removed file: %v, want fs.ErrNotExist", err)
					}
					checkHeld(t, c)
				})
			}
		}
	}
}

// TestFileCacheReadsARecentFileEveryTime: a file whose times are within
// quietFor of the read is never kept, so a rewrite that keeps its size and
// its times (within one tick of the file system's clock) is still seen.
func TestFileCacheReadsARecentFileEveryTime(t *testing.T) {
	root, name, path := cacheRoot(t)
	c := newFileCache()
	if _, err := c.readFile(root, name); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("version-4"), 0o600); err != nil {
		t.Fatal(err)
	}
	setTimesBack(t, path, fi)
	got, err := c.readFile(root, name)
	if err != nil || string(got) != "version-4" {
		t.Fatalf("read after the rewrite = %q, %v; want version-4", got, err)
	}
}

func TestFileCacheReadsWhatReadFileReads(t *testing.T) {
	dir := t.TempDir()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	for _, size := range []int{0, 1, 511, 512, 513, maxCachedFile, maxCachedFile + 1, 3 * maxCachedFile} {
		name := fmt.Sprintf("f%d.bin", size)
		want := bytes.Repeat([]byte{'x', 'y', 'z'}, size/3+1)[:size]
		if err := os.WriteFile(filepath.Join(dir, name), want, 0o600); err != nil {
			t.Fatal(err)
		}
		c := later()
		a, err := c.readFile(root, name)
		if err != nil || !bytes.Equal(a, want) {
			t.Fatalf("%d bytes: read %d bytes, %v", size, len(a), err)
		}
		b, err := c.readFile(root, name)
		if err != nil || !bytes.Equal(b, want) {
			t.Fatalf("%d bytes: read again %d bytes, %v", size, len(b), err)
		}
		// Only a file within the bound is kept.
		if kept := size > 0 && &a[0] == &b[0]; kept != (size > 0 && size <= maxCachedFile) {
			t.Fatalf("%d bytes: kept = %v", size, kept)
		}
	}
}

// TestFileCacheBounded: however many files are read, what is kept stays
// within maxCachedBytes and maxCachedFiles, and the last file read is kept.
func TestFileCacheBounded(t *testing.T) {
	dir := t.TempDir()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	c := later()
	big := bytes.Repeat([]byte{'b'}, maxCachedFile)
	n := maxCachedBytes/maxCachedFile + 8
	for i := range n {
		name := fmt.Sprintf("big%d.bin", i)
		if err := os.WriteFile(filepath.Join(dir, name), big, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := c.readFile(root, name); err != nil {
			t.Fatal(err)
		}
		// Read again: the same file read twice is counted once.
		if _, err := c.readFile(root, name); err != nil {
			t.Fatal(err)
		}
		sum := 0
		for _, e := range c.entries {
			sum += len(e.data)
		}
		if sum != c.bytes || c.bytes > maxCachedBytes || len(c.entries) > maxCachedFiles {
			t.Fatalf("after %d files: %d entries of %d bytes (counted %d)", i+1, len(c.entries), sum, c.bytes)
		}
		if _, ok := c.entries[name]; !ok {
			t.Fatalf("the last file read, %s, is not kept", name)
		}
	}
	for i := range maxCachedFiles + 8 {
		name := fmt.Sprintf("small%d.bin", i)
		if err := os.WriteFile(filepath.Join(dir, name), []byte("s"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := c.readFile(root, name); err != nil {
			t.Fatal(err)
		}
	}
	if len(c.entries) > maxCachedFiles || c.bytes > maxCachedBytes {
		t.Errorf("%d entries, %d bytes", len(c.entries), c.bytes)
	}
}

// TestFileCacheHoldsFoldersBounded: however many folders the files read
// are in, at most maxHeldDirs are held; a file in a folder beyond them is
// checked through the root, still kept; a folder no file kept is in any
// more is closed.
func TestFileCacheHoldsFoldersBounded(t *testing.T) {
	dir := t.TempDir()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	c := later()
	var names []string
	for i := range maxHeldDirs + 8 {
		name := filepath.Join("docs", fmt.Sprintf("d%d", i), "a.bin")
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(name), 0o600); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	checked := map[bool]int{}
	for _, name := range names {
		a, err := c.readFile(root, name)
		if err != nil {
			t.Fatal(err)
		}
		b, err := c.readFile(root, name)
		if err != nil || string(b) != name || &a[0] != &b[0] {
			t.Fatalf("%s read again = %q, %v, from memory %v", name, b, err, &a[0] == &b[0])
		}
		_, held := heldSame(c, name)
		checked[held]++
		checkHeld(t, c)
	}
	// The root's folder and docs hold two places.
	if len(c.dirs) != maxHeldDirs || checked[true] != maxHeldDirs-2 || checked[false] != len(names)-checked[true] {
		t.Fatalf("%d folders held; files checked in a held folder: %d, through the root: %d", len(c.dirs), checked[true], checked[false])
	}

	// A removed file's folder, now holding no file kept, is closed.
	c.mu.Lock()
	first := c.entries[names[0]].dir
	c.mu.Unlock()
	if err := os.Remove(filepath.Join(dir, names[0])); err != nil {
		t.Fatal(err)
	}
	if _, err := c.readFile(root, names[0]); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("read of a removed file: %v, want fs.ErrNotExist", err)
	}
	checkHeld(t, c)
	if _, ok := c.dirs[first.key]; ok || first.f.Fd() != ^uintptr(0) {
		t.Fatalf("the folder of the removed file is still held (%v) or open", ok)
	}
	// Its place is taken by the next file kept in a folder not held.
	if _, err := c.readFile(root, names[len(names)-1]); err != nil {
		t.Fatal(err)
	}
	if _, held := heldSame(c, names[len(names)-1]); held {
		t.Fatal("a file kept is held without being read again")
	}
	c.drop(names[len(names)-1])
	if _, err := c.readFile(root, names[len(names)-1]); err != nil {
		t.Fatal(err)
	}
	if _, held := heldSame(c, names[len(names)-1]); !held {
		t.Fatal("a file read again is not held with a folder free")
	}
	checkHeld(t, c)
}

// TestFileCacheClose: close closes every folder held and forgets the
// files kept; reads go on through the root, keeping nothing.
func TestFileCacheClose(t *testing.T) {
	root, name, path := cacheRoot(t)
	c := later()
	if _, err := c.readFile(root, name); err != nil {
		t.Fatal(err)
	}
	held := heldFolders(c)
	if len(held) != 2 {
		t.Fatalf("%d folders held, want the root's and docs", len(held))
	}
	c.close()
	checkClosed(t, held)
	if err := os.WriteFile(path, []byte("version-2"), 0o600); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		got, err := c.readFile(root, name)
		if err != nil || string(got) != "version-2" {
			t.Fatalf("read after close = %q, %v; want version-2", got, err)
		}
	}
	if len(c.entries) != 0 || len(c.dirs) != 0 {
		t.Fatalf("after close: %d files kept, %d folders held", len(c.entries), len(c.dirs))
	}
}

// TestFileCacheHeldThroughAnotherRoot: a root other than the one the
// folders were held through is asked itself, never answered from them.
func TestFileCacheHeldThroughAnotherRoot(t *testing.T) {
	root, name, _ := cacheRoot(t)
	other, _, otherPath := cacheRoot(t)
	c := later()
	if _, err := c.readFile(root, name); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(otherPath); err != nil {
		t.Fatal(err)
	}
	if got, err := c.readFile(other, name); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("read through the other root = %q, %v; want fs.ErrNotExist", got, err)
	}
	checkHeld(t, c)
}

// BenchmarkFileCacheHit is a kept 4 KiB file read again, as a read finds
// its ciphertext, checked through the root (as before) and in its held
// folder.
func BenchmarkFileCacheHit(b *testing.B) {
	for _, mode := range []struct {
		name string
		hold bool
	}{{"root.Stat", false}, {"held folder", true}} {
		b.Run(mode.name, func(b *testing.B) {
			dir := b.TempDir()
			name := filepath.Join("documents", "doc.v1.bin")
			if err := os.MkdirAll(filepath.Join(dir, "documents"), 0o700); err != nil {
				b.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, name), bytes.Repeat([]byte{'c'}, 4096), 0o600); err != nil {
				b.Fatal(err)
			}
			root, err := os.OpenRoot(dir)
			if err != nil {
				b.Fatal(err)
			}
			defer root.Close()
			c := newFileCache()
			c.now = func() time.Time { return time.Now().Add(time.Hour) }
			c.holdDirs = mode.hold
			defer c.close()
			first, err := c.readFile(root, name)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				data, err := c.readFile(root, name)
				if err != nil || &data[0] != &first[0] {
					b.Fatalf("read again: %v, from memory %v", err, err == nil && &data[0] == &first[0])
				}
			}
		})
	}
}

// TestFileCacheNeverClosesAFolderInUse: a folder a check is using stays
// open through close and eviction, and is closed when the check ends.
func TestFileCacheNeverClosesAFolderInUse(t *testing.T) {
	root, name, _ := cacheRoot(t)
	c := later()
	if _, err := c.readFile(root, name); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	d := c.entries[name].dir
	d.refs++ // as a check in flight does
	c.mu.Unlock()
	c.close()
	if d.f.Fd() == ^uintptr(0) || d.parent.f.Fd() == ^uintptr(0) {
		t.Fatal("a folder in use, or the one above it, closed")
	}
	c.mu.Lock()
	c.releaseLocked(d)
	c.mu.Unlock()
	if d.f.Fd() != ^uintptr(0) || d.parent.f.Fd() != ^uintptr(0) || len(c.dirs) != 0 {
		t.Fatalf("after the check: folders open, %d held", len(c.dirs))
	}
}

// TestFileCacheConcurrentReads: reads of kept files in held folders while
// others are dropped, replaced and the cache closed all read the right
// bytes, and leave the held folders counted right.
func TestFileCacheConcurrentReads(t *testing.T) {
	dir := t.TempDir()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	var names []string
	for i := range 4 {
		name := filepath.Join("docs", fmt.Sprintf("d%d", i%2), fmt.Sprintf("f%d.bin", i))
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(name), 0o600); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	c := later()
	errs := make(chan error, 8)
	for g := range 8 {
		go func() {
			for i := range 300 {
				name := names[(g+i)%len(names)]
				if g == 0 && i%10 == 0 {
					c.drop(name)
				}
				if g == 1 && i == 200 {
					c.close()
				}
				got, err := c.readFile(root, name)
				if err == nil && string(got) != name {
					err = fmt.Errorf("%s read as %q", name, got)
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	checkHeld(t, c)
	if len(c.dirs) != 0 {
		t.Fatalf("%d folders held after close", len(c.dirs))
	}
}

// TestServerCloseClosesTheCache: Server.Close closes the folders the
// cache holds, and a document read after it is refused by the closed
// root, never answered from the kept copy.
func TestServerCloseClosesTheCache(t *testing.T) {
	root, name, _ := cacheRoot(t)
	s := &Server{root: root, ciphertexts: later()}
	if _, err := s.ciphertexts.readFile(s.root, name); err != nil {
		t.Fatal(err)
	}
	held := heldFolders(s.ciphertexts)
	if len(held) == 0 {
		t.Fatal("the read held no folder")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	checkClosed(t, held)
	if got, err := s.ciphertexts.readFile(s.root, name); err == nil {
		t.Fatalf("a read after Server.Close returned %q; want the closed root's error", got)
	}
}

// heldFolders is the folders c holds now.
func heldFolders(c *fileCache) []*heldDir {
	var held []*heldDir
	for _, d := range c.dirs {
		held = append(held, d)
	}
	return held
}

// checkClosed fails unless every folder of held is closed.
func checkClosed(t *testing.T, held []*heldDir) {
	t.Helper()
	for _, d := range held {
		if d.f.Fd() != ^uintptr(0) {
			t.Fatalf("folder %s still open after close", d.key)
		}
	}
}
