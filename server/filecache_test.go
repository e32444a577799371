//go:build linux || darwin

package server

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// cacheRoot is a root with the file name in a folder, holding v1.
func cacheRoot(t *testing.T) (*os.Root, string, string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "docs"), 0o700); err != nil {
		t.Fatal(err)
	}
	name := filepath.Join("docs", "a.bin")
	path := filepath.Join(dir, name)
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
	was, _ := changeTime(fi)
	for {
		if err := os.Chmod(path, 0o600); err != nil {
			t.Fatal(err)
		}
		now, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if ct, _ := changeTime(now); !ct.Equal(was) {
			return
		}
	}
}

func TestFileCacheSeesEveryChange(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, path string, fi os.FileInfo)
		want   string // "" for an error
	}{
		{"replaced by rename, same size and times", func(t *testing.T, path string, fi os.FileInfo) {
			tmp := path + ".tmp"
			if err := os.WriteFile(tmp, []byte("version-2"), 0o600); err != nil {
				t.Fatal(err)
			}
			setTimesBack(t, tmp, fi)
			if err := os.Rename(tmp, path); err != nil {
				t.Fatal(err)
			}
		}, "version-2"},
		{"rewritten in place, same size, times set back", func(t *testing.T, path string, fi os.FileInfo) {
			waitForNewChangeTime(t, path, fi)
			if err := os.WriteFile(path, []byte("version-3"), 0o600); err != nil {
				t.Fatal(err)
			}
			setTimesBack(t, path, fi)
		}, "version-3"},
		{"grown in place", func(t *testing.T, path string, _ os.FileInfo) {
			if err := os.WriteFile(path, []byte("version-10"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, "version-10"},
		{"removed", func(t *testing.T, path string, _ os.FileInfo) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}, ""},
		{"replaced by a symbolic link to another file of the same size and times", func(t *testing.T, path string, fi os.FileInfo) {
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
		{"restored from an older copy, its times kept", func(t *testing.T, path string, fi os.FileInfo) {
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
		{"replaced by a folder", func(t *testing.T, path string, _ os.FileInfo) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, name, path := cacheRoot(t)
			c := later()
			if _, err := c.readFile(root, name); err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			tc.change(t, path, fi)
			got, err := c.readFile(root, name)
			switch {
			case tc.want == "" && err == nil:
				t.Fatalf("read after the change = %q, want an error", got)
			case tc.want != "" && (err != nil || string(got) != tc.want):
				t.Fatalf("read after the change = %q, %v; want %q", got, err, tc.want)
			}
			if tc.name == "removed" && !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("read of a removed file: %v, want fs.ErrNotExist", err)
			}
		})
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
