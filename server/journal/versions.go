package journal

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// The record of saved versions. Every version the server writes (a
// destination's result, a section's new version) is one row of the
// versions table, inserted in the same transaction that commits its save,
// once the version's file is durable at its name. manifest.json is the
// operator's file: the server reads it and never writes it, and the
// versions it lists (written by earlier releases) are history below the
// record's.
//
// A section's rows form chains: each row names the IV of the manifest's
// version of that section the chain grows from (base_iv). When the
// operator replaces the section in the manifest (protect again), its IV
// changes, no chain grows from it, and the manifest's section is current
// again; the old chain stays in the record as history.

// versionsSchema is schema step 2 -> 3: the record, the acting principal
// of a save, and the index that allocation reads.
const versionsSchema = `
ALTER TABLE saves ADD COLUMN acting_as TEXT NOT NULL DEFAULT '';
CREATE INDEX saves_placed ON saves (kind, target, fragment, placed_version) WHERE placed_version IS NOT NULL;

CREATE TABLE versions (
	kind             TEXT NOT NULL CHECK (kind IN ('result', 'fragment')),
	target           TEXT NOT NULL,               -- destination id, or document id for a section
	fragment         TEXT NOT NULL DEFAULT '',    -- section id; '' for a result
	version          INTEGER NOT NULL CHECK (version >= 1),
	document_version INTEGER NOT NULL DEFAULT 0,  -- a section's: the document's version with it
	base_iv          TEXT NOT NULL DEFAULT '',    -- a section's: the manifest IV its chain grows from
	path             TEXT NOT NULL,               -- relative to the manifest's folder, '/'-separated
	iv               TEXT NOT NULL,               -- base64
	sha256           TEXT NOT NULL,               -- the plaintext's, hex
	size             INTEGER NOT NULL,
	saved_at         TEXT NOT NULL,
	caller           TEXT NOT NULL,               -- '' over stdio, the user id over HTTP
	acting_as        TEXT NOT NULL,               -- the Gateway principal the save encrypted as
	idempotency_key  TEXT NOT NULL,
	PRIMARY KEY (kind, target, fragment, version),
	UNIQUE (path),
	CHECK ((kind = 'result') = (fragment = ''))
) STRICT;

CREATE INDEX versions_chain ON versions (target, fragment, base_iv, version) WHERE kind = 'fragment';
`

// ErrVersionTaken: the version (or its path) is already in the record.
var ErrVersionTaken = errors.New("version already in the record")

// Version is one row of the record.
type Version struct {
	// Destination is set for a result; DocumentID and FragmentID for a
	// section.
	Destination string `json:"destinationId,omitempty"`
	DocumentID  string `json:"documentId,omitempty"`
	FragmentID  string `json:"fragmentId,omitempty"`
	Version     int    `json:"version"`
	// DocumentVersion is a section's: the document's version with it.
	DocumentVersion int `json:"documentVersion,omitempty"`
	// BaseIV is a section's: the IV of the manifest's version of the
	// section this one follows (through others of the record).
	BaseIV string `json:"baseIv,omitempty"`
	Path   string `json:"path"`
	IV     string `json:"iv"`
	// TTag is the key the version was encrypted under: its own, whatever
	// the manifest names for its destination or data type today.
	TTag string `json:"ttag"`
	// CiphertextSHA256 is the hex sha256 of the version's file; "" for a
	// version recorded before the record kept it.
	CiphertextSHA256 string `json:"ciphertextSha256,omitempty"`
	// SHA256 is the plaintext's, hex.
	SHA256         string    `json:"sha256"`
	Size           int64     `json:"size"`
	SavedAt        time.Time `json:"savedAt"`
	Caller         string    `json:"caller"`
	ActingAs       string    `json:"actingAs"`
	IdempotencyKey string    `json:"idempotencyKey"`
}

// DocumentBase is what the manifest says of a compound document, which a
// section's version is allocated and counted against.
type DocumentBase struct {
	Version int
	// FragmentIVs maps each section's id to its IV in the manifest.
	FragmentIVs map[string]string
}

// Place chooses the save's version and file and records them, before the
// file is made. The version is above floor (the highest the manifest
// names), above every version of the record and every version another
// save holds placed, and above after (a version this save found taken by a
// stray file; 0 for none); pathOf names its file. In one write transaction,
// so two processes never place two saves at one version.
//
// enc, when not nil, is the Gateway's answer, recorded in the same
// transaction (one commit instead of RecordEncrypted's and Place's): only
// on a save still reserved; a save whose answer another attempt recorded
// first keeps that answer and its placement, and the caller uses the row's.
func (j *Journal) Place(ctx context.Context, key SaveID, enc *EncryptedPayload, floor, after int, pathOf func(int) string) (Reservation, error) {
	if enc != nil && (len(enc.IV) == 0 || len(enc.Ciphertext) == 0 || enc.TTag == "") {
		return Reservation{}, fmt.Errorf("journal: %w: an encrypted payload needs an IV, a ciphertext and a t-Tag", ErrInvalid)
	}
	// Without an fsync of its own, as Reserve: a placement outlives a
	// killed process, and the save's commit fsyncs the WAL with it. A power
	// cut before that commit can lose only a placement no receipt was given
	// for: its retry encrypts again under the destination's existing key
	// (creating nothing) and skips a file left at the lost placement's name
	// as a stray.
	return j.stepOn(ctx, j.reserveDB, key, func(tx *sql.Tx, id saveIdent, r Reservation) error {
		switch {
		case r.State == SaveCommitted:
			return fmt.Errorf("journal: save %s: %w: already committed", id, ErrOutOfOrder)
		case r.State == SaveReserved && enc == nil:
			return fmt.Errorf("journal: save %s: %w: nothing encrypted yet", id, ErrOutOfOrder)
		case r.State == SavePlaced && enc != nil:
			return nil
		}
		var recorded, placed sql.NullInt64
		if err := tx.QueryRowContext(ctx, `SELECT MAX(version) FROM versions WHERE kind = ? AND target = ? AND fragment = ?`,
			id.kind, id.target, id.fragment).Scan(&recorded); err != nil {
			return err
		}
		if err := tx.QueryRowContext(ctx, `
SELECT MAX(placed_version) FROM saves
WHERE kind = ? AND target = ? AND fragment = ? AND placed_version IS NOT NULL`,
			id.kind, id.target, id.fragment).Scan(&placed); err != nil {
			return err
		}
		n := max(floor, after, int(recorded.Int64), int(placed.Int64)) + 1
		p := pathOf(n)
		if p == "" {
			return fmt.Errorf("journal: %w: no path for version %d", ErrInvalid, n)
		}
		if r.State == SaveReserved {
			return id.update(ctx, tx, "state = 'placed', ttag = ?, iv = ?, ciphertext = ?, acting_as = ?, placed_version = ?, placed_path = ?",
				enc.TTag, enc.IV, enc.Ciphertext, enc.ActingAs, n, p)
		}
		return id.update(ctx, tx, "state = 'placed', placed_version = ?, placed_path = ?", n, p)
	})
}

// CommitVersion puts the save's version in the record and commits the save
// with its receipt, in one write transaction. v must name the save's
// placement. For a section, doc is the manifest's document: the receipt's
// DocumentVersion is the document's version with this save in it.
// Committing again returns the first receipt; a version or path already in
// the record for another save is ErrVersionTaken and changes nothing.
func (j *Journal) CommitVersion(ctx context.Context, key SaveID, v Version, doc DocumentBase) (Reservation, error) {
	return j.step(ctx, key, func(tx *sql.Tx, id saveIdent, r Reservation) error {
		switch r.State {
		case SaveCommitted:
			return nil
		case SavePlaced:
		default:
			return fmt.Errorf("journal: save %s: %w: no placement recorded", id, ErrOutOfOrder)
		}
		if v.Version != r.Placement.Version || v.Path != r.Placement.Path {
			return fmt.Errorf("journal: save %s: %w: version %d at %q, placement recorded version %d at %q",
				id, ErrOutOfOrder, v.Version, v.Path, r.Placement.Version, r.Placement.Path)
		}
		rc := Receipt{Version: v.Version, Path: v.Path, SHA256: v.SHA256, Size: v.Size, SavedAt: v.SavedAt}
		if id.kind == "fragment" {
			rc.DocumentID, rc.FragmentID = id.target, id.fragment
			heads, err := heads(ctx, tx, id.target, doc.FragmentIVs)
			if err != nil {
				return err
			}
			dv := doc.Version
			for _, h := range heads {
				dv = max(dv, h.DocumentVersion)
			}
			v.DocumentVersion = dv + 1
			v.BaseIV = doc.FragmentIVs[id.fragment]
			rc.DocumentVersion = v.DocumentVersion
		} else {
			rc.Destination = id.target
			v.DocumentVersion, v.BaseIV = 0, ""
		}
		// The key is the one the save's ciphertext was made under, as the
		// save's row recorded it.
		ttag := v.TTag
		if r.Encrypted != nil {
			ttag = r.Encrypted.TTag
		}
		// Two lookups, each on its own index (an OR of the two could scan
		// the table, whose size is the history).
		var taken bool
		if err := tx.QueryRowContext(ctx, `
SELECT EXISTS (SELECT 1 FROM versions WHERE kind = ? AND target = ? AND fragment = ? AND version = ?)
	OR EXISTS (SELECT 1 FROM versions WHERE path = ?)`,
			id.kind, id.target, id.fragment, v.Version, v.Path).Scan(&taken); err != nil {
			return err
		}
		if taken {
			return fmt.Errorf("journal: save %s: version %d at %q: %w", id, v.Version, v.Path, ErrVersionTaken)
		}
		if _, err := tx.ExecContext(ctx, `
INSERT INTO versions (kind, target, fragment, version, document_version, base_iv, path, iv, sha256, size, saved_at,
	caller, acting_as, idempotency_key, ttag, ciphertext_sha256)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			id.kind, id.target, id.fragment, v.Version, v.DocumentVersion, v.BaseIV, v.Path, v.IV, v.SHA256, v.Size,
			formatTime(v.SavedAt), id.caller, v.ActingAs, id.idem, ttag, v.CiphertextSHA256); err != nil {
			return err
		}
		b, err := json.Marshal(rc)
		if err != nil {
			return fmt.Errorf("encode receipt: %w", err)
		}
		return id.update(ctx, tx, "state = 'committed', receipt = ?", string(b))
	})
}

// Heads returns, for each section of a compound document, the newest
// version of the record that follows the manifest's (the chain growing
// from the IV fragmentIVs names); a section with none is absent. It reads
// one indexed row per section, whatever the history.
func (j *Journal) Heads(ctx context.Context, documentID string, fragmentIVs map[string]string) (map[string]Version, error) {
	return heads(ctx, j.db, documentID, fragmentIVs)
}

func heads(ctx context.Context, q rowsQueryer, documentID string, fragmentIVs map[string]string) (map[string]Version, error) {
	out := map[string]Version{}
	for frag, iv := range fragmentIVs {
		vs, err := scanVersions(ctx, q, `
SELECT `+versionColumns+` FROM versions
WHERE kind = 'fragment' AND target = ? AND fragment = ? AND base_iv = ?
ORDER BY version DESC LIMIT 1`, documentID, frag, iv)
		if err != nil {
			return nil, err
		}
		if len(vs) == 1 {
			out[frag] = vs[0]
		}
	}
	return out, nil
}

// Versions returns every row of the record: results by destination, then
// sections by document and section, each oldest first.
func (j *Journal) Versions(ctx context.Context) ([]Version, error) {
	return scanVersions(ctx, j.db, `SELECT `+versionColumns+` FROM versions ORDER BY kind DESC, target, fragment, version`)
}

const versionColumns = `kind, target, fragment, version, document_version, base_iv, path, iv, sha256, size, saved_at,
	caller, acting_as, idempotency_key, ttag, ciphertext_sha256`

func scanVersions(ctx context.Context, q rowsQueryer, query string, args ...any) ([]Version, error) {
	return queryRows(ctx, q, "versions", scanVersion, query, args...)
}

func scanVersion(rows *sql.Rows) (Version, error) {
	var (
		v                      Version
		kind, target, fragment string
		saved                  string
	)
	err := rows.Scan(&kind, &target, &fragment, &v.Version, &v.DocumentVersion, &v.BaseIV, &v.Path, &v.IV,
		&v.SHA256, &v.Size, &saved, &v.Caller, &v.ActingAs, &v.IdempotencyKey, &v.TTag, &v.CiphertextSHA256)
	if err != nil {
		return v, fmt.Errorf("journal: read versions: %w", err)
	}
	if kind == "result" {
		v.Destination = target
	} else {
		v.DocumentID, v.FragmentID = target, fragment
	}
	v.SavedAt, err = parseTime(saved)
	return v, err
}

// AddHistoryForBenchmarks puts n versions of destination into the record
// in one transaction, numbered after the record's newest, as if saved at
// savedAt: `pdmcp bench` prices a save with a long history against one with
// none. Their files do not exist. No flag, config file or grant reaches it.
func (j *Journal) AddHistoryForBenchmarks(ctx context.Context, destination string, n int, savedAt time.Time) error {
	return j.inTx(ctx, func(tx *sql.Tx) error {
		var last sql.NullInt64
		if err := tx.QueryRowContext(ctx, `SELECT MAX(version) FROM versions WHERE kind = 'result' AND target = ? AND fragment = ''`,
			destination).Scan(&last); err != nil {
			return err
		}
		st, err := tx.PrepareContext(ctx, `
INSERT INTO versions (kind, target, version, path, iv, sha256, size, saved_at, caller, acting_as, idempotency_key)
VALUES ('result', ?, ?, ?, 'AAAAAAAAAAAAAAAAAAAAAA==', ?, 0, ?, 'bench', 'bench', ?)`)
		if err != nil {
			return err
		}
		defer st.Close()
		at := formatTime(savedAt)
		for i := range n {
			v := int(last.Int64) + i + 1
			if _, err := st.ExecContext(ctx, destination, v, fmt.Sprintf("results/%s.v%d.bin", destination, v),
				"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", at, fmt.Sprintf("bench-history-%d", v)); err != nil {
				return fmt.Errorf("journal: history row %d: %w", v, err)
			}
		}
		return nil
	})
}

// RestoreVersions puts versions rebuilt from elsewhere (the sidecar files
// beside the saved files, server/sidecar) back into the record, in one
// write transaction, and returns how many rows it added. A version the
// record already holds at the same path, with the same IV, is skipped; a
// version or path the record holds otherwise is ErrVersionTaken and
// nothing is added. A version at the path an unfinished save holds placed
// is skipped too: that save (its retry) commits it, and would find it
// taken. The save rows are not rebuilt: Reserve gives a retry of a
// restored version's save its receipt back (adoptRestored).
func (j *Journal) RestoreVersions(ctx context.Context, vs []Version) (int, error) {
	n := 0
	err := j.inTx(ctx, func(tx *sql.Tx) error {
		n = 0
		for _, v := range vs {
			kind, target, fragment := "result", v.Destination, ""
			if v.Destination == "" {
				kind, target, fragment = "fragment", v.DocumentID, v.FragmentID
			}
			if target == "" || (kind == "fragment" && fragment == "") || v.Version < 1 || v.Path == "" || v.IV == "" {
				return fmt.Errorf("journal: %w: a restored version needs its target, a version, a path and an IV (%q)", ErrInvalid, v.Path)
			}
			if err := checkSHA256("sha256", v.SHA256); err != nil {
				return err
			}
			existing, err := scanVersions(ctx, tx, `SELECT `+versionColumns+` FROM versions
WHERE (kind = ? AND target = ? AND fragment = ? AND version = ?) OR path = ?`, kind, target, fragment, v.Version, v.Path)
			if err != nil {
				return err
			}
			if len(existing) == 1 && existing[0].Path == v.Path && existing[0].Version == v.Version && existing[0].IV == v.IV {
				continue
			}
			if len(existing) > 0 {
				return fmt.Errorf("journal: restore version %d at %q: the record holds another: %w", v.Version, v.Path, ErrVersionTaken)
			}
			var placed bool
			if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM saves WHERE placed_path = ? AND state <> 'committed')`,
				v.Path).Scan(&placed); err != nil {
				return fmt.Errorf("journal: restore version %d at %q: %w", v.Version, v.Path, err)
			}
			if placed {
				continue
			}
			if _, err := tx.ExecContext(ctx, `
INSERT INTO versions (kind, target, fragment, version, document_version, base_iv, path, iv, sha256, size, saved_at,
	caller, acting_as, idempotency_key, ttag, ciphertext_sha256)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
				kind, target, fragment, v.Version, v.DocumentVersion, v.BaseIV, v.Path, v.IV, v.SHA256, v.Size,
				formatTime(v.SavedAt), v.Caller, v.ActingAs, v.IdempotencyKey, v.TTag, v.CiphertextSHA256); err != nil {
				return fmt.Errorf("journal: restore version %d at %q: %w", v.Version, v.Path, err)
			}
			n++
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// UnfinishedPlacements lists the paths that saves not yet committed hold
// placed, sorted: a version file at one of them is a save in progress (or
// stopped between its link and its commit), which its retry finishes.
func (j *Journal) UnfinishedPlacements(ctx context.Context) ([]string, error) {
	return queryRows(ctx, j.db, "placements", func(rows *sql.Rows) (string, error) {
		var p string
		err := rows.Scan(&p)
		return p, err
	}, `SELECT placed_path FROM saves WHERE state <> 'committed' AND placed_path IS NOT NULL ORDER BY placed_path`)
}
