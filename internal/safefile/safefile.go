// Package safefile reads the operator's files that decide what a task may
// do or who the server is: configuration (config.json, mcp-http.json, the
// task's grant, manifest and seed record, trust files), which must not be
// writable by group or others, and secrets (the service's
// login and sender keys, the client secret, the TLS key, a password), which
// must be the owner's alone. Each file is opened once, and the checks are
// made on the opened file, so the file checked is the file read. A secret
// is opened without following a symbolic link at its last element. It is
// not for documents or results, which live under the manifest's folder.
package safefile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// DefaultLimit bounds a file read when no limit is given: far above any
// configuration or key, and only there to stop a wrong path (a device, a
// log) being read whole.
const DefaultLimit = 1 << 20

// Sentinels a caller can match with errors.Is.
var (
	ErrNotRegular    = errors.New("not a regular file")
	ErrSymlink       = errors.New("a symbolic link, which a secret may not be")
	ErrGroupWritable = errors.New("group or others can write it")
	ErrNotOwnerOnly  = errors.New("group or others have access to it")
	ErrTooLarge      = errors.New("file too large")
)

const errPermissionModel = "group and others"

// ModeError is a file refused for its permission bits. Its text is the
// one wording of a mode problem, whichever command finds it.
type ModeError struct {
	Path string
	Mode fs.FileMode
	// Secret is true for a secret (no access for group or others), false
	// for a configuration file (no write for group or others).
	Secret bool
}

func (e *ModeError) Error() string {
	if e.Secret {
		return fmt.Sprintf("%s has mode %04o: %s must have no access (chmod 600)", e.Path, e.Mode.Perm(), errPermissionModel)
	}
	return fmt.Sprintf("%s has mode %04o: %s must not be able to write it (chmod go-w)", e.Path, e.Mode.Perm(), errPermissionModel)
}

// Is matches ErrNotOwnerOnly for a secret and ErrGroupWritable for a
// configuration file.
func (e *ModeError) Is(target error) bool {
	if e.Secret {
		return target == ErrNotOwnerOnly
	}
	return target == ErrGroupWritable
}

// ReadSecret reads a secret file of at most limit bytes (DefaultLimit when
// limit is 0): opened once without following a symbolic link, refused
// unless the opened file is a regular file that group and others cannot
// access.
func ReadSecret(path string, limit int64) ([]byte, error) {
	return readChecked(openNoFollow, path, limit, true)
}

// ReadConfig reads a configuration file of at most limit bytes
// (DefaultLimit when limit is 0): opened once, refused unless the opened
// file is a regular file that group and others cannot write.
func ReadConfig(path string, limit int64) ([]byte, error) {
	return readChecked(openFollow, path, limit, false)
}

// readChecked opens path once with open and reads the opened file, refused
// unless it is regular, within limit and of a mode checkMode accepts.
func readChecked(open func(string) (*os.File, error), path string, limit int64, secret bool) ([]byte, error) {
	f, err := open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if limit <= 0 {
		limit = DefaultLimit
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %w (%s)", path, ErrNotRegular, fi.Mode().Type())
	}
	if err := checkMode(path, fi, secret); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: %w (more than %d bytes)", path, ErrTooLarge, limit)
	}
	return data, nil
}
