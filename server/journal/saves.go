package journal

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// A save (save_protected_result or save_protected_fragment) goes through
// these steps, each recorded before the next starts:
//
//	Reserve          -> SaveReserved   ask the Gateway to encrypt
//	RecordEncrypted  -> SaveEncrypted  choose the next version and its file
//	Place            -> SavePlaced     write the file under a temporary name, link it to its name, fsync it and its folder
//	CommitVersion    -> SaveCommitted  the version is in the record (versions.go); return the receipt
//
// A retry after a crash calls Reserve again and reads the state it gets back:
//   - SaveReserved: no answer was recorded. The encrypt is under the
//     destination's existing key, so asking again creates nothing new; the
//     lost ciphertext was never written anywhere.
//   - SaveEncrypted: use Encrypted, never a second encrypt.
//   - SavePlaced: the file at Placement.Path may or may not have been
//     linked. Link it if it is missing; if a file there holds other bytes
//     (a stray file), Place again above it; then CommitVersion.
//   - SaveCommitted: return Receipt; nothing else to do.
//
// RecordPlacement and Commit are the steps of journals written before the
// record (schema 2): a save committed by them has its version in the
// manifest, not in the record.

// SaveState is where a save stands.
type SaveState string

// Save states.
const (
	SaveReserved  SaveState = "reserved"
	SaveEncrypted SaveState = "encrypted"
	SavePlaced    SaveState = "placed"
	SaveCommitted SaveState = "committed"
)

// SaveID names one save: a SaveKey or a FragmentKey. Both go through the same
// methods and the same table, told apart by kind.
type SaveID interface {
	ident() (saveIdent, error)
}

// LocalCaller is the caller a save over stdio is keyed by: the grant's
// local user, so two stdio servers on one folder acting for two users keep
// two idempotency namespaces, as two users over HTTP do (their callers are
// "issuer|subject", which never begins "local:"). Saves journaled before
// this (caller "") are adopted by the first local caller that retries one
// with the same text (Reserve).
func LocalCaller(user string) string { return localPrefix + user }

const localPrefix = "local:"

// SaveKey names a save of a result to a destination (save_protected_result).
type SaveKey struct {
	Caller         string // LocalCaller(the grant's user) over stdio, the user id over HTTP
	Destination    string
	IdempotencyKey string
}

// FragmentKey names a save of one section of a compound document
// (save_protected_fragment).
type FragmentKey struct {
	Caller         string
	DocumentID     string
	FragmentID     string
	IdempotencyKey string
}

type saveIdent struct {
	kind, caller, target, fragment, idem string
}

// update sets columns of the save's row, and its updated_at, in tx.
func (id saveIdent) update(ctx context.Context, tx *sql.Tx, set string, args ...any) error {
	args = append(args, nowText(), id.kind, id.caller, id.target, id.fragment, id.idem)
	_, err := tx.ExecContext(ctx, `
UPDATE saves SET `+set+`, updated_at = ?
WHERE kind = ? AND caller = ? AND target = ? AND fragment = ? AND idempotency_key = ?`, args...)
	return err
}

func (k SaveKey) ident() (saveIdent, error) {
	if k.Destination == "" || k.IdempotencyKey == "" {
		return saveIdent{}, fmt.Errorf("journal: %w: a save key needs a destination and an idempotency key", ErrInvalid)
	}
	return saveIdent{kind: "result", caller: k.Caller, target: k.Destination, idem: k.IdempotencyKey}, nil
}

func (k FragmentKey) ident() (saveIdent, error) {
	if k.DocumentID == "" || k.FragmentID == "" || k.IdempotencyKey == "" {
		return saveIdent{}, fmt.Errorf("journal: %w: a fragment save key needs a document id, a fragment id and an idempotency key", ErrInvalid)
	}
	return saveIdent{kind: "fragment", caller: k.Caller, target: k.DocumentID, fragment: k.FragmentID, idem: k.IdempotencyKey}, nil
}

// EncryptedPayload is the Gateway's answer to a save's encrypt.
type EncryptedPayload struct {
	IV         []byte
	Ciphertext []byte
	TTag       string
	// ActingAs is the Gateway principal the save encrypted as ("" in a
	// row journaled before the record named it).
	ActingAs string
}

// Placement is the version and file a save is writing, recorded before the
// file is written.
type Placement struct {
	Version int
	Path    string
}

// Receipt is what a committed save returns, the same on every retry.
type Receipt struct {
	Destination string `json:"destination,omitempty"`
	DocumentID  string `json:"documentId,omitempty"`
	FragmentID  string `json:"fragmentId,omitempty"`
	Version     int    `json:"version"`
	// DocumentVersion is, for a section save, the compound document's
	// version with this save in it.
	DocumentVersion int       `json:"documentVersion,omitempty"`
	Path            string    `json:"path"`
	SHA256          string    `json:"sha256"`
	Size            int64     `json:"size"`
	SavedAt         time.Time `json:"savedAt"`
}

// Reservation is a save's row. Encrypted, Placement and Receipt are set once
// the matching step is recorded.
type Reservation struct {
	New        bool // this call created the row
	State      SaveState
	TextSHA256 string
	Encrypted  *EncryptedPayload
	Placement  *Placement
	Receipt    *Receipt
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

// Reserve records that a save with this key and text is starting, or finds
// the one already recorded:
//   - a new row: New is true and State is SaveReserved;
//   - the same key and text: the existing row, in whatever state it is;
//   - the same key with other text: ErrIdempotencyConflict.
//
// Of many concurrent calls with one key, in any number of processes, exactly
// one gets New.
//
// A local caller (LocalCaller) that has no row for the key but finds one
// journaled over stdio before saves were keyed by user (caller "") with the
// same key and text adopts it: the row, and its version in the record, are
// its own from then on, so a save begun before an upgrade is finished, or
// replayed, by its retry, and nothing is lost. A legacy row with other text
// is left alone and the call starts its own save: no user is refused for a
// key only another used.
func (j *Journal) Reserve(ctx context.Context, key SaveID, textSHA256 string) (Reservation, error) {
	id, err := key.ident()
	if err != nil {
		return Reservation{}, err
	}
	if err := checkSHA256("text sha256", textSHA256); err != nil {
		return Reservation{}, err
	}
	var r Reservation
	// Without an fsync of its own (Journal.reserveDB says why).
	err = inTxOn(ctx, j.reserveDB, func(tx *sql.Tx) error {
		if err := adoptLegacy(ctx, tx, id, textSHA256); err != nil {
			return err
		}
		now := nowText()
		if err := adoptRestored(ctx, tx, id, textSHA256, now); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `
INSERT INTO saves (kind, caller, target, fragment, idempotency_key, text_sha256, state, created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?, 'reserved', ?, ?)
ON CONFLICT DO NOTHING`,
			id.kind, id.caller, id.target, id.fragment, id.idem, textSHA256, now, now)
		if err != nil {
			return fmt.Errorf("journal: reserve save: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("journal: reserve save: %w", err)
		}
		if r, err = getSave(ctx, tx, id); err != nil {
			return err
		}
		if r.TextSHA256 != textSHA256 {
			return fmt.Errorf("journal: save %s: %w", id, ErrIdempotencyConflict)
		}
		r.New = n == 1
		return nil
	})
	return r, err
}

// adoptLegacy gives a local caller's save the row of the same key and
// text journaled under caller "" (see Reserve), with its record row, if
// the caller has none of its own.
func adoptLegacy(ctx context.Context, tx *sql.Tx, id saveIdent, textSHA256 string) error {
	if !strings.HasPrefix(id.caller, localPrefix) {
		return nil
	}
	res, err := tx.ExecContext(ctx, `
UPDATE saves SET caller = ?
WHERE kind = ? AND caller = '' AND target = ? AND fragment = ? AND idempotency_key = ? AND text_sha256 = ?
AND NOT EXISTS (SELECT 1 FROM saves WHERE kind = ? AND caller = ? AND target = ? AND fragment = ? AND idempotency_key = ?)`,
		id.caller, id.kind, id.target, id.fragment, id.idem, textSHA256,
		id.kind, id.caller, id.target, id.fragment, id.idem)
	if err != nil {
		return fmt.Errorf("journal: adopt a save journaled before saves were keyed by user: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return err
	}
	if _, err := tx.ExecContext(ctx, `
UPDATE versions SET caller = ?
WHERE kind = ? AND caller = '' AND target = ? AND fragment = ? AND idempotency_key = ?`,
		id.caller, id.kind, id.target, id.fragment, id.idem); err != nil {
		return fmt.Errorf("journal: adopt the record of a save journaled before saves were keyed by user: %w", err)
	}
	return nil
}

// adoptRestored gives a save whose row is gone, but whose version the
// record holds (a journal rebuilt from the sidecars, which keep the
// version's caller and idempotency key but not the save's row), its
// committed row back, with the receipt the version's save returned: its
// retry replays that version instead of saving the text again as a new
// one. Other text under that key is left to Reserve's conflict. A save
// whose row exists is not touched.
func adoptRestored(ctx context.Context, tx *sql.Tx, id saveIdent, textSHA256, now string) error {
	var exists bool
	if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM saves
WHERE kind = ? AND caller = ? AND target = ? AND fragment = ? AND idempotency_key = ?)`,
		id.kind, id.caller, id.target, id.fragment, id.idem).Scan(&exists); err != nil {
		return fmt.Errorf("journal: reserve save: %w", err)
	}
	if exists {
		return nil
	}
	// The target's rows are read through the primary key's prefix; of
	// them, one save saved at most one version under its key.
	vs, err := scanVersions(ctx, tx, `SELECT `+versionColumns+` FROM versions
WHERE kind = ? AND target = ? AND fragment = ? AND caller = ? AND idempotency_key = ? ORDER BY version LIMIT 1`,
		id.kind, id.target, id.fragment, id.caller, id.idem)
	if err != nil {
		return err
	}
	if len(vs) == 0 && strings.HasPrefix(id.caller, localPrefix) {
		// A version saved over stdio before saves were keyed by user
		// (caller ""), its save row gone with the journal it was in: a
		// local caller's retry with the same text adopts it, as
		// adoptLegacy adopts one whose row is there; other text is left
		// alone and starts a save of its own.
		if vs, err = scanVersions(ctx, tx, `SELECT `+versionColumns+` FROM versions
WHERE kind = ? AND target = ? AND fragment = ? AND caller = '' AND idempotency_key = ? AND sha256 = ? ORDER BY version LIMIT 1`,
			id.kind, id.target, id.fragment, id.idem, textSHA256); err != nil || len(vs) == 0 {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE versions SET caller = ? WHERE path = ?`, id.caller, vs[0].Path); err != nil {
			return fmt.Errorf("journal: reserve save: adopt the record's version: %w", err)
		}
	}
	if len(vs) == 0 {
		return nil
	}
	v := vs[0]
	rc := Receipt{Version: v.Version, Path: v.Path, SHA256: v.SHA256, Size: v.Size, SavedAt: v.SavedAt}
	if id.kind == "fragment" {
		rc.DocumentID, rc.FragmentID, rc.DocumentVersion = id.target, id.fragment, v.DocumentVersion
	} else {
		rc.Destination = id.target
	}
	b, err := json.Marshal(rc)
	if err != nil {
		return fmt.Errorf("journal: encode receipt: %w", err)
	}
	// The row keeps the version's text sha256: a retry with other text is
	// Reserve's ErrIdempotencyConflict, as it was before the loss. The
	// ciphertext is the version's file, not kept again here: the row is
	// committed, and a committed row's is never read.
	if _, err := tx.ExecContext(ctx, `
INSERT INTO saves (kind, caller, target, fragment, idempotency_key, text_sha256, state, ttag, iv, ciphertext, acting_as,
	placed_version, placed_path, receipt, created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?, 'committed', ?, X'', X'', ?, ?, ?, ?, ?, ?)`,
		id.kind, id.caller, id.target, id.fragment, id.idem, v.SHA256, v.TTag, v.ActingAs, v.Version, v.Path,
		string(b), now, now); err != nil {
		return fmt.Errorf("journal: reserve save: adopt the record's version: %w", err)
	}
	return nil
}

// RecordEncrypted stores the Gateway's answer before anything is written, so
// a retry after a crash does not encrypt again. Only the first answer is
// kept: if one is already recorded (a concurrent retry won), the row is
// returned unchanged and the caller must use its Encrypted.
func (j *Journal) RecordEncrypted(ctx context.Context, key SaveID, p EncryptedPayload) (Reservation, error) {
	if len(p.IV) == 0 || len(p.Ciphertext) == 0 || p.TTag == "" {
		return Reservation{}, fmt.Errorf("journal: %w: an encrypted payload needs an IV, a ciphertext and a t-Tag", ErrInvalid)
	}
	return j.step(ctx, key, func(tx *sql.Tx, id saveIdent, r Reservation) error {
		if r.State != SaveReserved {
			return nil
		}
		return id.update(ctx, tx, "state = 'encrypted', ttag = ?, iv = ?, ciphertext = ?, acting_as = ?",
			p.TTag, p.IV, p.Ciphertext, p.ActingAs)
	})
}

// RecordPlacement records the version and file the save is about to write.
// It may be called again to move a save whose version another save took.
func (j *Journal) RecordPlacement(ctx context.Context, key SaveID, p Placement) (Reservation, error) {
	if p.Version < 1 || p.Path == "" {
		return Reservation{}, fmt.Errorf("journal: %w: a placement needs a version of at least 1 and a path", ErrInvalid)
	}
	return j.step(ctx, key, func(tx *sql.Tx, id saveIdent, r Reservation) error {
		switch r.State {
		case SaveReserved:
			return fmt.Errorf("journal: save %s: %w: nothing encrypted yet", id, ErrOutOfOrder)
		case SaveCommitted:
			return fmt.Errorf("journal: save %s: %w: already committed", id, ErrOutOfOrder)
		}
		return id.update(ctx, tx, "state = 'placed', placed_version = ?, placed_path = ?", p.Version, p.Path)
	})
}

// Commit finishes a save with its receipt. A receipt must match a recorded
// placement. Committing again returns the first receipt unchanged.
func (j *Journal) Commit(ctx context.Context, key SaveID, rc Receipt) (Reservation, error) {
	b, err := json.Marshal(rc)
	if err != nil {
		return Reservation{}, fmt.Errorf("journal: encode receipt: %w", err)
	}
	return j.step(ctx, key, func(tx *sql.Tx, id saveIdent, r Reservation) error {
		switch r.State {
		case SaveReserved:
			return fmt.Errorf("journal: save %s: %w: nothing encrypted yet", id, ErrOutOfOrder)
		case SaveCommitted:
			return nil
		case SavePlaced:
			if rc.Version != r.Placement.Version || rc.Path != r.Placement.Path {
				return fmt.Errorf("journal: save %s: %w: receipt names version %d at %q, placement recorded version %d at %q",
					id, ErrOutOfOrder, rc.Version, rc.Path, r.Placement.Version, r.Placement.Path)
			}
		}
		return id.update(ctx, tx, "state = 'committed', receipt = ?", string(b))
	})
}

// Get reads a save's row, or ErrNotFound.
func (j *Journal) Get(ctx context.Context, key SaveID) (Reservation, error) {
	id, err := key.ident()
	if err != nil {
		return Reservation{}, err
	}
	return getSave(ctx, j.db, id)
}

// step reads the row, lets fn update it, and returns the row as it stands
// after, all in one write transaction.
func (j *Journal) step(ctx context.Context, key SaveID, fn func(*sql.Tx, saveIdent, Reservation) error) (Reservation, error) {
	return j.stepOn(ctx, j.db, key, fn)
}

// stepOn is step on the connection pool db: j.db (fsynced at commit) or
// j.reserveDB (not; see Journal.reserveDB).
func (j *Journal) stepOn(ctx context.Context, db *sql.DB, key SaveID, fn func(*sql.Tx, saveIdent, Reservation) error) (Reservation, error) {
	id, err := key.ident()
	if err != nil {
		return Reservation{}, err
	}
	var r Reservation
	err = inTxOn(ctx, db, func(tx *sql.Tx) error {
		before, err := getSave(ctx, tx, id)
		if err != nil {
			return err
		}
		if err := fn(tx, id, before); err != nil {
			if errors.Is(err, ErrOutOfOrder) {
				return err
			}
			return fmt.Errorf("journal: update save %s: %w", id, err)
		}
		r, err = getSave(ctx, tx, id)
		return err
	})
	return r, err
}

// String names a save in errors without its content.
func (id saveIdent) String() string {
	if id.kind == "fragment" {
		return fmt.Sprintf("(caller %q, document %q, fragment %q, key %q)", id.caller, id.target, id.fragment, id.idem)
	}
	return fmt.Sprintf("(caller %q, destination %q, key %q)", id.caller, id.target, id.idem)
}

type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func getSave(ctx context.Context, q queryer, id saveIdent) (Reservation, error) {
	var (
		r                  Reservation
		state              string
		ttag, path, rcText sql.NullString
		actingAs           string
		version            sql.NullInt64
		iv, ct             []byte
		created, updated   string
	)
	err := q.QueryRowContext(ctx, `
SELECT text_sha256, state, ttag, iv, ciphertext, placed_version, placed_path, receipt, created_at, updated_at, acting_as
FROM saves WHERE kind = ? AND caller = ? AND target = ? AND fragment = ? AND idempotency_key = ?`,
		id.kind, id.caller, id.target, id.fragment, id.idem).
		Scan(&r.TextSHA256, &state, &ttag, &iv, &ct, &version, &path, &rcText, &created, &updated, &actingAs)
	if errors.Is(err, sql.ErrNoRows) {
		return Reservation{}, fmt.Errorf("journal: save %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Reservation{}, fmt.Errorf("journal: read save %s: %w", id, err)
	}
	r.State = SaveState(state)
	if ct != nil {
		r.Encrypted = &EncryptedPayload{IV: iv, Ciphertext: ct, TTag: ttag.String, ActingAs: actingAs}
	}
	if path.Valid {
		r.Placement = &Placement{Version: int(version.Int64), Path: path.String}
	}
	if rcText.Valid {
		var rc Receipt
		if err := json.Unmarshal([]byte(rcText.String), &rc); err != nil {
			return Reservation{}, fmt.Errorf("journal: save %s: stored receipt: %w", id, err)
		}
		r.Receipt = &rc
	}
	if r.CreatedAt, err = parseTime(created); err != nil {
		return Reservation{}, err
	}
	if r.UpdatedAt, err = parseTime(updated); err != nil {
		return Reservation{}, err
	}
	return r, nil
}
