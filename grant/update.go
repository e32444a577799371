package grant

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

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
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", path, err)
	}
	l, err := lockShared(ctx, abs)
	if err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	defer l.Release()
	m, err := LoadManifest(abs)
	if err != nil {
		return nil, err
	}
	before, err := marshalFile(m)
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", abs, err)
	}
	if err := change(m); err != nil {
		return nil, err
	}
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("manifest %s: not changed: %w", abs, err)
	}
	data, err := marshalFile(m)
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", abs, err)
	}
	m.file = abs
	if bytes.Equal(data, before) {
		return m, nil
	}
	if err := writeFileAtomic(abs, data); err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	return m, nil
}

// CreateManifest writes m as a new manifest at path, under the manifest's
// lock. It refuses, with an error matching [fs.ErrExist], when a manifest is
// already there, and refuses an invalid m; either way nothing is written.
func CreateManifest(ctx context.Context, path string, m *Manifest) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("manifest %s: %w", path, err)
	}
	if err := m.Validate(); err != nil {
		return fmt.Errorf("manifest %s: not saved: %w", abs, err)
	}
	data, err := marshalFile(m)
	if err != nil {
		return fmt.Errorf("manifest %s: %w", abs, err)
	}
	l, err := lockShared(ctx, abs)
	if err != nil {
		return fmt.Errorf("manifest: %w", err)
	}
	defer l.Release()
	if err := absent(abs); err != nil {
		return fmt.Errorf("manifest: %w", err)
	}
	if err := writeFileAtomic(abs, data); err != nil {
		return fmt.Errorf("manifest: %w", err)
	}
	m.file = abs
	return nil
}

// UpdateSeedRecord changes the seed record at path as [UpdateManifest]
// changes a manifest: under the record's lock, on the record as it is now,
// checked, renamed into place; a failed change leaves the file as it was.
func UpdateSeedRecord(ctx context.Context, path string, change func(*SeedRecord) error) (*SeedRecord, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("seed record %s: %w", path, err)
	}
	l, err := lockShared(ctx, abs)
	if err != nil {
		return nil, fmt.Errorf("seed record: %w", err)
	}
	defer l.Release()
	r, err := LoadSeedRecord(abs)
	if err != nil {
		return nil, err
	}
	before, err := marshalFile(r)
	if err != nil {
		return nil, fmt.Errorf("seed record %s: %w", abs, err)
	}
	if err := change(r); err != nil {
		return nil, err
	}
	if err := r.Check(); err != nil {
		return nil, fmt.Errorf("seed record %s: not changed: %w", abs, err)
	}
	data, err := marshalFile(r)
	if err != nil {
		return nil, fmt.Errorf("seed record %s: %w", abs, err)
	}
	if bytes.Equal(data, before) {
		return r, nil
	}
	if err := writeFileAtomic(abs, data); err != nil {
		return nil, fmt.Errorf("seed record: %w", err)
	}
	return r, nil
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
