package reference

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"sort"
	"strings"
	"time"

	// The pure-Go SQLite driver, registered as "sqlite".
	_ "modernc.org/sqlite"
)

// schemaV1 is the first version of the database. A later version is a new
// constant appended to migrations.
const schemaV1 = `
CREATE TABLE services (
	service_id        TEXT PRIMARY KEY,
	name              TEXT NOT NULL UNIQUE,
	cert_fingerprint  TEXT NOT NULL UNIQUE,
	cert_pem          TEXT NOT NULL,
	sender_jkt        TEXT NOT NULL,
	sender_jwk        TEXT NOT NULL,
	delegator_pem     TEXT NOT NULL,
	allow_scoped      INTEGER NOT NULL,
	prefix            TEXT NOT NULL UNIQUE,
	system_id         INTEGER NOT NULL UNIQUE,
	next_principal_id INTEGER NOT NULL,
	created_at        INTEGER NOT NULL
);
CREATE TABLE principals (
	name         TEXT PRIMARY KEY,
	service_id   TEXT NOT NULL REFERENCES services(service_id),
	system_id    INTEGER NOT NULL,
	principal_id TEXT NOT NULL,
	roles        TEXT NOT NULL,
	disabled     INTEGER NOT NULL,
	UNIQUE (system_id, principal_id)
);
CREATE TABLE keys (
	ttag               TEXT PRIMARY KEY,
	link               TEXT NOT NULL UNIQUE,
	key_bytes          BLOB NOT NULL,
	owner_system_id    INTEGER NOT NULL,
	owner_principal_id TEXT NOT NULL,
	expired            INTEGER NOT NULL,
	created_at         INTEGER NOT NULL
);
CREATE TABLE acl (
	ttag         TEXT NOT NULL REFERENCES keys(ttag) ON DELETE CASCADE,
	system_id    INTEGER NOT NULL,
	principal_id TEXT NOT NULL,
	rights       TEXT NOT NULL,
	end_time     INTEGER,
	uses         INTEGER,
	PRIMARY KEY (ttag, system_id, principal_id)
);
CREATE TABLE providers (
	service_id     TEXT NOT NULL REFERENCES services(service_id),
	issuer         TEXT NOT NULL,
	audience       TEXT NOT NULL,
	allowed_client TEXT NOT NULL,
	ca_pem         TEXT NOT NULL,
	PRIMARY KEY (service_id, issuer)
);
CREATE TABLE identities (
	service_id TEXT NOT NULL REFERENCES services(service_id),
	issuer     TEXT NOT NULL,
	subject    TEXT NOT NULL,
	principal  TEXT NOT NULL REFERENCES principals(name) ON DELETE CASCADE,
	disabled   INTEGER NOT NULL,
	PRIMARY KEY (service_id, issuer, subject)
);
CREATE TABLE keyserver_audit (
	id           INTEGER PRIMARY KEY AUTOINCREMENT,
	at           INTEGER NOT NULL,
	principal    TEXT NOT NULL,
	system_id    INTEGER NOT NULL,
	principal_id TEXT NOT NULL,
	operation    TEXT NOT NULL,
	link         TEXT NOT NULL,
	outcome      TEXT NOT NULL,
	code         TEXT NOT NULL
);
`

// schemaV2 keeps, beside each key-server decision, the W3C trace id of the
// request that asked for it ("" when it carried none), so a caller's
// trace joins the key server's row.
const schemaV2 = `ALTER TABLE keyserver_audit ADD COLUMN trace_id TEXT NOT NULL DEFAULT '';`

// migrations take a database at user_version i to i+1, in order.
func migrations() []string { return []string{schemaV1, schemaV2} }

// errNotFound is a row that is not there; callers turn it into the
// route's own refusal.
var errNotFound = errors.New("not found")

// errConflict is a unique key that is already taken.
var errConflict = errors.New("already exists")

// store is the Gateway's and the key server's durable state.
type store struct {
	db *sql.DB
}

func openStore(ctx context.Context, path string) (*store, error) {
	if path == "" {
		return nil, errors.New("reference gateway: DBPath is required")
	}
	// Create the file 0600 before SQLite does: it holds key bytes, and
	// SQLite gives its -wal and -shm files the database file's mode.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("reference gateway: create database: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("reference gateway: create database: %w", err)
	}
	q := url.Values{}
	q.Set("_busy_timeout", "10000")
	q.Set("_journal_mode", "WAL")
	q.Set("_foreign_keys", "1")
	q.Set("_synchronous", "NORMAL")
	// Write transactions take the write lock when they begin, so that two
	// of them never deadlock upgrading read locks; the busy timeout then
	// queues them.
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("reference gateway: open database: %w", err)
	}
	db.SetMaxOpenConns(4)
	s := &store{db: db}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

func (s *store) close() error { return s.db.Close() }

func (s *store) migrate(ctx context.Context) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("reference gateway: migrate: %w", err)
	}
	defer tx.Rollback()
	schema := migrations()
	var version int
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		return fmt.Errorf("reference gateway: read schema version: %w", err)
	}
	if version > len(schema) {
		return fmt.Errorf("reference gateway: database schema version %d is newer than this program's %d", version, len(schema))
	}
	for i := version; i < len(schema); i++ {
		if _, err := tx.ExecContext(ctx, schema[i]); err != nil {
			return fmt.Errorf("reference gateway: migrate to schema %d: %w", i+1, err)
		}
	}
	// PRAGMA takes no bound parameters; the value is our own integer.
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", len(schema))); err != nil {
		return fmt.Errorf("reference gateway: set schema version: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("reference gateway: migrate: %w", err)
	}
	return nil
}

// inTx runs fn in one write transaction, committing when fn returns nil.
func (s *store) inTx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// queryer is what both *sql.DB and *sql.Tx offer.
type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

func isUniqueViolation(err error) bool {
	return err != nil && strings.Contains(err.Error(), "UNIQUE constraint failed")
}

func nullTime(t *time.Time) sql.NullInt64 {
	if t == nil {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixNano(), Valid: true}
}

func nullInt(n *int) sql.NullInt64 {
	if n == nil {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: int64(*n), Valid: true}
}

// Lists (roles, rights) are stored comma-separated, sorted.

func joinList(xs []string) string {
	c := append([]string(nil), xs...)
	sort.Strings(c)
	return strings.Join(c, ",")
}

func splitList(s string) []string {
	if s == "" {
		return []string{}
	}
	return strings.Split(s, ",")
}
