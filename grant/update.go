package grant

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/pdmcp/pdmcp/internal/filelock"
)

// The manifest and the seed record are shared: operator commands (protect,
// seed, seed --cleanup, pdmcp dev's setup), running servers and an operator
// at an editor may all change them. Every writer here takes one
// cross-process lock, the file's lock file beside it (manifest.json.lock,
// seed-record.json.lock), reads the file again under it, changes that copy
// and renames the result into place. A copy read earlier is never written
// back, so no writer loses another's change.

// LockPath is the lock file that writers of the shared file at path take.
func LockPath(path string) string { return filelock.Path(path) }

// lockShared takes the lock of the shared file at abs, waiting for another
// holder until ctx ends.
func lockShared(ctx context.Context, abs string) (*filelock.Lock, error) {
	l, err := filelock.Acquire(ctx, filelock.Path(abs))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", abs, err)
	}
	return l, nil
}

// UpdateManifest changes the manifest at path as one step no other writer
// comes between: it takes the manifest's lock (waiting for another writer,
// until ctx ends), reads the file as it is now, calls change on that copy,
// checks the result, writes it to a synced temporary file, renames it into
// place, syncs the folder and releases the lock. It returns the manifest as
// written.
//
// When change returns an error, that error is returned as it is; when the
// result is invalid, the [*FieldError] is. Either way, and on any failure
// to write, the file is left byte for byte as it was. A change that changes
// nothing writes nothing. change must not itself write the manifest: the
// lock is held while it runs.
func UpdateManifest(ctx context.Context, path string, change func(*Manifest) error) (*Manifest, error) {
	m, abs, err := updateShared(ctx, "manifest", path, LoadManifest, (*Manifest).Validate, change)
	if err != nil {
		return nil, err
	}
	m.file = abs
	return m, nil
}

// CreateManifest writes m as a new manifest at path, under the manifest's
// lock. It refuses, with an error matching [fs.ErrExist], when a manifest is
// already there, and refuses an invalid m; either way nothing is written.
func CreateManifest(ctx context.Context, path string, m *Manifest) error {
	return m.save(ctx, path, absent)
}

// UpdateSeedRecord changes the seed record at path as [UpdateManifest]
// changes a manifest: under the record's lock, on the record as it is now,
// checked, renamed into place; a failed change leaves the file as it was.
func UpdateSeedRecord(ctx context.Context, path string, change func(*SeedRecord) error) (*SeedRecord, error) {
	r, _, err := updateShared(ctx, "seed record", path, LoadSeedRecord, (*SeedRecord).Check, change)
	return r, err
}

// updateShared is the one step of [UpdateManifest] and [UpdateSeedRecord]
// for the file of kind ("manifest", "seed record") at path: under its lock,
// load the file as it is now, change it, check it, and rename it into place
// unless its bytes came out the same. It returns the absolute path too.
func updateShared[T any](ctx context.Context, kind, path string, load func(string) (*T, error), check, change func(*T) error) (*T, string, error) {
	abs, err := RealPath(path)
	if err != nil {
		return nil, "", fmt.Errorf("%s %s: %w", kind, path, err)
	}
	l, err := lockShared(ctx, abs)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", kind, err)
	}
	defer l.Release()
	v, err := load(abs)
	if err != nil {
		return nil, "", err
	}
	before, err := marshalFile(v)
	if err != nil {
		return nil, "", fmt.Errorf("%s %s: %w", kind, abs, err)
	}
	if err := change(v); err != nil {
		return nil, "", err
	}
	if err := check(v); err != nil {
		return nil, "", fmt.Errorf("%s %s: not changed: %w", kind, abs, err)
	}
	data, err := marshalFile(v)
	if err != nil {
		return nil, "", fmt.Errorf("%s %s: %w", kind, abs, err)
	}
	if bytes.Equal(data, before) {
		return v, abs, nil
	}
	if err := writeFileAtomic(abs, data); err != nil {
		return nil, "", fmt.Errorf("%s: %w", kind, err)
	}
	return v, abs, nil
}

// writeShared writes data to the shared file of kind at abs, under its
// lock. When fresh is not nil it runs under the lock first, and its error
// refuses the write.
func writeShared(ctx context.Context, kind, abs string, data []byte, fresh func(abs string) error) error {
	l, err := lockShared(ctx, abs)
	if err != nil {
		return fmt.Errorf("%s: %w", kind, err)
	}
	defer l.Release()
	if fresh != nil {
		if err := fresh(abs); err != nil {
			return fmt.Errorf("%s: %w", kind, err)
		}
	}
	if err := writeFileAtomic(abs, data); err != nil {
		return fmt.Errorf("%s: %w", kind, err)
	}
	return nil
}

// absent refuses a path where something already is.
func absent(path string) error {
	_, err := os.Lstat(path)
	switch {
	case err == nil:
		return fmt.Errorf("%s: %w", path, fs.ErrExist)
	case errors.Is(err, fs.ErrNotExist):
		return nil
	default:
		return err
	}
}
