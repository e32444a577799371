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

	"github.com/pdmcp/pdmcp/server/refusal"
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
	// lstat and readDir look names up and list folders: os.Lstat and a
	// folder's names, replaced in tests by a case-insensitive stand-in.
	lstat   func(string) (fs.FileInfo, error)
	readDir func(string) ([]string, error)
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
	r := &Resolver{root: resolved, flavor: Native(), lstat: os.Lstat, readDir: readDirNames}
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
	var cur string
	var todo []string
	if r.flavor == Windows {
		// Win32 takes ".." lexically, before any link is followed: the
		// path is cleaned first, as the system does.
		var full string
		switch {
		case lx.Drive != "":
			full = filepath.Join(append([]string{lx.Drive + string(filepath.Separator)}, lx.Parts...)...)
		case lx.Absolute:
			full = filepath.Join(append([]string{filepath.VolumeName(r.root) + string(filepath.Separator)}, lx.Parts...)...)
		default:
			full = filepath.Join(append([]string{r.root}, lx.Parts...)...)
		}
		vol := filepath.VolumeName(full)
		cur, todo = vol+string(filepath.Separator), components(full[len(vol):])
		if trailingSep(p) {
			todo = append(todo, ".")
		}
	} else {
		// The kernel takes each name in turn: ".." is the parent of where
		// the walk is, after the links before it were followed, and a
		// trailing separator asks for a folder. So the path is not cleaned.
		cur, todo = string(filepath.Separator), physicalParts(p)
		if !lx.Absolute {
			cur = r.root
		}
	}
	abs, err := r.walk(p, cur, todo)
	if err != nil {
		return Resolved{}, err
	}
	if !Within(r.root, abs, r.flavor) {
		return Resolved{}, outside(p)
	}
	// The names the folders store, not the ones typed: one file has one
	// name on a case-insensitive filesystem too.
	stored, err := r.storedParts(p, components(abs)[len(components(r.root)):])
	if err != nil {
		return Resolved{}, err
	}
	rel := path.Join(stored...)
	abs = filepath.Join(append([]string{r.root}, stored...)...)
	fi, err := r.lstat(abs)
	if err != nil || isLink(abs, fi) {
		// It was a resolved, existing name a moment ago.
		return Resolved{}, changedWhileChecked(p)
	}
	if err := checkType(p, fi); err != nil {
		return Resolved{}, err
	}
	if n, known := linkCount(fi, nil); known && n > 1 {
		return Resolved{}, hardLinked(p, n)
	}
	return Resolved{Rel: rel, Abs: abs, Info: fi}, nil
}

// changedWhileChecked is the refusal for a name that was there, and of one
// kind, a moment ago in this resolution, and is now gone or of another kind.
func changedWhileChecked(p string) *Error {
	return refuse(refusal.FileChanged, "%q changed while it was being checked; try again", p)
}

func outside(p string) *Error {
	return refuse(refusal.OutsideRoot, "%q is not inside the task's folder (or is the folder itself); name a file in it, relative to it or absolute", p)
}

func hardLinked(p string, n uint64) *Error {
	return refuse(refusal.HardLinked, "%q has %d names (hard links); one of them may be outside the task's folder, so it is refused", p, n)
}

func checkType(p string, fi fs.FileInfo) error {
	switch {
	case fi.IsDir():
		return refuse(refusal.IsADirectory, "%q is a folder; name a file", p)
	case !fi.Mode().IsRegular():
		return refuse(refusal.NotRegular, "%q is not a regular file (a device, pipe or socket)", p)
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

// physicalParts are p's names as the kernel takes them: every name kept,
// "." and ".." too, only empty ones (repeated separators) dropped; a
// trailing separator adds a "." (the name before it must be a folder).
func physicalParts(p string) []string {
	parts := components(p)
	if trailingSep(p) && len(parts) > 0 {
		parts = append(parts, ".")
	}
	return parts
}

func trailingSep(p string) bool { return p != "" && isSep(p[len(p)-1]) }

// walk resolves the names todo from cur (absolute; a folder) one at a time,
// following links, and returns the resolved path. ".." goes to the parent
// of the path resolved so far and "." stays; both need cur to be a folder.
// p is the argument, for messages.
func (r *Resolver) walk(p, cur string, todo []string) (string, error) {
	if cur != r.root && hasPlainPrefix(r.root, cur, todo, r.flavor) {
		// Start at the root: its ancestors are known to exist.
		n := len(components(r.root)) - len(components(cur))
		cur, todo = r.root, todo[n:]
	}
	links := 0
	isDir := true
	for len(todo) > 0 {
		name := todo[0]
		todo = todo[1:]
		inside := WithinOrEqual(r.root, cur, r.flavor)
		if name == "." || name == ".." {
			if !isDir {
				// A file used as a folder ("f.txt/", "f.txt/..").
				if !inside {
					return "", outside(p)
				}
				return "", refuse(refusal.NotFound, "%q uses a file as a folder (a name followed by a separator, '.' or '..' must be a folder)", p)
			}
			if name == ".." {
				cur = filepath.Dir(cur)
			}
			continue
		}
		next := filepath.Join(cur, name)
		fi, err := r.lstat(next)
		if err != nil {
			rest := filepath.Join(append([]string{next}, todo...)...)
			if !inside || !WithinOrEqual(r.root, rest, r.flavor) {
				return "", outside(p)
			}
			if isDir && errors.Is(err, syscall.ENOTDIR) {
				// cur was a folder a moment ago: swapped since.
				return "", changedWhileChecked(p)
			}
			return "", unresolved(p, err)
		}
		if !isLink(next, fi) {
			cur, isDir = next, fi.IsDir()
			continue
		}
		if links++; links > MaxLinks {
			if !inside {
				return "", outside(p)
			}
			return "", refuse(refusal.Unresolvable, "%q passes through more than %d links (a loop?)", p, MaxLinks)
		}
		target, err := os.Readlink(next)
		if err != nil {
			if !inside {
				return "", outside(p)
			}
			if errors.Is(err, syscall.EINVAL) || errors.Is(err, fs.ErrNotExist) {
				// A link a moment ago, and now not a link or gone: swapped
				// while the walk was on it.
				return "", changedWhileChecked(p)
			}
			return "", unresolved(p, err)
		}
		if !filepath.IsAbs(target) && strings.HasPrefix(target, string(filepath.Separator)) {
			// Rooted without a volume (Windows): on the link's volume.
			target = filepath.VolumeName(cur) + target
		}
		// Where the link goes, taken lexically, decides whether a link in
		// the folder leaves it: refused without looking at where it goes.
		lexical := target
		if !filepath.IsAbs(lexical) {
			lexical = filepath.Join(cur, lexical)
		}
		lexical = filepath.Clean(lexical)
		if inside && !WithinOrEqual(r.root, lexical, r.flavor) {
			return "", outside(p)
		}
		isDir = true
		if r.flavor == Windows {
			// The target's ".." is lexical too.
			if WithinOrEqual(r.root, lexical, r.flavor) {
				cur = r.root
				todo = append(components(lexical)[len(components(r.root)):], todo...)
			} else {
				tv := filepath.VolumeName(lexical)
				cur = tv + string(filepath.Separator)
				todo = append(components(lexical[len(tv):]), todo...)
			}
			continue
		}
		// Unix: the target's names are taken from the link's folder (or
		// from / for an absolute target), each in turn.
		parts := physicalParts(target)
		if filepath.IsAbs(target) {
			cur = string(filepath.Separator)
			if hasPlainPrefix(r.root, cur, parts, r.flavor) {
				cur, parts = r.root, parts[len(components(r.root)):]
			}
		}
		todo = append(parts, todo...)
	}
	return cur, nil
}

// hasPlainPrefix reports whether cur followed by the first names of todo
// spell root exactly, with no "." or ".." among them: the walk may then
// start at root, whose names hold no link.
func hasPlainPrefix(root, cur string, todo []string, fl Flavor) bool {
	rc, cc := components(root), components(cur)
	if len(cc) > len(rc) || !samePrefix(cc, rc, fl) {
		return false
	}
	need := rc[len(cc):]
	if len(todo) < len(need) {
		return false
	}
	for _, n := range todo[:len(need)] {
		if n == "." || n == ".." {
			return false
		}
	}
	return samePrefix(need, todo, fl)
}

// unresolved maps a failure to resolve a name inside the root.
func unresolved(p string, err error) *Error {
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return refuse(refusal.NotFound, "no file %q in the task's folder", p)
	}
	if errors.Is(err, syscall.ENAMETOOLONG) {
		return refuse(refusal.Unresolvable, "a name in %q is too long for the filesystem", p)
	}
	if errors.Is(err, syscall.ELOOP) {
		return refuse(refusal.Unresolvable, "%q passes through a link loop", p)
	}
	if errors.Is(err, fs.ErrPermission) {
		return refuse(refusal.Unresolvable, "a folder on the way to %q cannot be read", p)
	}
	return refuse(refusal.Unresolvable, "%q cannot be resolved", p)
}
