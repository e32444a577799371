package grant

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// RealPath is path made absolute with every symbolic link on it resolved:
// for a link, the file it names. The shared files are read, locked and
// written by their real path, so whichever name the operator gives (a link
// manifest.json -> manifest-2026.json, or the target itself), every command
// and server takes one lock, keeps one journal, and a writer replaces the
// link's target, never the link. A path that does not exist yet is
// resolved up to its folder; a link to nothing is an error, as writing
// through it would make a file the operator did not name.
func RealPath(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	resolved, err := filepath.EvalSymlinks(abs)
	if err == nil {
		return resolved, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	if fi, lerr := os.Lstat(abs); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
		return "", fmt.Errorf("%s is a symbolic link to a file that does not exist: %w", abs, err)
	}
	dir, err := filepath.EvalSymlinks(filepath.Dir(abs))
	if errors.Is(err, fs.ErrNotExist) {
		return abs, nil
	}
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, filepath.Base(abs)), nil
}
