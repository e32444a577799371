package files

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/pdmcp/pdmcp/server/refusal"
)

// File is a regular file inside the root, opened once and checked after the
// open. Close closes it and the root handle.
type File struct {
	*os.File
	Resolved
	// Dir is the root opened as an [os.Root]: tools create files beside
	// this one through it, so nothing they write can land outside the root.
	Dir *os.Root
}

// Close closes the file and the root handle.
func (f *File) Close() error {
	err := f.File.Close()
	if cerr := f.Dir.Close(); err == nil {
		err = cerr
	}
	return err
}

// Open applies every rule and opens the file for reading. The open goes
// through an [os.Root], so no link swapped in on the way can reach outside
// the root, and the opened file must be the one checked (same device and
// inode, still regular, still one name), or the call is FILE_CHANGED.
func (r *Resolver) Open(p string) (*File, error) {
	res, err := r.Resolve(p)
	if err != nil {
		return nil, err
	}
	if r.afterCheck != nil {
		r.afterCheck()
	}
	root, err := os.OpenRoot(r.root)
	if err != nil {
		return nil, fmt.Errorf("files: open the file root: %w", err)
	}
	f, err := root.OpenFile(filepath.FromSlash(res.Rel), os.O_RDONLY|openFlags, 0)
	if err != nil {
		root.Close()
		return nil, changed(p)
	}
	fi, err := f.Stat()
	if err != nil || !os.SameFile(res.Info, fi) || !fi.Mode().IsRegular() ||
		fi.Size() != res.Info.Size() || !fi.ModTime().Equal(res.Info.ModTime()) {
		f.Close()
		root.Close()
		return nil, changed(p)
	}
	if n, known := linkCount(fi, f); !known || n > 1 {
		f.Close()
		root.Close()
		return nil, hardLinked(p, n)
	}
	res.Info = fi
	return &File{File: f, Resolved: res, Dir: root}, nil
}

func changed(p string) *Error {
	return refuse(refusal.FileChanged, "%q changed between the check and the open (swapped for a link or another file); try again", p)
}

// Size is the opened file's size.
func (f *File) Size() int64 { return f.Info.Size() }

// Mode is the opened file's mode.
func (f *File) Mode() fs.FileMode { return f.Info.Mode() }
