package server

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"time"

	"github.com/pdmcp/pdmcp/server/journal"
	"github.com/pdmcp/pdmcp/server/sidecar"
)

// errSidecarTaken: the sidecar's name holds another version's record
// whose file is there: the placed version is not free.
var errSidecarTaken = errors.New("the version's sidecar describes another version file that is there")

// writeSidecar puts the sidecar of the version pl a save is about to
// place (or linked before a crash) beside it, and returns the row to
// commit, which says the same: the record survives the journal's loss
// (server/sidecar). It is in place before the version's file is linked,
// and made durable with that file and their folder, in one round of
// fsyncs before the commit (placeAndCommit): every version a receipt
// names has its sidecar on disk, at no extra fsync round. A power cut
// before the commit can leave the file without its sidecar, or the
// sidecar without its file; neither has a receipt, the first is a stray
// a retry skips and the second a leftover sidecar.Scan reports. A sidecar a crashed attempt of this save wrote for the
// same ciphertext keeps its savedAt, so the record and the sidecar agree.
// A sidecar of another ciphertext whose file is missing is the leftover of
// a save that never placed its version, and is replaced (logged); one
// whose file is there is errSidecarTaken, unless linked says that file is
// this save's (then the sidecar is wrong, and replaced, logged).
func (s *Server) writeSidecar(job saveJob, pl journal.Placement, enc *journal.EncryptedPayload, linked bool) (journal.Version, error) {
	ct := sha256.Sum256(enc.Ciphertext)
	v := sidecar.Version{Task: s.currentManifest().Task, Record: journal.Version{Version: pl.Version, Path: pl.Path,
		IV: base64.StdEncoding.EncodeToString(enc.IV), TTag: enc.TTag, CiphertextSHA256: hex.EncodeToString(ct[:]),
		SHA256: job.textSHA, Size: int64(len(job.text)), SavedAt: s.cfg.Now().UTC().Truncate(time.Second),
		ActingAs: enc.ActingAs}}
	switch k := job.key.(type) {
	case journal.SaveKey:
		v.Record.Destination, v.Record.Caller, v.Record.IdempotencyKey = k.Destination, k.Caller, k.IdempotencyKey
	case journal.FragmentKey:
		base := job.placer.base()
		v.Record.DocumentID, v.Record.FragmentID, v.Record.Caller, v.Record.IdempotencyKey = k.DocumentID, k.FragmentID, k.Caller, k.IdempotencyKey
		v.Record.BaseIV, v.DocumentBase = base.FragmentIVs[k.FragmentID], base.Version
	default:
		return journal.Version{}, fmt.Errorf("sidecar of a save of kind %T", job.key)
	}
	if old, err := sidecar.Read(s.root, pl.Path); err == nil {
		switch {
		case old.Record.CiphertextSHA256 == v.Record.CiphertextSHA256:
			v.Record.SavedAt = old.Record.SavedAt
		case linked:
			s.log.Warn("a sidecar that does not describe its version file is replaced", "path", sidecar.PathOf(pl.Path))
		default:
			if _, err := s.root.Lstat(filepath.FromSlash(pl.Path)); !errors.Is(err, fs.ErrNotExist) {
				return journal.Version{}, fmt.Errorf("%s: %w", sidecar.PathOf(pl.Path), errSidecarTaken)
			}
			s.log.Warn("a sidecar left by a save that never placed its version is replaced", "path", sidecar.PathOf(pl.Path))
		}
	}
	// The first save to a destination makes results/ (durably, as the
	// ciphertext's write would).
	if err := mkdirDurable(s.root, filepath.Dir(filepath.FromSlash(pl.Path))); err != nil {
		return journal.Version{}, fmt.Errorf("make the saved file's folder: %w", err)
	}
	if err := sidecar.Write(s.root, v, false); err != nil {
		return journal.Version{}, fmt.Errorf("write the saved version's sidecar: %w", err)
	}
	return v.Record, nil
}

// removeSidecar takes back this save's sidecar at versionPath, when the
// version turned out not to be the save's; a failure is logged (what is
// left is a leftover sidecar.Scan reports, never a version).
func (s *Server) removeSidecar(versionPath string) {
	if err := s.root.Remove(filepath.FromSlash(sidecar.PathOf(versionPath))); err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.log.Warn("a sidecar of a version taken back was not removed", "path", sidecar.PathOf(versionPath), "err", err)
	}
}
