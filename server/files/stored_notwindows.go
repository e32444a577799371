//go:build !windows

package files

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"
)

// storedName is the name dir stores for name: found by probing and, on a
// case-insensitive folder, by listing it (see probeStored).
func (r *Resolver) storedName(dir, name string) (string, error) { return r.probeStored(dir, name) }

// probeStored finds the stored name of name in dir by looking, not by
// asking the system: the name with its letters' case changed is looked up,
// and only when it names the same file (a case-insensitive folder), or when
// the name has no letter to change and is not plain ASCII (a folder may
// fold Unicode normalization), the folder is listed and the entry that is
// this file is the stored name. A case-sensitive folder costs one lookup.
func (r *Resolver) probeStored(dir, name string) (string, error) {
	fi, err := r.lstat(filepath.Join(dir, name))
	if err != nil {
		return "", err
	}
	if other := flipCase(name); other != name {
		ofi, err := r.lstat(filepath.Join(dir, other))
		if err != nil || !os.SameFile(fi, ofi) {
			// No such name, or another file: the folder tells case apart.
			return name, nil
		}
	} else if isASCII(name) {
		return name, nil
	}
	return r.scanStored(dir, name, fi)
}

// scanStored lists dir for the entry that is the file fi: the name itself
// if listed, else a name equal to it but for case, else any name of that
// file.
func (r *Resolver) scanStored(dir, name string, fi fs.FileInfo) (string, error) {
	names, err := r.readDir(dir)
	if err != nil {
		return "", err
	}
	var folded []string
	for _, e := range names {
		if e == name {
			return name, nil
		}
		if strings.EqualFold(e, name) {
			folded = append(folded, e)
		}
	}
	for _, group := range [][]string{folded, names} {
		for _, e := range group {
			if efi, err := r.lstat(filepath.Join(dir, e)); err == nil && os.SameFile(fi, efi) {
				return e, nil
			}
		}
	}
	// Listed without it (renamed meanwhile): the name as typed; the open's
	// own check catches a swap.
	return name, nil
}

// flipCase changes the case of every ASCII letter, or when there is none,
// of every letter.
func flipCase(s string) string {
	b := []byte(s)
	changed := false
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z':
			b[i], changed = c-'a'+'A', true
		case c >= 'A' && c <= 'Z':
			b[i], changed = c-'A'+'a', true
		}
	}
	if changed {
		return string(b)
	}
	if u := strings.ToUpper(s); u != s {
		return u
	}
	return strings.ToLower(s)
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}
