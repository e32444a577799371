package files

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
)

// MaxLinks is how many symbolic links one path may pass through; more is
// PATH_UNRESOLVABLE (a loop, or a chain no one needs).
const MaxLinks = 40

// Resolver judges paths against one file root.
type Resolver struct {
	root   string
	flavor Flavor
	// afterCheck runs between the checks and the open; tests use it to
	// swap the file.
	afterCheck func()
}

// NewResolver returns a resolver for root, which must be an absolute path
// to a folder. Its links are resolved here, once: the root the grant records
// is the folder's resolved path, and comparisons are made against that.
func NewResolver(root string, opts ...Option) (*Resolver, error) {
	if !filepath.IsAbs(root) {
		return nil, fmt.Errorf("files: the file root %q is not absolute", root)
	}
	resolved, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, fmt.Errorf("files: resolve the file root: %w", err)
	}
	fi, err := os.Stat(resolved)
	if err != nil {
		return nil, fmt.Errorf("files: the file root: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("files: the file root %q is not a folder", root)
	}
	r := &Resolver{root: resolved, flavor: Native()}
	for _, o := range opts {
		o(r)
	}
	return r, nil
}

// Option changes a Resolver.
type Option func(*Resolver)

// AfterCheck runs fn in Open between the checks and the open: the server
// hands it its crash-point hook, which tests use to swap a file there.
func AfterCheck(fn func()) Option { return func(r *Resolver) { r.afterCheck = fn } }

// Root is the resolved root every path is judged against.
func (r *Resolver) Root() string { return r.root }

// Resolved is a path that named a regular file inside the root when it was
// checked.
type Resolved struct {
	Rel  string      // relative to the root, with / separators
	Abs  string      // absolute, every link resolved
	Info fs.FileInfo // from Lstat at the check
}

// Resolve applies the rules up to the type checks (form, OUTSIDE_ROOT,
// resolution, type and link count) without opening the file.
func (r *Resolver) Resolve(p string) (Resolved, error) {
	if err := CheckForm(p, r.flavor); err != nil {
		return Resolved{}, err
	}
	lx := Split(p, r.flavor)
	if lx.Drive != "" && r.flavor != Windows {
		return Resolved{}, outside(p)
	}
	var full string
	switch {
	case lx.Drive != "":
		full = filepath.Join(append([]string{lx.Drive + string(filepath.Separator)}, lx.Parts...)...)
	case lx.Absolute:
		full = filepath.Join(append([]string{filepath.VolumeName(r.root) + string(filepath.Separator)}, lx.Parts...)...)
	default:
		full = filepath.Join(append([]string{r.root}, lx.Parts...)...)
	}
	abs, err := r.walk(p, full)
	if err != nil {
		return Resolved{}, err
	}
	if !Within(r.root, abs, r.flavor) {
		return Resolved{}, outside(p)
	}
	rel := path.Join(components(abs)[len(components(r.root)):]...)
	fi, err := os.Lstat(abs)
	if err != nil || isLink(abs, fi) {
		// It was a resolved, existing name a moment ago.
		return Resolved{}, refuse(CodeFileChanged, "%q changed while it was being checked; try again", p)
	}
	if err := checkType(p, fi); err != nil {
		return Resolved{}, err
	}
	if n, known := linkCount(fi, nil); known && n > 1 {
		return Resolved{}, hardLinked(p, n)
	}
	return Resolved{Rel: rel, Abs: abs, Info: fi}, nil
}

func outside(p string) *Error {
	return refuse(CodeOutsideRoot, "%q is not inside the task's folder (or is the folder itself); name a file in it, relative to it or absolute", p)
}

func hardLinked(p string, n uint64) *Error {
	return refuse(CodeHardLinked, "%q has %d names (hard links); one of them may be outside the task's folder, so it is refused", p, n)
}

func checkType(p string, fi fs.FileInfo) error {
	switch {
	case fi.IsDir():
		return refuse(CodeIsADirectory, "%q is a folder; name a file", p)
	case !fi.Mode().IsRegular():
		return refuse(CodeNotRegular, "%q is not a regular file (a device, pipe or socket)", p)
	}
	return nil
}

// isLink reports a symbolic link, or on Windows a junction or other
// name-surrogate reparse point that can be read as a link.
func isLink(name string, fi fs.FileInfo) bool {
	if fi.Mode()&fs.ModeSymlink != 0 {
		return true
	}
	if fi.Mode()&fs.ModeIrregular != 0 && Native() == Windows {
		_, err := os.Readlink(name)
		return err == nil
	}
	return false
}

// walk resolves full (clean and absolute) one name at a time, following
// links, and returns the resolved path. p is the argument, for messages.
func (r *Resolver) walk(p, full string) (string, error) {
	vol := filepath.VolumeName(full)
	cur := vol + string(filepath.Separator)
	todo := components(full[len(vol):])
	if WithinOrEqual(r.root, full, r.flavor) {
		// Start at the root: its ancestors are known to exist.
		cur, todo = r.root, components(full)[len(components(r.root)):]
	}
	links := 0
	for len(todo) > 0 {
		name := todo[0]
		todo = todo[1:]
		if name == "." {
			continue
		}
		if name == ".." {
			cur = filepath.Dir(cur)
			continue
		}
		inside := WithinOrEqual(r.root, cur, r.flavor)
		next := filepath.Join(cur, name)
		fi, err := os.Lstat(next)
		if err != nil {
			rest := filepath.Join(append([]string{next}, todo...)...)
			if !inside || !WithinOrEqual(r.root, rest, r.flavor) {
				return "", outside(p)
			}
			return "", unresolved(p, err)
		}
		if !isLink(next, fi) {
			cur = next
			continue
		}
		if links++; links > MaxLinks {
			if !inside {
				return "", outside(p)
			}
			return "", refuse(CodeUnresolvable, "%q passes through more than %d links (a loop?)", p, MaxLinks)
		}
		target, err := os.Readlink(next)
		if err != nil {
			if !inside {
				return "", outside(p)
			}
			return "", unresolved(p, err)
		}
		if !filepath.IsAbs(target) {
			if strings.HasPrefix(target, string(filepath.Separator)) {
				// Rooted without a volume (Windows): on the link's volume.
				target = filepath.VolumeName(cur) + target
			} else {
				target = filepath.Join(cur, target)
			}
		}
		target = filepath.Clean(target)
		if inside && !WithinOrEqual(r.root, target, r.flavor) {
			// A link in the folder that leaves it: refused without looking
			// at where it goes.
			return "", outside(p)
		}
		if WithinOrEqual(r.root, target, r.flavor) {
			cur = r.root
			todo = append(components(target)[len(components(r.root)):], todo...)
		} else {
			tv := filepath.VolumeName(target)
			cur = tv + string(filepath.Separator)
			todo = append(components(target[len(tv):]), todo...)
		}
	}
	return cur, nil
}

// unresolved maps a failure to resolve a name inside the root.
func unresolved(p string, err error) *Error {
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return refuse(CodeNotFound, "no file %q in the task's folder", p)
	}
	if errors.Is(err, syscall.ENAMETOOLONG) {
		return refuse(CodeUnresolvable, "a name in %q is too long for the filesystem", p)
	}
	if errors.Is(err, syscall.ELOOP) {
		return refuse(CodeUnresolvable, "%q passes through a link loop", p)
	}
	if errors.Is(err, fs.ErrPermission) {
		return refuse(CodeUnresolvable, "a folder on the way to %q cannot be read", p)
	}
	return refuse(CodeUnresolvable, "%q cannot be resolved", p)
}
