package journal

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/pdmcp/pdmcp/internal/lowerhex"
)

// An encrypt_file goes through these steps:
//
//	ReserveFile        -> FileReserved    nothing sent yet
//	ClaimSend          -> FileAnswerLost  ask the Gateway to encrypt (it mints a key)
//	RecordMinted       -> FileMinted      write <name>.pisoft
//	MarkFileDone       -> FileDone
//
// An encrypt mints a key, so it is never sent twice for one row. ClaimSend
// moves a row from FileReserved to FileAnswerLost before the encrypt is
// sent, atomically, so exactly one call sends it: from then on the row says
// "sent, no answer recorded" (in flight, or lost with a crash or a dropped
// connection), and a retry that finds it must not encrypt, since a key may
// exist unused. A retry that finds FileReserved knows nothing was sent and
// claims it. The claimer records the answer with RecordMinted, or, when the
// Gateway refused outright (no key made), releases the row (ReleaseFile).
// A retry that finds FileMinted or FileDone writes the envelope again from
// the row if it is missing.
//
// Two processes may share the journal, so a row records which handle (one
// per Open: in practice one per process) reserved it and, once claimed,
// which one claimed its send. ReleaseFile removes only a row this handle
// holds: its own reservation, or the send it claimed and the Gateway
// refused. A row another process reserved or claimed is never removed by
// this one, so a process that is about to record the key it minted always
// finds its row.

// filesOwnerMigration takes the schema from 2 to 3: the owner column, NULL
// for rows written before it (no handle holds those, so none releases one;
// a retry claims a reserved one and so holds it).
const filesOwnerMigration = `
ALTER TABLE files ADD COLUMN owner TEXT;
`

// newOwnerToken is a handle's owner token: 128 random bits in hex.
func newOwnerToken() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("journal: owner token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// FileState is where a file encryption stands.
type FileState string

// File states.
const (
	FileReserved FileState = "reserved"
	FileMinted   FileState = "minted"
	FileDone     FileState = "done"
	// FileAnswerLost: the encrypt was sent (ClaimSend) and no answer is
	// recorded: still in flight, or lost.
	FileAnswerLost FileState = "answer-lost"
)

// FileKey names one encryption of one file's content at one path.
type FileKey struct {
	Caller        string // "" over stdio, the user id over HTTP
	Root          string // the grant's resolved, absolute file root
	RelPath       string // the file's path relative to Root
	ContentSHA256 string // the plaintext's sha256, lowercase hex
}

func (k FileKey) check() error {
	if k.Root == "" || k.RelPath == "" {
		return fmt.Errorf("journal: %w: a file key needs a root and a relative path", ErrInvalid)
	}
	return checkSHA256("content sha256", k.ContentSHA256)
}

// String names the key in errors, which reach the error log: the caller
// as the 12-hex digest the server logs callers by (the sha256 of the user
// id), never the user's issuer and subject.
func (k FileKey) String() string {
	caller := ""
	if k.Caller != "" {
		sum := sha256.Sum256([]byte(k.Caller))
		caller = hex.EncodeToString(sum[:6])
	}
	return fmt.Sprintf("(caller %s, root %q, path %q, sha256 %s)", caller, k.Root, k.RelPath, k.ContentSHA256)
}

// MintedKey is the Gateway's answer to encrypt_file's encrypt: the new key's
// t-Tag, a 12-hex digest of its hidden link, and what the envelope holds.
// The ciphertext is kept so a deleted envelope can be written again.
//
// The ciphertext may instead be kept outside the database (up to 16 MiB in
// a row costs SQLite copies of it in memory): Ciphertext is then empty and
// CiphertextSHA256 names it, and the row stores only the hash.
type MintedKey struct {
	TTag             string
	LinkDigest       string
	IV               []byte
	Ciphertext       []byte
	CiphertextSHA256 string // when Ciphertext is empty
	// MintedAt, when set, is recorded as the key's minting time instead
	// of the moment of recording: an envelope written while the key is
	// recorded carries it, and a rewrite from the row must match it.
	MintedAt time.Time
}

// FileRecord is a file encryption's row. The key fields are set from
// FileMinted on. Ciphertext is filled by ReserveFile and GetFile only (and
// only when the row holds it; see MintedKey): the state changes and
// MintedFile leave it nil rather than copy up to 16 MiB out of the database
// each time.
type FileRecord struct {
	Key              FileKey
	New              bool // this call created the row
	State            FileState
	TTag             string
	LinkDigest       string
	IV               []byte
	Ciphertext       []byte
	CiphertextSHA256 string
	MintedAt         time.Time
	CreatedAt        time.Time
	UpdatedAt        time.Time
}

// ReserveFile records that this file content is about to be encrypted, or
// returns the row already recorded for it (New false).
func (j *Journal) ReserveFile(ctx context.Context, key FileKey) (FileRecord, error) {
	if err := key.check(); err != nil {
		return FileRecord{}, err
	}
	var r FileRecord
	err := j.inTx(ctx, func(tx *sql.Tx) error {
		now := nowText()
		res, err := tx.ExecContext(ctx, `
INSERT INTO files (caller, root, rel_path, content_sha256, state, owner, created_at, updated_at)
VALUES (?, ?, ?, ?, 'reserved', ?, ?, ?)
ON CONFLICT DO NOTHING`, key.Caller, key.Root, key.RelPath, key.ContentSHA256, j.owner, now, now)
		if err != nil {
			return fmt.Errorf("journal: reserve file %s: %w", key, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("journal: reserve file %s: %w", key, err)
		}
		if r, err = getFile(ctx, tx, key, true); err != nil {
			return err
		}
		r.New = n == 1
		return nil
	})
	return r, err
}

// ClaimSend moves a FileReserved row to FileAnswerLost, so that this call,
// and only this one, sends the encrypt; the row then names this handle as
// its owner, whoever reserved it. claimed is false (and the row returned as
// it is) when the row was not FileReserved.
func (j *Journal) ClaimSend(ctx context.Context, key FileKey) (claimed bool, r FileRecord, err error) {
	r, err = j.fileStep(ctx, key, func(tx *sql.Tx, before FileRecord) error {
		if before.State != FileReserved {
			return nil
		}
		res, err := tx.ExecContext(ctx, `
UPDATE files SET state = 'answer-lost', owner = ?, updated_at = ?
WHERE caller = ? AND root = ? AND rel_path = ? AND content_sha256 = ? AND state = 'reserved'`,
			j.owner, nowText(), key.Caller, key.Root, key.RelPath, key.ContentSHA256)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		claimed = n == 1
		return err
	})
	return claimed, r, err
}

// RecordMinted stores the minted key and ciphertext before the envelope is
// written, from FileReserved or (for the call that claimed the send)
// FileAnswerLost. Only the first answer is kept: a row already at
// FileMinted or FileDone is returned unchanged.
func (j *Journal) RecordMinted(ctx context.Context, key FileKey, m MintedKey) (FileRecord, error) {
	if m.TTag == "" || len(m.IV) == 0 || (len(m.Ciphertext) == 0 && m.CiphertextSHA256 == "") {
		return FileRecord{}, fmt.Errorf("journal: %w: a minted key needs a t-Tag, an IV and a ciphertext", ErrInvalid)
	}
	if !lowerhex.Valid(m.LinkDigest, 12) {
		return FileRecord{}, fmt.Errorf("journal: %w: link digest must be 12 lowercase hex digits", ErrInvalid)
	}
	ctSHA := m.CiphertextSHA256
	var blob []byte
	if len(m.Ciphertext) > 0 {
		sum := sha256.Sum256(m.Ciphertext)
		ctSHA, blob = hex.EncodeToString(sum[:]), m.Ciphertext
	} else if err := checkSHA256("ciphertext sha256", ctSHA); err != nil {
		return FileRecord{}, err
	}
	return j.fileStep(ctx, key, func(tx *sql.Tx, r FileRecord) error {
		switch r.State {
		case FileMinted, FileDone:
			return nil
		}
		now := nowText()
		minted := now
		if !m.MintedAt.IsZero() {
			minted = formatTime(m.MintedAt)
		}
		_, err := tx.ExecContext(ctx, `
UPDATE files SET state = 'minted', ttag = ?, link_digest = ?, iv = ?, ciphertext = ?, ciphertext_sha256 = ?,
	minted_at = ?, updated_at = ?
WHERE caller = ? AND root = ? AND rel_path = ? AND content_sha256 = ?`,
			m.TTag, m.LinkDigest, m.IV, blob, ctSHA, minted, now,
			key.Caller, key.Root, key.RelPath, key.ContentSHA256)
		return err
	})
}

// MarkFileDone records that the envelope is written. Marking again is a
// no-op.
func (j *Journal) MarkFileDone(ctx context.Context, key FileKey) (FileRecord, error) {
	return j.markFile(ctx, key, FileDone, []FileState{FileReserved, FileAnswerLost}, "no minted key recorded")
}

// MarkAnswerLost records that the encrypt was sent and its answer lost. The
// row stays so the encrypt is never sent again. Marking again is a no-op; a
// row with a recorded key gives ErrOutOfOrder.
func (j *Journal) MarkAnswerLost(ctx context.Context, key FileKey) (FileRecord, error) {
	return j.markFile(ctx, key, FileAnswerLost, []FileState{FileMinted, FileDone}, "its key is already recorded")
}

// markFile moves a file row to state to, keeping what it recorded: a row
// already there is returned unchanged, and a row in one of the states
// refused gives ErrOutOfOrder, saying why.
func (j *Journal) markFile(ctx context.Context, key FileKey, to FileState, refused []FileState, why string) (FileRecord, error) {
	return j.fileStep(ctx, key, func(tx *sql.Tx, r FileRecord) error {
		switch {
		case r.State == to:
			return nil
		case slices.Contains(refused, r.State):
			return fmt.Errorf("journal: file %s: %w: %s", key, ErrOutOfOrder, why)
		}
		_, err := tx.ExecContext(ctx, `
UPDATE files SET state = ?, updated_at = ?
WHERE caller = ? AND root = ? AND rel_path = ? AND content_sha256 = ?`,
			string(to), nowText(), key.Caller, key.Root, key.RelPath, key.ContentSHA256)
		return err
	})
}

// GetFile reads a file encryption's row, or ErrNotFound.
func (j *Journal) GetFile(ctx context.Context, key FileKey) (FileRecord, error) {
	if err := key.check(); err != nil {
		return FileRecord{}, err
	}
	return getFile(ctx, j.db, key, true)
}

// KeyMintedHere reports whether encrypt_file minted the key ttag in the
// folder root, for any caller: the one fact decrypt_file trusts about a key
// named in an envelope.
func (j *Journal) KeyMintedHere(ctx context.Context, root, ttag string) (bool, error) {
	_, err := j.MintedFile(ctx, root, ttag)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// MintedFile returns the row of the encryption that minted ttag in root
// (with the plaintext sha256, the IV and the ciphertext's sha256 that
// decrypt_file checks; not the ciphertext itself), or ErrNotFound.
func (j *Journal) MintedFile(ctx context.Context, root, ttag string) (FileRecord, error) {
	if root == "" || ttag == "" {
		return FileRecord{}, fmt.Errorf("journal: %w: a root and a t-Tag are needed", ErrInvalid)
	}
	var key FileKey
	err := j.db.QueryRowContext(ctx, `
SELECT caller, root, rel_path, content_sha256 FROM files WHERE root = ? AND ttag = ?`, root, ttag).
		Scan(&key.Caller, &key.Root, &key.RelPath, &key.ContentSHA256)
	if errors.Is(err, sql.ErrNoRows) {
		return FileRecord{}, fmt.Errorf("journal: no key minted in %q with that t-Tag: %w", root, ErrNotFound)
	}
	if err != nil {
		return FileRecord{}, fmt.Errorf("journal: look up minted key: %w", err)
	}
	return getFile(ctx, j.db, key, false)
}

func (j *Journal) fileStep(ctx context.Context, key FileKey, fn func(*sql.Tx, FileRecord) error) (FileRecord, error) {
	if err := key.check(); err != nil {
		return FileRecord{}, err
	}
	var r FileRecord
	err := j.inTx(ctx, func(tx *sql.Tx) error {
		before, err := getFile(ctx, tx, key, false)
		if err != nil {
			return err
		}
		if err := fn(tx, before); err != nil {
			if errors.Is(err, ErrOutOfOrder) {
				return err
			}
			return fmt.Errorf("journal: update file %s: %w", key, err)
		}
		r, err = getFile(ctx, tx, key, false)
		return err
	})
	return r, err
}

// getFile reads a row; withBlob also reads its IV's ciphertext (up to 16
// MiB), which only a rewrite of the envelope needs.
func getFile(ctx context.Context, q queryer, key FileKey, withBlob bool) (FileRecord, error) {
	var (
		r                         FileRecord
		state                     string
		ttag, link, ctSum, minted sql.NullString
		created, updated          string
	)
	blob := "NULL"
	if withBlob {
		blob = "ciphertext"
	}
	err := q.QueryRowContext(ctx, `
SELECT state, ttag, link_digest, iv, `+blob+`, ciphertext_sha256, minted_at, created_at, updated_at
FROM files WHERE caller = ? AND root = ? AND rel_path = ? AND content_sha256 = ?`,
		key.Caller, key.Root, key.RelPath, key.ContentSHA256).
		Scan(&state, &ttag, &link, &r.IV, &r.Ciphertext, &ctSum, &minted, &created, &updated)
	if errors.Is(err, sql.ErrNoRows) {
		return FileRecord{}, fmt.Errorf("journal: file %s: %w", key, ErrNotFound)
	}
	if err != nil {
		return FileRecord{}, fmt.Errorf("journal: read file %s: %w", key, err)
	}
	r.Key = key
	r.State = FileState(state)
	r.TTag, r.LinkDigest, r.CiphertextSHA256 = ttag.String, link.String, ctSum.String
	if r.MintedAt, err = parseNullTime(minted); err != nil {
		return FileRecord{}, err
	}
	if r.CreatedAt, err = parseTime(created); err != nil {
		return FileRecord{}, err
	}
	if r.UpdatedAt, err = parseTime(updated); err != nil {
		return FileRecord{}, err
	}
	return r, nil
}

// ReleaseFile forgets a reservation whose encrypt was definitely not
// performed (nothing sent, or the Gateway or key server refused it, so no
// key exists), so a later call may encrypt. Only a row without a key that
// this handle holds is removed: one it reserved and nobody claimed, or one
// whose send it claimed. A row another handle (another process) reserved or
// claimed is left as it is and ReleaseFile returns nil: that process may be
// sending, or about to record the key it minted. FileMinted and FileDone
// give ErrOutOfOrder; no row gives ErrNotFound.
func (j *Journal) ReleaseFile(ctx context.Context, key FileKey) error {
	if err := key.check(); err != nil {
		return err
	}
	return j.inTx(ctx, func(tx *sql.Tx) error {
		r, err := getFile(ctx, tx, key, false)
		if err != nil {
			return err
		}
		if r.State != FileReserved && r.State != FileAnswerLost {
			return fmt.Errorf("journal: file %s: %w: a row with a key is never released (it is %s)", key, ErrOutOfOrder, r.State)
		}
		_, err = tx.ExecContext(ctx, `
DELETE FROM files WHERE caller = ? AND root = ? AND rel_path = ? AND content_sha256 = ? AND state IN ('reserved', 'answer-lost')
	AND owner = ?`,
			key.Caller, key.Root, key.RelPath, key.ContentSHA256, j.owner)
		if err != nil {
			return fmt.Errorf("journal: release file %s: %w", key, err)
		}
		return nil
	})
}
