// Package sidecar keeps a copy of each saved version's record beside its
// ciphertext, so the task folder alone is enough to rebuild the journal's
// record (server/journal) when the journal is lost, restored from an
// older copy, or damaged.
//
// A sidecar is a small JSON file next to the version's file, the same name
// with ".json" for ".bin" (results/<destination>.v<N>.json,
// documents/<id>/<fragment>.v<N>.json). It holds what the journal's row
// holds: the IV and the key's t-Tag (without them the ciphertext can never
// be opened again), the ciphertext's and the plaintext's sha256, the size,
// the version, when it was saved, the caller, the acting principal, the
// idempotency key, the task, and the destination or document and section.
// It never holds plaintext, a token or a session handle.
//
// The save pipeline (server/savepipe.go) puts the sidecar in place after
// the version is chosen and before the ciphertext is linked to its name,
// and fsyncs it with the ciphertext and their folder before the version
// is committed: a version file whose save committed always has its
// sidecar on disk. A
// sidecar whose version file is missing, or holds other bytes, is the
// leftover of a save that never placed its version (a crash, or a file
// that was in the way): Scan reports it as a Problem, never as a version.
//
// The .bin files stay exactly as the Gateway produced them; the sidecar is
// beside them rather than a header inside them, so every reader of the
// ciphertext (and every test) reads it unchanged.
//
// Not here: deciding what to repair (pdmcp check does, with Scan's answer
// and the manifest's), and the journal's own tables.
package sidecar

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/pdmcp/pdmcp/internal/lowerhex"
	"github.com/pdmcp/pdmcp/server/journal"
)

// Format is the sidecar format this program writes, in the file's
// "pdmcpVersionRecord" field. A file with another is refused by Read (and
// reported by Scan), never misread.
const Format = 1

// MaxBytes bounds a sidecar Read accepts: a real one is well under 2 KiB.
const MaxBytes = 64 << 10

// Kinds of a version, as the file names them.
const (
	KindResult   = "result"
	KindFragment = "fragment"
)

// Errors callers match with errors.Is.
var (
	// ErrInvalid: the file is not a sidecar this program reads, or a
	// Version to write is incomplete.
	ErrInvalid = errors.New("not a valid version sidecar")
)

// Version is one saved version's record as its sidecar holds it: the
// journal's row, and what the record does not keep per row.
type Version struct {
	// Record is the journal's row.
	Record journal.Version
	// Task is the task the version was saved in (grant.Manifest.Task); ""
	// for a manifest without one.
	Task string
	// DocumentBase is a section's: the document's version in the manifest
	// its save was counted against. Rebuild derives the section's
	// DocumentVersion from it (the commit computes that number, after the
	// sidecar is written).
	DocumentBase int
}

// file is the sidecar's JSON, spelled out so the format does not follow
// journal.Version's tags.
type file struct {
	Format           int       `json:"pdmcpVersionRecord"`
	Task             string    `json:"task,omitempty"`
	Kind             string    `json:"kind"`
	DestinationID    string    `json:"destinationId,omitempty"`
	DocumentID       string    `json:"documentId,omitempty"`
	FragmentID       string    `json:"fragmentId,omitempty"`
	Version          int       `json:"version"`
	DocumentBase     int       `json:"documentBase,omitempty"`
	BaseIV           string    `json:"baseIv,omitempty"`
	Path             string    `json:"path"`
	IV               string    `json:"iv"`
	TTag             string    `json:"ttag"`
	CiphertextSHA256 string    `json:"ciphertextSha256"`
	SHA256           string    `json:"sha256"`
	Size             int64     `json:"size"`
	SavedAt          time.Time `json:"savedAt"`
	Caller           string    `json:"caller"`
	ActingAs         string    `json:"actingAs"`
	IdempotencyKey   string    `json:"idempotencyKey"`
}

// PathOf is the sidecar of the version file versionPath ('/'-separated,
// relative to the task folder): its name with ".json" for ".bin".
func PathOf(versionPath string) string {
	return strings.TrimSuffix(versionPath, ".bin") + ".json"
}

// Encode returns v's sidecar bytes, after checking v is complete.
func Encode(v Version) ([]byte, error) {
	r := v.Record
	f := file{Format: Format, Task: v.Task, Kind: KindResult, DestinationID: r.Destination,
		DocumentID: r.DocumentID, FragmentID: r.FragmentID, Version: r.Version, Path: r.Path, IV: r.IV, TTag: r.TTag,
		CiphertextSHA256: r.CiphertextSHA256, SHA256: r.SHA256, Size: r.Size, SavedAt: r.SavedAt.UTC(),
		Caller: r.Caller, ActingAs: r.ActingAs, IdempotencyKey: r.IdempotencyKey}
	if r.Destination == "" {
		f.Kind, f.DocumentBase, f.BaseIV = KindFragment, v.DocumentBase, r.BaseIV
	}
	if err := f.check(); err != nil {
		return nil, err
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("sidecar: encode: %w", err)
	}
	return append(b, '\n'), nil
}

// Decode reads a sidecar's bytes. name is the sidecar's path relative to
// the task folder ('/'-separated), which the version's path must match.
func Decode(name string, data []byte) (Version, error) {
	var f file
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return Version{}, fmt.Errorf("sidecar %s: %w: %w", name, ErrInvalid, err)
	}
	if dec.More() {
		return Version{}, fmt.Errorf("sidecar %s: %w: data after the record", name, ErrInvalid)
	}
	if err := f.check(); err != nil {
		return Version{}, fmt.Errorf("sidecar %s: %w", name, err)
	}
	if PathOf(f.Path) != name {
		return Version{}, fmt.Errorf("sidecar %s: %w: it names the version file %q, not the one beside it", name, ErrInvalid, f.Path)
	}
	v := Version{Task: f.Task, DocumentBase: f.DocumentBase, Record: journal.Version{
		Destination: f.DestinationID, DocumentID: f.DocumentID, FragmentID: f.FragmentID, Version: f.Version,
		BaseIV: f.BaseIV, Path: f.Path, IV: f.IV, TTag: f.TTag, CiphertextSHA256: f.CiphertextSHA256, SHA256: f.SHA256,
		Size: f.Size, SavedAt: f.SavedAt.UTC(), Caller: f.Caller, ActingAs: f.ActingAs, IdempotencyKey: f.IdempotencyKey}}
	return v, nil
}

func (f file) check() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, a...))
	}
	switch {
	case f.Format != Format:
		return bad("format %d; this program reads format %d", f.Format, Format)
	case f.Kind == KindResult && (f.DestinationID == "" || f.DocumentID != "" || f.FragmentID != ""):
		return bad("a result names its destination alone")
	case f.Kind == KindFragment && (f.DocumentID == "" || f.FragmentID == "" || f.DestinationID != ""):
		return bad("a section names its document and section alone")
	case f.Kind != KindResult && f.Kind != KindFragment:
		return bad("kind %q", f.Kind)
	case f.Version < 1:
		return bad("version %d", f.Version)
	case !validPath(f.Path):
		return bad("path %q is not a .bin file inside the task folder", f.Path)
	case f.TTag == "":
		return bad("no ttag")
	case !lowerhex.Valid(f.SHA256, 64) || !lowerhex.Valid(f.CiphertextSHA256, 64):
		return bad("sha256 and ciphertextSha256 must be 64 lowercase hex digits")
	case f.Size < 0:
		return bad("size %d", f.Size)
	case f.SavedAt.IsZero():
		return bad("no savedAt")
	}
	if iv, err := base64.StdEncoding.DecodeString(f.IV); err != nil || len(iv) == 0 {
		return bad("iv is not base64")
	}
	return nil
}

// validPath: a clean, relative, '/'-separated path ending in .bin that
// stays inside the task folder.
func validPath(p string) bool {
	return p != "" && strings.HasSuffix(p, ".bin") && path.Clean(p) == p && !path.IsAbs(p) &&
		p != ".." && !strings.HasPrefix(p, "../") && !strings.Contains(p, "\\")
}

// tempPrefix begins the temporary name a sidecar is written under.
const tempPrefix = ".pdmcp-sidecar-"

// Write makes v's sidecar at PathOf(v.Path), under root (the task
// folder), and, when durable, makes it durable before it returns: the
// bytes are written under a temporary name, fsynced, renamed into place,
// and the folder fsynced. A sidecar already there with the same bytes is
// left as it is. The temporary name is one per version file and
// ciphertext, so a retry of the same save replaces its own leftover.
//
// The caller makes sure no version is placed at v.Path yet, or that the
// file there is v's: a sidecar is replaced only for a version this save
// holds.
func Write(root *os.Root, v Version, durable bool) error {
	data, err := Encode(v)
	if err != nil {
		return err
	}
	name := filepath.FromSlash(PathOf(v.Record.Path))
	if have, err := root.ReadFile(name); err == nil && bytes.Equal(have, data) {
		return nil
	}
	sum := sha256.Sum256([]byte(v.Record.Path + "\x00" + v.Record.CiphertextSHA256))
	tmp := filepath.Join(filepath.Dir(name), tempPrefix+hex.EncodeToString(sum[:12])+".tmp")
	if err := root.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("sidecar: remove an earlier temporary file: %w", err)
	}
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("sidecar: create the temporary file: %w", err)
	}
	_, err = f.Write(data)
	if err == nil && durable {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Rename(tmp, name)
	}
	if err != nil {
		_ = root.Remove(tmp)
		return fmt.Errorf("sidecar: write %s: %w", PathOf(v.Record.Path), err)
	}
	if durable && runtime.GOOS != "windows" {
		d, err := root.Open(filepath.Dir(name))
		if err == nil {
			err = d.Sync()
			if cerr := d.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			return fmt.Errorf("sidecar: make %s durable: %w", PathOf(v.Record.Path), err)
		}
	}
	return nil
}

// Read reads the sidecar of the version file versionPath under root.
func Read(root *os.Root, versionPath string) (Version, error) {
	name := PathOf(versionPath)
	f, err := root.Open(filepath.FromSlash(name))
	if err != nil {
		return Version{}, fmt.Errorf("sidecar: %w", err)
	}
	defer f.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.LimitReader(f, MaxBytes+1)); err != nil {
		return Version{}, fmt.Errorf("sidecar %s: %w", name, err)
	}
	if buf.Len() > MaxBytes {
		return Version{}, fmt.Errorf("sidecar %s: %w: over %d bytes", name, ErrInvalid, MaxBytes)
	}
	return Decode(name, buf.Bytes())
}
