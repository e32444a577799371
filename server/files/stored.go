package files

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/pdmcp/pdmcp/server/refusal"
)

// The name a folder stores. On a case-insensitive filesystem (Windows,
// macOS's default volumes, a Linux casefold folder, FAT, SMB) "Q3.csv" opens
// the file stored as "q3.csv", and on Windows "REPORT~1.PIS" opens
// "report.pisoft". The tools key their journal, and judge ALREADY_AN_ENVELOPE,
// by the stored name, so one file has one name whatever the model typed.

// storedParts maps each name of parts (a resolved path under the root, no
// links, every name existing) to the name its folder stores.
func (r *Resolver) storedParts(p string, parts []string) ([]string, error) {
	out := make([]string, len(parts))
	cur := r.root
	for i, n := range parts {
		s, err := r.storedName(cur, n)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			// Every name existed when the walk passed it: it was
			// removed or swapped since.
			return nil, changedWhileChecked(p)
		}
		if err != nil {
			return nil, refuse(refusal.Unresolvable, "the folder holding a name in %q cannot be read to learn the name it stores", p)
		}
		out[i] = s
		cur = filepath.Join(cur, s)
	}
	return out, nil
}

func readDirNames(dir string) ([]string, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.Readdirnames(-1)
}
