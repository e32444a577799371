package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/server/journal"
)

// saveInput is save_protected_result's arguments.
type saveInput struct {
	DestinationID  string `json:"destinationId" jsonschema:"a destinationId from list_approved_documents"`
	Text           string `json:"text" jsonschema:"the result to save, UTF-8, at most 65536 bytes"`
	IdempotencyKey string `json:"idempotencyKey" jsonschema:"1 to 128 characters you choose for this save; reuse it only to retry the same save"`
}

type saveReceipt struct {
	DestinationID  string `json:"destinationId"`
	Version        int    `json:"version"`
	SHA256         string `json:"sha256"`
	Size           int64  `json:"size"`
	SavedAt        string `json:"savedAt"`
	IdempotencyKey string `json:"idempotencyKey"`
	// Replayed is true when this key was already saved: nothing new was written.
	Replayed bool `json:"replayed"`
}

func (s *Server) saveTool() tool {
	return newTool(s, mcp.Tool{
		Name:  "save_protected_result",
		Title: "Save a protected result",
		Description: "Encrypts text under the destination's existing key and saves it as the destination's next " +
			"version; returns a receipt (version, sha256, size, time). Choose a new idempotencyKey for each new save. " +
			"Calling again with the same idempotencyKey and the same text returns the first receipt and writes nothing; " +
			"the same key with different text is refused IDEMPOTENCY_CONFLICT. It never overwrites an earlier version, " +
			"never creates a key, and never returns the ciphertext or where it is stored.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: false, DestructiveHint: ptr(false), IdempotentHint: true,
			OpenWorldHint: ptr(false)},
	}, s.save)
}

func (s *Server) save(ctx context.Context, c *call, in saveInput) (saveReceipt, error) {
	var zero saveReceipt
	if !slices.Contains(s.cfg.Grant.Destinations, in.DestinationID) {
		return zero, refuse(CodeDestinationNotGrant, 403,
			"destination %q is not in this task's grant; nothing was sent; use a destinationId from list_approved_documents",
			in.DestinationID)
	}
	c.line.DocumentID = in.DestinationID
	m := s.currentManifest()
	dest, ok := m.Destinations[in.DestinationID]
	if !ok {
		return zero, refuse(CodeUnknownDestination, 404, "the operator's manifest has no destination %q; nothing was sent", in.DestinationID)
	}
	if dest.TTag == "" {
		return zero, refuse(CodeDestinationHasNoKey, 409,
			"destination %q has no key yet; nothing was sent; the operator must seed one", in.DestinationID)
	}
	if n := utf8.RuneCountInString(in.IdempotencyKey); n == 0 || n > 128 || !utf8.ValidString(in.IdempotencyKey) {
		return zero, refuse(CodeInvalidArgument, 400, "idempotencyKey must be 1 to 128 characters; nothing was sent")
	}
	if len(in.Text) > MaxTextBytes {
		return zero, refuse(CodeResultTooLarge, 413, "the text is %d bytes, over the %d-byte limit; nothing was sent; save a shorter result",
			len(in.Text), MaxTextBytes)
	}
	sum := sha256.Sum256([]byte(in.Text))
	textSHA := hex.EncodeToString(sum[:])
	key := journal.SaveKey{Caller: c.caller.ID, Destination: in.DestinationID, IdempotencyKey: in.IdempotencyKey}

	// Only a retry of this very save waits here: another user's save, or
	// this user's save under another key, goes on while this one waits
	// for the Gateway.
	unlock, err := s.idemLocks.lock(ctx, key.Caller+"\x00"+key.Destination+"\x00"+key.IdempotencyKey)
	if err != nil {
		return zero, err
	}
	defer unlock()
	res, err := s.cfg.Journal.Reserve(ctx, key, textSHA)
	if errors.Is(err, journal.ErrIdempotencyConflict) {
		return zero, refuse(CodeIdempotencyConflict, 409,
			"idempotencyKey %q was already used for different text; nothing was sent; choose a new key for a new save", in.IdempotencyKey)
	}
	if err != nil {
		return zero, fmt.Errorf("reserve save: %w", err)
	}
	if res.State == journal.SaveCommitted && res.Receipt != nil {
		c.line.Version = res.Receipt.Version
		return receiptOf(in.IdempotencyKey, *res.Receipt, true), nil
	}
	s.cfg.CrashPoint("save:reserved")
	if res.Encrypted == nil {
		// No answer was recorded: ask (again). The key is the destination's
		// existing one, so a repeated ask creates nothing at the key server.
		if res, err = s.encryptUnderKey(ctx, c, key, dest.TTag, in.Text); err != nil {
			return zero, err
		}
		s.cfg.CrashPoint("save:encrypted")
	}
	rc, err := s.place(ctx, key, res, textSHA, int64(len(in.Text)))
	if err != nil {
		return zero, err
	}
	c.line.Version = rc.Version
	return receiptOf(in.IdempotencyKey, rc, false), nil
}

// encryptUnderKey encrypts text under an existing key (a destination's or a
// section's) with a fresh IV and records the answer in the save journal
// under key. Asking again after a lost answer creates nothing at the key
// server, so a save with no recorded answer may call this again.
func (s *Server) encryptUnderKey(ctx context.Context, c *call, key journal.SaveID, ttag, text string) (journal.Reservation, error) {
	sess, err := s.session(ctx, c)
	if err != nil {
		return journal.Reservation{}, err
	}
	iv := make([]byte, api.IVBytes)
	if _, err := rand.Read(iv); err != nil {
		return journal.Reservation{}, fmt.Errorf("save IV: %w", err)
	}
	enc, err := sess.Encrypt(ctx, gateway.EncryptInput{TTag: ttag, IV: iv, Plaintext: []byte(text)})
	if err != nil {
		return journal.Reservation{}, err
	}
	c.line.KeyLink = digestOrEmpty(enc.Link)
	res, err := s.cfg.Journal.RecordEncrypted(ctx, key,
		journal.EncryptedPayload{IV: enc.IV, Ciphertext: enc.Ciphertext, TTag: enc.TTag})
	if err != nil {
		return journal.Reservation{}, fmt.Errorf("record encrypted save: %w", err)
	}
	return res, nil
}

// place writes the recorded ciphertext as a new versioned file, commits the
// manifest that lists it, and commits the journal. Every step can be
// repeated after a crash: an existing file with the same bytes is this
// save's, and a manifest version with this save's IV is already committed.
//
// The destination's lock is held for local work only (journal, file,
// manifest), never across a Gateway call.
func (s *Server) place(ctx context.Context, key journal.SaveKey, res journal.Reservation, textSHA string, size int64) (journal.Receipt, error) {
	unlock, err := s.destLocks.lock(ctx, key.Destination)
	if err != nil {
		return journal.Receipt{}, err
	}
	defer unlock()
	enc := res.Encrypted
	ivText := base64.StdEncoding.EncodeToString(enc.IV)
	for attempt := 0; attempt < 8; attempt++ {
		m := s.currentManifest()
		dest := m.Destinations[key.Destination]
		if v, ok := versionWithIV(dest, ivText); ok {
			return s.commitSave(ctx, key, v)
		}
		pl := res.Placement
		if pl == nil || versionTaken(dest, pl.Version) {
			n := dest.NextVersion()
			p := path.Join("results", fmt.Sprintf("%s.v%d.bin", key.Destination, n))
			var err error
			if res, err = s.cfg.Journal.RecordPlacement(ctx, key, journal.Placement{Version: n, Path: p}); err != nil {
				return journal.Receipt{}, fmt.Errorf("record placement: %w", err)
			}
			pl = res.Placement
		}
		switch err := writeNew(s.root, filepath.FromSlash(pl.Path), enc.Ciphertext); {
		case errors.Is(err, fs.ErrExist):
			// Some other writer took this name: choose the next version.
			res.Placement = nil
			continue
		case err != nil:
			return journal.Receipt{}, fmt.Errorf("write result file: %w", err)
		}
		s.cfg.CrashPoint("save:file-written")
		v := grant.SavedVersion{Version: pl.Version, Path: pl.Path, IV: ivText, SHA256: textSHA, Size: size,
			SavedAt: s.cfg.Now().UTC().Truncate(time.Second)}
		if err := s.commitManifest(key.Destination, v); err != nil {
			return journal.Receipt{}, err
		}
		s.cfg.CrashPoint("save:manifest-committed")
		return s.commitSave(ctx, key, v)
	}
	return journal.Receipt{}, errors.New("save: no free version after 8 attempts")
}

func (s *Server) commitSave(ctx context.Context, key journal.SaveKey, v grant.SavedVersion) (journal.Receipt, error) {
	rc := journal.Receipt{Destination: key.Destination, Version: v.Version, Path: v.Path, SHA256: v.SHA256,
		Size: v.Size, SavedAt: v.SavedAt}
	if _, err := s.cfg.Journal.Commit(ctx, key, rc); err != nil {
		return journal.Receipt{}, fmt.Errorf("commit save: %w", err)
	}
	return rc, nil
}

// commitManifest writes a manifest that lists v and swaps it in; the file
// is replaced by rename, so a reader sees the old or the new one.
func (s *Server) commitManifest(destination string, v grant.SavedVersion) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := s.manifest.Clone()
	d := next.Destinations[destination]
	d.Versions = append(d.Versions, v)
	next.Destinations[destination] = d
	if err := next.Save(s.cfg.ManifestPath); err != nil {
		return fmt.Errorf("commit manifest: %w", err)
	}
	s.manifest = next
	return nil
}

// writeNew creates the file rel inside root with data, never over an
// existing file. An existing file with exactly these bytes is taken as this
// save's own earlier write.
func writeNew(root *os.Root, rel string, data []byte) error {
	if err := root.MkdirAll(filepath.Dir(rel), 0o700); err != nil {
		return err
	}
	f, err := root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		have, rerr := root.ReadFile(rel)
		if rerr == nil && bytes.Equal(have, data) {
			return nil
		}
		return err
	}
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		root.Remove(rel)
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		root.Remove(rel)
		return err
	}
	return f.Close()
}

func versionWithIV(d grant.Destination, iv string) (grant.SavedVersion, bool) {
	for _, v := range d.Versions {
		if v.IV == iv {
			return v, true
		}
	}
	return grant.SavedVersion{}, false
}

func versionTaken(d grant.Destination, n int) bool {
	for _, v := range d.Versions {
		if v.Version == n {
			return true
		}
	}
	return false
}

func receiptOf(idem string, rc journal.Receipt, replayed bool) saveReceipt {
	return saveReceipt{DestinationID: rc.Destination, Version: rc.Version, SHA256: rc.SHA256, Size: rc.Size,
		SavedAt: rc.SavedAt.UTC().Format(time.RFC3339), IdempotencyKey: idem, Replayed: replayed}
}
