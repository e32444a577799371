package grant

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"

	"github.com/pdmcp/pdmcp/internal/safefile"
	"github.com/pdmcp/pdmcp/internal/strictjson"
)

// Size limits of the files read here. They are far above any real file and
// only keep a wrong path (a device, a huge log) from being read whole.
const (
	maxGrantBytes    = 1 << 20
	maxManifestBytes = 64 << 20
	maxSeedBytes     = 4 << 20
)

// What each file holds, for the refusal of an empty one.
const (
	grantHolds    = "the task's grant as a JSON object (pdmcp grant writes it)"
	manifestHolds = "the task's manifest as a JSON object (pdmcp seed writes it)"
	seedHolds     = "the seed record as a JSON object (pdmcp seed writes it)"
)

// readSecureFile reads a regular file of at most limit bytes, refusing one
// that group or others can write ([*ModeError]). The mode is checked on the
// open file, so the file checked is the file read.
func readSecureFile(path string, limit int64) ([]byte, error) {
	return safefile.ReadConfig(path, limit)
}

// decodeStrict decodes the one JSON object of the file at path into v:
// member names exactly as written, none given twice, no two ids of one map
// that differ only in case (they become file names, one file where case is
// ignored), values of their field's type and nothing after the object.
// Refusals name the file, the line and column and the JSON path.
func decodeStrict(path, holds string, data []byte, v any) error {
	return strictjson.File{Path: path, Holds: holds, FoldMapKeys: true}.Decode(data, v)
}

// WriteFileAtomic writes data to path through a synced temporary file and a
// rename, so a reader (or a crash) sees the old file or the new one, never
// a part. A new file gets mode 0600; a file that exists keeps its mode
// (less any write bit for group or others) and its owner and group.
func WriteFileAtomic(path string, data []byte) error { return writeFileAtomic(path, data) }

// writeFileAtomic replaces path with data: a temporary file beside it,
// given the mode and owner path has (0600 and the writer's when new),
// written and synced, then renamed over path. On any failure the
// temporary file is removed and path is untouched. A symbolic link at path
// is kept: its target is what is replaced (RealPath).
//
// Why keep them: an operator edits a manifest or grant as root, or as
// themselves, for a server that runs as a service account and reads the
// file through its group; a rewrite that reset the file to 0600 owned by
// whoever ran the command would leave that server refused at its next read.
func writeFileAtomic(path string, data []byte) (err error) {
	resolved, err := RealPath(path)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	path = resolved
	dir := filepath.Dir(path)
	mode := os.FileMode(0o600)
	prev, err := os.Stat(path)
	switch {
	case err == nil:
		mode = prev.Mode().Perm() &^ 0o022
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("write %s: %w", path, err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	closed := false
	defer func() {
		if err != nil {
			if !closed {
				f.Close()
			}
			os.Remove(tmp)
		}
	}()
	// Set explicitly, so a change in CreateTemp's default cannot widen a
	// new file; the owner before the mode, as chown may clear set-id bits.
	if prev != nil {
		if err = keepOwner(f, prev); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	if err = f.Chmod(mode); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err = f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	closed = true
	if err = f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = renameOver(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	syncDir(dir)
	return nil
}

// syncDir makes a rename in dir durable. It is best effort: the file is
// already complete and in place, and some systems cannot sync a folder.
func syncDir(dir string) {
	if runtime.GOOS == "windows" {
		return
	}
	d, err := os.Open(dir)
	if err != nil {
		return
	}
	_ = d.Sync()
	_ = d.Close()
}

// loadChecked reads the file at path as [readSecureFile] does, decodes it
// strictly and checks it; holds says what it holds, for an empty file. It
// returns the real path read too (RealPath: a symbolic link resolved), which
// a manifest keeps as its File. Refusals name the file as path names it,
// then the field: "grant.json: documents[2]: ...".
func loadChecked[T any](holds, path string, limit int64, check func(*T) error) (*T, string, error) {
	abs, err := RealPath(path)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	data, err := readSecureFile(abs, limit)
	if err != nil {
		return nil, "", err
	}
	v := new(T)
	if err := decodeStrict(path, holds, data, v); err != nil {
		return nil, "", err
	}
	if err := check(v); err != nil {
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	return v, abs, nil
}

// encodeChecked checks v and returns its on-disk form; errors name the
// file as kind and name.
func encodeChecked(kind, name string, v any, check func() error) ([]byte, error) {
	if err := check(); err != nil {
		return nil, fmt.Errorf("%s %s: not saved: %w", kind, name, err)
	}
	data, err := marshalFile(v)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", kind, name, err)
	}
	return data, nil
}

// marshalFile is the on-disk form: indented, ending in a newline.
func marshalFile(v any) ([]byte, error) {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}
