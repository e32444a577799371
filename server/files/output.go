package files

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"unicode/utf16"

	"github.com/pdmcp/pdmcp/server/refusal"
)

// TempName is a fresh temporary name for name, in name's own folder: a dot
// file, so listings hide it, with a random suffix.
func TempName(name string) (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return "." + name + ".tmp-" + hex.EncodeToString(b[:]), nil
}

// StagedName is the one temporary name for name that seed (a journal
// row's key) gives: a file written ahead of being placed, under a name a
// later call for the same row can find and remove after a kill, instead
// of a random one nobody knows. It has TempName's shape.
func StagedName(name, seed string) string {
	sum := sha256.Sum256([]byte(seed))
	return "." + name + ".tmp-" + hex.EncodeToString(sum[:8])
}

// TempNameShape is a name as long as every TempName of name, for
// CheckNames.
func TempNameShape(name string) string { return "." + name + ".tmp-0123456789abcdef" }

// NameLen is a name's length as the filesystem counts it: UTF-16 code
// units on Windows, bytes elsewhere (macOS counts UTF-8 bytes or, on HFS+,
// UTF-16 units, never more than the bytes).
func NameLen(name string) int {
	if Native() == Windows {
		return len(utf16.Encode([]rune(name)))
	}
	return len(name)
}

// CheckNames refuses, NAME_TOO_LONG, when one of names would not fit the
// name limit of the filesystem holding folder (absolute). shown is how the
// refusal names the file the outputs are for.
func CheckNames(folder, shown string, names ...string) error {
	limit := nameMax(folder)
	for _, n := range names {
		if l := NameLen(n); l > limit {
			return refuse(refusal.NameTooLong,
				"the name %q that the tool would create for %q is %d long, over this filesystem's limit of %d for one name; nothing was sent; rename the file to a shorter name first",
				n, shown, l, limit)
		}
	}
	return nil
}

// Output is a temporary file in a folder of a root, to be written and then
// put at its name without ever replacing a file there: by a hard link where
// the filesystem has them, else by a rename that refuses an existing name.
// Which way works is found out when the Output is made, before anything is
// sent.
type Output struct {
	dir    *os.Root
	tmp    string // native, relative to the root
	File   *os.File
	rename bool
	closed bool
	ops    outputOps
}

// outputOps are the filesystem calls an Output places files with; tests
// replace them to stand for a filesystem without hard links (FAT, exFAT,
// some SMB and FUSE mounts) or without either way.
type outputOps struct {
	link   func(dir *os.Root, oldname, newname string) error
	rename func(dir *os.Root, oldname, newname string) error
}

func nativeOps() outputOps {
	return outputOps{link: func(dir *os.Root, o, n string) error { return dir.Link(o, n) }, rename: renameNoReplace}
}

// Placer puts finished files at their names in one folder, the way that
// folder's filesystem allows (ProbeOutput found it).
type Placer struct {
	dir    *os.Root
	rename bool
	ops    outputOps
}

// ProbeOutput finds, before anything is sent, how a finished file can be
// put at name (native, relative to the root) without replacing one: an
// empty temporary file in name's folder is linked, or else renamed, to a
// second temporary name, and both are removed. A folder that takes no new
// file, or can neither link nor rename without replacing, is
// OUTPUT_NOT_WRITABLE; a temporary name too long is NAME_TOO_LONG. shown
// names the file in messages. Nothing is left in the folder.
func ProbeOutput(dir *os.Root, name, shown string) (*Placer, error) {
	return probeOutput(dir, name, shown, nativeOps())
}

func probeOutput(dir *os.Root, name, shown string, ops outputOps) (*Placer, error) {
	folder, base := filepath.Split(name)
	probe, pf, err := CreateTempIn(dir, folder, base)
	if err != nil {
		return nil, outputError(shown, err)
	}
	pf.Close()
	probe2, err := TempName(base)
	if err != nil {
		dir.Remove(probe)
		return nil, err
	}
	probe2 = filepath.Join(folder, probe2)
	p := &Placer{dir: dir, ops: ops}
	if lerr := ops.link(dir, probe, probe2); lerr != nil {
		if rerr := ops.rename(dir, probe, probe2); rerr != nil {
			dir.Remove(probe)
			return nil, refuse(refusal.OutputNotWritable,
				"the folder of %q can neither hard-link a file nor rename one without replacing another, so the tool cannot put its output at its name without risking a file there; nothing was sent", shown)
		}
		p.rename = true
	} else {
		dir.Remove(probe)
	}
	dir.Remove(probe2)
	return p, nil
}

// Create makes the temporary file for name (native, relative to the root)
// in name's folder, exclusively.
func (p *Placer) Create(name, shown string) (*Output, error) {
	folder, base := filepath.Split(name)
	tmp, f, err := CreateTempIn(p.dir, folder, base)
	if err != nil {
		return nil, outputError(shown, err)
	}
	return &Output{dir: p.dir, tmp: tmp, File: f, rename: p.rename, ops: p.ops}, nil
}

// CreateStaged is Create under the temporary name tmp (a StagedName, in
// name's folder) rather than a random one; a file already there is an
// error (fs.ErrExist), never reused.
func (p *Placer) CreateStaged(name, tmp, shown string) (*Output, error) {
	t := filepath.Join(filepath.Dir(name), tmp)
	f, err := p.dir.OpenFile(t, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, outputError(shown, err)
	}
	return &Output{dir: p.dir, tmp: t, File: f, rename: p.rename, ops: p.ops}, nil
}

// CreateOutput is ProbeOutput then Create.
func CreateOutput(dir *os.Root, name, shown string) (*Output, error) {
	p, err := ProbeOutput(dir, name, shown)
	if err != nil {
		return nil, err
	}
	return p.Create(name, shown)
}

func outputError(shown string, err error) error {
	if errors.Is(err, syscall.ENAMETOOLONG) {
		return refuse(refusal.NameTooLong, "a temporary name for the output of %q is too long for this filesystem; nothing was sent; rename the file to a shorter name first", shown)
	}
	if errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS) {
		return refuse(refusal.OutputNotWritable, "the folder of %q takes no new file (read-only, or not writable by the server); nothing was sent", shown)
	}
	return fmt.Errorf("files: output temporary file: %w", err)
}

// CreateTempIn creates a new, empty temporary file named by [TempName] for
// base in folder of dir, exclusively, and returns its name and the file.
func CreateTempIn(dir *os.Root, folder, base string) (string, *os.File, error) {
	for range 16 {
		n, err := TempName(base)
		if err != nil {
			return "", nil, err
		}
		tmp := filepath.Join(folder, n)
		f, err := dir.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		return tmp, f, err
	}
	return "", nil, errors.New("no free temporary name")
}

// Close closes the temporary file (synced first); Place needs it closed.
func (o *Output) Close() error {
	if o.closed {
		return nil
	}
	o.closed = true
	err := o.File.Sync()
	if cerr := o.File.Close(); err == nil {
		err = cerr
	}
	return err
}

// Place puts the closed temporary file at name (native, relative to the
// root, in the same folder). An existing name is never replaced: the error
// then matches fs.ErrExist and the temporary file stays for another name.
// Once placed, the temporary name is removed at once (a hard link's second
// name must not outlive the call: the file tools refuse a file with two).
func (o *Output) Place(name string) error {
	if o.rename {
		if err := o.ops.rename(o.dir, o.tmp, name); err != nil {
			return err
		}
		o.tmp = ""
		return nil
	}
	if err := o.ops.link(o.dir, o.tmp, name); err != nil {
		return err
	}
	o.dir.Remove(o.tmp)
	o.tmp = ""
	return nil
}

// Discard closes the temporary file and removes its name, if it still has
// it; a placed file keeps its own name.
func (o *Output) Discard() {
	if o == nil {
		return
	}
	if !o.closed {
		o.closed = true
		o.File.Close()
	}
	if o.tmp != "" {
		o.dir.Remove(o.tmp)
		o.tmp = ""
	}
}
