package operator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/filelock"
)

// lockProtect takes the protect journal's lock, so two protect runs on one
// manifest never interleave their journal writes or create two keys for one
// data type. A second run waits for the first (saying so on progress) until
// ctx ends. The kernel drops the lock when its holder dies, so a run killed
// with -9 leaves nothing to clean up.
func lockProtect(ctx context.Context, path, docID string, progress io.Writer) (func(), error) {
	l, err := filelock.TryAcquire(path)
	if errors.Is(err, filelock.ErrLocked) {
		fmt.Fprintf(progress, "protect %s: waiting for another pdmcp protect on this manifest to end (it holds %s)\n", docID, filepath.Base(path))
		l, err = filelock.Acquire(ctx, path)
	}
	if err != nil {
		return nil, fmt.Errorf("protect: %w", err)
	}
	return func() { _ = l.Release() }, nil
}

// announceManifestWait says on progress when another writer holds the
// manifest's lock, so an operator sees why the run is waiting. The write
// itself takes the lock; this only looks.
func announceManifestWait(manifestPath, docID string, progress io.Writer) {
	abs, err := grant.RealPath(manifestPath)
	if err != nil {
		return
	}
	lock := grant.LockPath(abs)
	l, err := filelock.TryAcquire(lock)
	if errors.Is(err, filelock.ErrLocked) {
		fmt.Fprintf(progress, "protect %s: waiting for another writer of the manifest (it holds %s)\n", docID, filepath.Base(lock))
		return
	}
	if err == nil {
		_ = l.Release()
	}
}
