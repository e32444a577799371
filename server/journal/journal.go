// Package journal keeps the server's durable record of work that must never
// be done twice: saves of results and of compound-document sections, file
// encryptions (and with them the record of which keys this server minted in
// which folder), and the hand-offs a step opened.
//
// A journal is one SQLite file, by default beside the manifest
// (DefaultPath). Every row is keyed by the caller (the user id over HTTP;
// over stdio LocalCaller(the grant's user) for a save, "" for the rest) as
// well as by what the caller named, so two users never share a save or a
// file encryption. The journal holds ciphertext, IVs and t-Tags,
// never plaintext, a token, a session handle or a proof.
//
// A *Journal is safe for concurrent use by many goroutines, and two processes
// may open the same file: SQLite's locks (WAL mode, a busy timeout, and
// write transactions that take the write lock up front) serialize the writers.
package journal

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/pdmcp/pdmcp/internal/lowerhex"
	"github.com/pdmcp/pdmcp/internal/safefile"
	"github.com/pdmcp/pdmcp/internal/telemetry"
	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// SchemaVersion is the newest journal schema this program writes. It is kept
// in the file's PRAGMA user_version.
const SchemaVersion = 5

// BusyTimeout is how long a statement waits for another connection's lock
// (in this process or another) before it fails.
const BusyTimeout = 5 * time.Second

// Errors callers match with errors.Is.
var (
	// ErrNewerSchema: the file was written by a newer program; this one
	// refuses it rather than misread it.
	ErrNewerSchema = errors.New("journal schema is newer than this program understands")
	// ErrUnsafeMode: the file can be read or written by group or others.
	ErrUnsafeMode = errors.New("journal file is accessible to group or others")
	// ErrNotFound: no row for that key.
	ErrNotFound = errors.New("no journal record")
	// ErrIdempotencyConflict: the key was already used for other content.
	ErrIdempotencyConflict = errors.New("idempotency key already used for different content")
	// ErrOutOfOrder: a step asked for before the one it depends on, or after
	// the record was finished.
	ErrOutOfOrder = errors.New("journal step out of order")
	// ErrInvalid: an argument is missing or malformed.
	ErrInvalid = errors.New("invalid journal argument")
	// ErrMissing: OpenExisting found no file at the path. It matches
	// fs.ErrNotExist too.
	ErrMissing = errors.New("no journal file")
	// ErrReplaced: the file at the journal's path is no longer the one
	// this handle opened (removed, or another renamed or copied over it).
	ErrReplaced = errors.New("the journal file was removed or replaced since it was opened")
)

// Journal is an open journal file.
type Journal struct {
	db *sql.DB
	// reserveDB is the same file with synchronous=NORMAL, for a save's
	// Reserve and Place only: both survive a killed process (their WAL
	// frames are in the OS's cache) and are made durable by the save's
	// CommitVersion, which fsyncs the WAL with them. A power cut can lose
	// only steps of a save that gave no receipt: it sent an encrypt at
	// most (under an existing key, which creates nothing), and a file it
	// may have linked is a stray its retry skips. That keeps two fsyncs
	// off every save.
	reserveDB *sql.DB
	path      string
	// opened is the file as it was opened: CheckFile compares the path's
	// file with it.
	opened os.FileInfo
	// owner names this handle in the file rows it reserves or claims
	// (see ReleaseFile): random, one per Open, so two processes, or two
	// handles in one, never share it.
	owner string
}

// DefaultPath is the journal beside a manifest: "task-data/manifest.json"
// gives "task-data/manifest.journal.sqlite". A manifest that is a symbolic
// link has the journal of the file it names (manifest.json ->
// manifest-2026.json gives manifest-2026.journal.sqlite), so a server or
// command given the link and one given the target keep one record.
func DefaultPath(manifestPath string) string {
	if resolved, err := filepath.EvalSymlinks(manifestPath); err == nil {
		manifestPath = resolved
	}
	return strings.TrimSuffix(manifestPath, filepath.Ext(manifestPath)) + ".journal.sqlite"
}

// Open opens the journal at path, creating it (mode 0600) if it does not
// exist, and brings its schema up to SchemaVersion. It refuses a file that
// group or others can access, and one from a newer schema.
func Open(ctx context.Context, path string) (*Journal, error) {
	return open(ctx, path, "FULL", true)
}

// OpenExisting opens the journal at path as Open does, but never creates
// it: a missing file is an error matching ErrMissing (and fs.ErrNotExist).
// Readers of the record, and a server over a folder that has saved
// versions, use it, so a lost journal is never silently replaced by a new,
// empty one.
func OpenExisting(ctx context.Context, path string) (*Journal, error) {
	return open(ctx, path, "FULL", false)
}

// OpenNonDurableForBenchmarks opens the journal as Open does but with
// SQLite's synchronous=OFF: no write waits for the disk, so a crash of the
// machine (not of the process) can lose the last saves. It exists only so
// `pdmcp bench` can price the durable journal against the same work
// without fsync; no flag, config file or grant reaches it.
func OpenNonDurableForBenchmarks(ctx context.Context, path string) (*Journal, error) {
	return open(ctx, path, "OFF", true)
}

func open(ctx context.Context, path, synchronous string, create bool) (*Journal, error) {
	if path == "" {
		return nil, fmt.Errorf("journal: %w: no path given", ErrInvalid)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("journal: resolve %q: %w", path, err)
	}
	// A journal named by a symbolic link is opened, locked (its .locks
	// folder) and checked (CheckFile) as the file the link names.
	if resolved, err := filepath.EvalSymlinks(abs); err == nil {
		abs = resolved
	}
	// The driver splits its name at the first '?' to find options, so such
	// a path would silently open another file.
	if strings.ContainsAny(abs, "?#") {
		return nil, fmt.Errorf("journal: %w: path %q contains '?' or '#'", ErrInvalid, abs)
	}
	opened, err := preparePrivateFile(abs, create)
	if err != nil {
		return nil, err
	}
	// _txlock=immediate makes every transaction take the write lock at
	// BEGIN, so two writers wait on the busy timeout instead of one failing
	// when it upgrades a read lock.
	dsn := func(synchronous string) string {
		return abs + fmt.Sprintf("?_busy_timeout=%d&_foreign_keys=1&_journal_mode=WAL&_synchronous=%s&_txlock=immediate",
			BusyTimeout.Milliseconds(), synchronous)
	}
	db, err := sql.Open("sqlite", dsn(synchronous))
	if err != nil {
		return nil, fmt.Errorf("journal: open %s: %w", abs, err)
	}
	owner, err := newOwnerToken()
	if err != nil {
		db.Close()
		return nil, err
	}
	reserveSync := "NORMAL"
	if synchronous == "OFF" {
		reserveSync = "OFF"
	}
	rdb, err := sql.Open("sqlite", dsn(reserveSync))
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("journal: open %s: %w", abs, err)
	}
	j := &Journal{db: db, reserveDB: rdb, path: abs, opened: opened, owner: owner}
	if err := j.checkRetryingBusy(ctx); err != nil {
		j.Close()
		return nil, err
	}
	if err := j.migrate(ctx); err != nil {
		j.Close()
		return nil, err
	}
	return j, nil
}

// Path is the journal file's absolute path.
func (j *Journal) Path() string { return j.path }

// Close closes the journal. Safe to call on a nil *Journal.
func (j *Journal) Close() error {
	if j == nil || j.db == nil {
		return nil
	}
	err := j.db.Close()
	if j.reserveDB != nil {
		err = errors.Join(err, j.reserveDB.Close())
	}
	if err != nil {
		return fmt.Errorf("journal: close %s: %w", j.path, err)
	}
	return nil
}

// preparePrivateFile creates the file with mode 0600 if it is missing and
// create is set (SQLite would use 0644), and refuses an existing one that is
// not private. SQLite gives the -wal and -shm files the same mode as the
// database. It returns the file's identity, for CheckFile.
func preparePrivateFile(path string, create bool) (os.FileInfo, error) {
	flags := os.O_RDWR
	if create {
		flags |= os.O_CREATE
	}
	f, err := os.OpenFile(path, flags, 0o600)
	if errors.Is(err, fs.ErrNotExist) && !create {
		return nil, fmt.Errorf("journal: %s: %w: %w", path, ErrMissing, err)
	}
	if err != nil {
		return nil, fmt.Errorf("journal: open %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("journal: stat %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("journal: %w: %s is not a regular file", ErrInvalid, path)
	}
	if err := checkPrivate(fi); err != nil {
		return nil, fmt.Errorf("journal: %w", modeError{&safefile.ModeError{Path: path, Mode: fi.Mode(), Secret: true}})
	}
	return fi, nil
}

// modeError is a journal group or others may access, in the wording of
// every operator file's mode (internal/safefile); it matches ErrUnsafeMode.
type modeError struct{ *safefile.ModeError }

func (e modeError) Is(target error) bool { return target == ErrUnsafeMode }
func (e modeError) Unwrap() error        { return e.ModeError }

// CheckFile reports, as an error matching ErrReplaced, when the file at
// the journal's path is no longer the one this handle opened: removed, or
// replaced by another (a restore copied or renamed over it). SQLite keeps
// writing to the file it has open, so what is written after that would be
// lost with it; a caller about to record something checks first.
func (j *Journal) CheckFile() error {
	fi, err := os.Stat(j.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("journal: %s: %w (it is gone)", j.path, ErrReplaced)
	case err != nil:
		return fmt.Errorf("journal: stat %s: %w", j.path, err)
	case j.opened != nil && !os.SameFile(fi, j.opened):
		return fmt.Errorf("journal: %s: %w (another file is at its name)", j.path, ErrReplaced)
	}
	return nil
}

// HoldsSaves reports whether the journal records any save, finished or
// not, or any saved version. One that holds none cannot vouch for version
// files in the folder: it is new, or not the one they were saved with.
func (j *Journal) HoldsSaves(ctx context.Context) (bool, error) {
	var holds bool
	err := j.db.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM saves) OR EXISTS (SELECT 1 FROM versions)").Scan(&holds)
	if err != nil {
		return false, fmt.Errorf("journal: read %s: %w", j.path, err)
	}
	return holds, nil
}

// checkRetryingBusy runs check, retrying while SQLite answers SQLITE_BUSY.
// Two processes opening a new journal at once race to switch it to WAL, and
// SQLite answers the loser SQLITE_BUSY at once, without waiting on the busy
// timeout (measured: TestTwoProcesses failed about one run in forty on a
// loaded machine). The retry is bounded by BusyTimeout, like any other wait
// for a lock.
func (j *Journal) checkRetryingBusy(ctx context.Context) error {
	deadline := time.Now().Add(BusyTimeout)
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, 200*time.Millisecond) {
		err := j.check(ctx)
		if err == nil || !isBusy(err) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("journal: open %s: %w", j.path, ctx.Err())
		case <-time.After(wait):
		}
	}
}

// isBusy reports whether err is SQLite's SQLITE_BUSY (any extended code).
func isBusy(err error) bool {
	var coded interface{ Code() int }
	return errors.As(err, &coded) && coded.Code()&0xff == 5
}

// check confirms the connection settings took: a file system that cannot
// hold a WAL (some network mounts) would otherwise lose the guarantees
// silently.
func (j *Journal) check(ctx context.Context) error {
	var mode string
	if err := j.db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return fmt.Errorf("journal: open %s: %w", j.path, err)
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("journal: %s: journal_mode is %q, not wal (is it on a network file system?)", j.path, mode)
	}
	return nil
}

// migrations returns the schema steps; step i takes the schema from version
// i to i+1. Append only: a released step is never edited.
func migrations() []string {
	return []string{
		// 0 -> 1
		`
CREATE TABLE saves (
	kind            TEXT NOT NULL CHECK (kind IN ('result', 'fragment')),
	caller          TEXT NOT NULL,
	target          TEXT NOT NULL,               -- destination id, or document id for a fragment
	fragment        TEXT NOT NULL DEFAULT '',    -- fragment id; '' for a result
	idempotency_key TEXT NOT NULL,
	text_sha256     TEXT NOT NULL,
	state           TEXT NOT NULL CHECK (state IN ('reserved', 'encrypted', 'placed', 'committed')),
	ttag            TEXT,
	iv              BLOB,
	ciphertext      BLOB,
	placed_version  INTEGER,
	placed_path     TEXT,
	receipt         TEXT,
	created_at      TEXT NOT NULL,
	updated_at      TEXT NOT NULL,
	PRIMARY KEY (kind, caller, target, fragment, idempotency_key),
	CHECK ((kind = 'result') = (fragment = '')),
	CHECK ((state = 'reserved') = (ciphertext IS NULL)),
	CHECK ((state = 'committed') = (receipt IS NOT NULL)),
	CHECK (state <> 'placed' OR placed_path IS NOT NULL)
) STRICT;

CREATE TABLE files (
	caller            TEXT NOT NULL,
	root              TEXT NOT NULL,
	rel_path          TEXT NOT NULL,
	content_sha256    TEXT NOT NULL,
	state             TEXT NOT NULL CHECK (state IN ('reserved', 'minted', 'done', 'answer-lost')),
	ttag              TEXT,
	link_digest       TEXT,
	iv                BLOB,
	ciphertext        BLOB,
	ciphertext_sha256 TEXT,
	minted_at         TEXT,
	created_at        TEXT NOT NULL,
	updated_at        TEXT NOT NULL,
	PRIMARY KEY (caller, root, rel_path, content_sha256),
	CHECK ((state IN ('minted', 'done')) = (ttag IS NOT NULL))
) STRICT;

-- One row per minted key: the record decrypt_file trusts.
CREATE UNIQUE INDEX files_root_ttag ON files (root, ttag) WHERE ttag IS NOT NULL;

CREATE TABLE handoffs (
	id           INTEGER PRIMARY KEY,
	step         TEXT NOT NULL,
	caller       TEXT NOT NULL,
	ttag         TEXT NOT NULL,
	document_id  TEXT NOT NULL DEFAULT '',
	fragment_id  TEXT NOT NULL DEFAULT '',
	system_id    INTEGER NOT NULL,
	principal_id TEXT NOT NULL,
	end_time     TEXT NOT NULL,
	state        TEXT NOT NULL CHECK (state IN ('open', 'closed')),
	created_at   TEXT NOT NULL,
	closed_at    TEXT,
	CHECK ((state = 'closed') = (closed_at IS NOT NULL))
) STRICT;

-- At most one open entry per step, caller, key and recipient.
CREATE UNIQUE INDEX handoffs_open ON handoffs (step, caller, ttag, system_id, principal_id) WHERE state = 'open';
CREATE INDEX handoffs_step ON handoffs (step, state);
`,
		// 1 -> 2: a hand-off's entries share a batch (one hand_off call),
		// name the grant they were made under, and are verified once each
		// reads back as granted.
		`
ALTER TABLE handoffs ADD COLUMN batch TEXT NOT NULL DEFAULT '';
ALTER TABLE handoffs ADD COLUMN grant_id TEXT NOT NULL DEFAULT '';
ALTER TABLE handoffs ADD COLUMN verified_at TEXT;
CREATE INDEX handoffs_batch ON handoffs (batch);
`,
		// 2 -> 3: a file row names the handle that reserved or claimed it.
		filesOwnerMigration,
		// 3 -> 4: the record of saved versions (versions.go).
		versionsSchema,
		// 4 -> 5: each version's key and ciphertext digest, and the task
		// the journal belongs to (task.go).
		versionKeysSchema,
	}
}

// migrate applies the missing schema steps in one write transaction, so a
// second process opening the same new file waits and then finds it done.
func (j *Journal) migrate(ctx context.Context) error {
	steps := migrations()
	return j.inTx(ctx, func(tx *sql.Tx) error {
		var have int
		if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&have); err != nil {
			return fmt.Errorf("journal: read schema version of %s: %w", j.path, err)
		}
		if have > len(steps) {
			return fmt.Errorf("journal: %s: %w (file has version %d, this program knows up to %d; use a newer pdmcp or another journal)",
				j.path, ErrNewerSchema, have, len(steps))
		}
		for v := have; v < len(steps); v++ {
			if _, err := tx.ExecContext(ctx, steps[v]); err != nil {
				return fmt.Errorf("journal: %s: migrate schema %d to %d: %w", j.path, v, v+1, err)
			}
		}
		// Additive parts kept by their own table's file, outside the
		// numbered steps (see ensureHandOffSchema).
		if err := ensureHandOffSchema(ctx, tx); err != nil {
			return fmt.Errorf("journal: %s: %w", j.path, err)
		}
		if have < len(steps) {
			// PRAGMA takes no parameters; the value is our own integer.
			if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", len(steps))); err != nil {
				return fmt.Errorf("journal: %s: record schema version: %w", j.path, err)
			}
		}
		return nil
	})
}

// inTx runs fn in a write transaction (BEGIN IMMEDIATE) and commits it if fn
// returns nil.
func (j *Journal) inTx(ctx context.Context, fn func(*sql.Tx) error) error {
	return inTxOn(ctx, j.db, fn)
}

// SpanTransaction names a journal write transaction's span, from waiting
// for the write lock to the commit's fsync.
const SpanTransaction = "pdmcp.journal.transaction"

func inTxOn(ctx context.Context, db *sql.DB, fn func(*sql.Tx) error) (err error) {
	ctx, span := telemetry.Child(ctx, SpanTransaction, attribute.String("db.system.name", "sqlite"))
	defer func() {
		if err != nil {
			telemetry.Fail(span, telemetry.ErrorJournal)
		}
		span.End()
	}()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("journal: begin: %w", err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("journal: commit: %w", err)
	}
	return nil
}

// Times are stored as RFC 3339 text in UTC, so the file reads the same in
// any tool.
func formatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func parseTime(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("journal: stored time %q: %w", s, err)
	}
	return t, nil
}

func parseNullTime(s sql.NullString) (time.Time, error) {
	if !s.Valid {
		return time.Time{}, nil
	}
	return parseTime(s.String)
}

func nowText() string { return formatTime(time.Now()) }

func checkSHA256(field, v string) error {
	if !lowerhex.Valid(v, 64) {
		return fmt.Errorf("journal: %w: %s must be 64 lowercase hex digits", ErrInvalid, field)
	}
	return nil
}
