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

// migrations take a database at user_version i to i+1, in order.
func migrations() []string { return []string{schemaV1} }

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

// Services.

type service struct {
	ID              string
	Name            string
	CertFingerprint string
	CertPEM         string
	SenderJKT       string
	SenderJWK       string
	DelegatorPEM    string
	AllowScoped     bool
	Prefix          string
	SystemID        int64
}

const serviceColumns = `service_id, name, cert_fingerprint, cert_pem, sender_jkt, sender_jwk, delegator_pem, allow_scoped, prefix, system_id`

func scanService(row interface{ Scan(...any) error }) (*service, error) {
	var sv service
	err := row.Scan(&sv.ID, &sv.Name, &sv.CertFingerprint, &sv.CertPEM, &sv.SenderJKT, &sv.SenderJWK,
		&sv.DelegatorPEM, &sv.AllowScoped, &sv.Prefix, &sv.SystemID)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errNotFound
	}
	if err != nil {
		return nil, err
	}
	return &sv, nil
}

func (s *store) insertService(ctx context.Context, sv *service, now time.Time) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO services (`+serviceColumns+`, next_principal_id, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		sv.ID, sv.Name, sv.CertFingerprint, sv.CertPEM, sv.SenderJKT, sv.SenderJWK, sv.DelegatorPEM,
		sv.AllowScoped, sv.Prefix, sv.SystemID, firstPrincipalID, now.UnixNano())
	if isUniqueViolation(err) {
		return fmt.Errorf("%w: %v", errConflict, err)
	}
	return err
}

func (s *store) serviceByFingerprint(ctx context.Context, fp string) (*service, error) {
	return scanService(s.db.QueryRowContext(ctx, `SELECT `+serviceColumns+` FROM services WHERE cert_fingerprint = ?`, fp))
}

func (s *store) serviceByID(ctx context.Context, id string) (*service, error) {
	return scanService(s.db.QueryRowContext(ctx, `SELECT `+serviceColumns+` FROM services WHERE service_id = ?`, id))
}

// serviceForName finds the service whose prefix starts name, the longest
// prefix winning.
func (s *store) serviceForName(ctx context.Context, name string) (*service, error) {
	return scanService(s.db.QueryRowContext(ctx, `SELECT `+serviceColumns+` FROM services
		WHERE substr(?, 1, length(prefix)) = prefix ORDER BY length(prefix) DESC LIMIT 1`, name))
}

// serviceConflict reports which unique field of a new service is taken.
func (s *store) serviceConflict(ctx context.Context, sv *service) (string, error) {
	checks := []struct{ where, val, what string }{
		{`cert_fingerprint = ?1`, sv.CertFingerprint, "certificate"},
		{`name = ?1`, sv.Name, "name"},
		// One prefix may not start another: a principal's name must
		// belong to one service only.
		{`substr(?1, 1, length(prefix)) = prefix OR substr(prefix, 1, length(?1)) = ?1`, sv.Prefix, "prefix"},
	}
	for _, c := range checks {
		var n int
		if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM services WHERE `+c.where, c.val).Scan(&n); err != nil {
			return "", err
		}
		if n > 0 {
			return c.what, nil
		}
	}
	return "", nil
}

// Principals.

// firstPrincipalID is where each service's principal ids start.
const firstPrincipalID = 1001

type principal struct {
	Name        string
	ServiceID   string
	SystemID    int64
	PrincipalID string
	Roles       []string
	Disabled    bool
}

func (p *principal) hasRole(role string) bool {
	for _, r := range p.Roles {
		if r == role {
			return true
		}
	}
	return false
}

const principalColumns = `name, service_id, system_id, principal_id, roles, disabled`

func scanPrincipal(row interface{ Scan(...any) error }) (*principal, error) {
	var p principal
	var roles string
	err := row.Scan(&p.Name, &p.ServiceID, &p.SystemID, &p.PrincipalID, &roles, &p.Disabled)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errNotFound
	}
	if err != nil {
		return nil, err
	}
	p.Roles = splitList(roles)
	return &p, nil
}

// createPrincipal allocates the service's next principal id; ids are never
// reused, so a new principal never inherits a deleted one's ACL entries.
func (s *store) createPrincipal(ctx context.Context, sv *service, name string, roles []string, disabled bool) (*principal, error) {
	var p *principal
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var next int64
		if err := tx.QueryRowContext(ctx, `SELECT next_principal_id FROM services WHERE service_id = ?`, sv.ID).Scan(&next); err != nil {
			return err
		}
		p = &principal{Name: name, ServiceID: sv.ID, SystemID: sv.SystemID,
			PrincipalID: fmt.Sprint(next), Roles: roles, Disabled: disabled}
		_, err := tx.ExecContext(ctx, `INSERT INTO principals (`+principalColumns+`) VALUES (?, ?, ?, ?, ?, ?)`,
			p.Name, p.ServiceID, p.SystemID, p.PrincipalID, joinList(roles), disabled)
		if isUniqueViolation(err) {
			return fmt.Errorf("%w: %v", errConflict, err)
		}
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `UPDATE services SET next_principal_id = ? WHERE service_id = ?`, next+1, sv.ID)
		return err
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

func (s *store) principalByName(ctx context.Context, q queryer, name string) (*principal, error) {
	return scanPrincipal(q.QueryRowContext(ctx, `SELECT `+principalColumns+` FROM principals WHERE name = ?`, name))
}

func (s *store) principalByID(ctx context.Context, q queryer, systemID int64, principalID string) (*principal, error) {
	return scanPrincipal(q.QueryRowContext(ctx, `SELECT `+principalColumns+` FROM principals
		WHERE system_id = ? AND principal_id = ?`, systemID, principalID))
}

func (s *store) deletePrincipal(ctx context.Context, name string) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM principals WHERE name = ?`, name)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errNotFound
	}
	return nil
}

// OpenID provider bindings and identity mappings.

type providerBinding struct {
	ServiceID     string
	Issuer        string
	Audience      string
	AllowedClient string
	CAPEM         string
}

func (s *store) bindProvider(ctx context.Context, b providerBinding) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO providers (service_id, issuer, audience, allowed_client, ca_pem)
		VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (service_id, issuer) DO UPDATE SET audience = excluded.audience,
			allowed_client = excluded.allowed_client, ca_pem = excluded.ca_pem`,
		b.ServiceID, b.Issuer, b.Audience, b.AllowedClient, b.CAPEM)
	return err
}

func (s *store) binding(ctx context.Context, serviceID, issuer string) (*providerBinding, error) {
	var b providerBinding
	err := s.db.QueryRowContext(ctx, `SELECT service_id, issuer, audience, allowed_client, ca_pem FROM providers
		WHERE service_id = ? AND issuer = ?`, serviceID, issuer).
		Scan(&b.ServiceID, &b.Issuer, &b.Audience, &b.AllowedClient, &b.CAPEM)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errNotFound
	}
	if err != nil {
		return nil, err
	}
	return &b, nil
}

func (s *store) mapIdentity(ctx context.Context, serviceID, issuer, subject, principalName string, disabled bool) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO identities (service_id, issuer, subject, principal, disabled)
		VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (service_id, issuer, subject) DO UPDATE SET principal = excluded.principal,
			disabled = excluded.disabled`,
		serviceID, issuer, subject, principalName, disabled)
	return err
}

func (s *store) unmapIdentity(ctx context.Context, serviceID, issuer, subject string) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM identities WHERE service_id = ? AND issuer = ? AND subject = ?`,
		serviceID, issuer, subject)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errNotFound
	}
	return nil
}

// mappedPrincipal is the principal an enabled mapping names, or errNotFound.
func (s *store) mappedPrincipal(ctx context.Context, serviceID, issuer, subject string) (*principal, error) {
	var name string
	err := s.db.QueryRowContext(ctx, `SELECT principal FROM identities
		WHERE service_id = ? AND issuer = ? AND subject = ? AND disabled = 0`, serviceID, issuer, subject).Scan(&name)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errNotFound
	}
	if err != nil {
		return nil, err
	}
	return s.principalByName(ctx, s.db, name)
}

// Keys and ACL entries.

type keyRecord struct {
	TTag     string
	Link     string
	Bytes    []byte
	Expired  bool
	OwnerSys int64
	OwnerPID string
}

func (s *store) keyByTTag(ctx context.Context, q queryer, ttag string) (*keyRecord, error) {
	var k keyRecord
	err := q.QueryRowContext(ctx, `SELECT ttag, link, key_bytes, expired, owner_system_id, owner_principal_id
		FROM keys WHERE ttag = ?`, ttag).Scan(&k.TTag, &k.Link, &k.Bytes, &k.Expired, &k.OwnerSys, &k.OwnerPID)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errNotFound
	}
	if err != nil {
		return nil, err
	}
	return &k, nil
}

func (s *store) insertKey(ctx context.Context, tx *sql.Tx, k *keyRecord, now time.Time) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO keys (ttag, link, key_bytes, owner_system_id, owner_principal_id, expired, created_at)
		VALUES (?, ?, ?, ?, ?, 0, ?)`, k.TTag, k.Link, k.Bytes, k.OwnerSys, k.OwnerPID, now.UnixNano())
	if isUniqueViolation(err) {
		return fmt.Errorf("%w: %v", errConflict, err)
	}
	return err
}

// aclEntry is one stored entry. EndTime nil is no end; Uses nil unlimited.
type aclEntry struct {
	SystemID    int64
	PrincipalID string
	Rights      []string
	EndTime     *time.Time
	Uses        *int
}

// live reports whether the entry may be used at now.
func (e *aclEntry) live(now time.Time) bool {
	if e.EndTime != nil && !now.Before(*e.EndTime) {
		return false
	}
	return e.Uses == nil || *e.Uses > 0
}

func (e *aclEntry) has(rights ...string) bool {
	for _, have := range e.Rights {
		for _, want := range rights {
			if have == want {
				return true
			}
		}
	}
	return false
}

func scanEntry(row interface{ Scan(...any) error }) (*aclEntry, error) {
	var e aclEntry
	var rights string
	var end, uses sql.NullInt64
	if err := row.Scan(&e.SystemID, &e.PrincipalID, &rights, &end, &uses); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, errNotFound
		}
		return nil, err
	}
	e.Rights = splitList(rights)
	if end.Valid {
		t := time.Unix(0, end.Int64).UTC()
		e.EndTime = &t
	}
	if uses.Valid {
		n := int(uses.Int64)
		e.Uses = &n
	}
	return &e, nil
}

func (s *store) entry(ctx context.Context, q queryer, ttag string, systemID int64, principalID string) (*aclEntry, error) {
	return scanEntry(q.QueryRowContext(ctx, `SELECT system_id, principal_id, rights, end_time, uses FROM acl
		WHERE ttag = ? AND system_id = ? AND principal_id = ?`, ttag, systemID, principalID))
}

func (s *store) entries(ctx context.Context, q queryer, ttag string) ([]aclEntry, error) {
	rows, err := q.QueryContext(ctx, `SELECT system_id, principal_id, rights, end_time, uses FROM acl
		WHERE ttag = ? ORDER BY system_id, CAST(principal_id AS INTEGER), principal_id`, ttag)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []aclEntry
	for rows.Next() {
		e, err := scanEntry(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, *e)
	}
	return out, rows.Err()
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

func (s *store) insertEntry(ctx context.Context, tx *sql.Tx, ttag string, e *aclEntry) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO acl (ttag, system_id, principal_id, rights, end_time, uses)
		VALUES (?, ?, ?, ?, ?, ?)`, ttag, e.SystemID, e.PrincipalID, joinList(e.Rights), nullTime(e.EndTime), nullInt(e.Uses))
	if isUniqueViolation(err) || (err != nil && strings.Contains(err.Error(), "PRIMARY KEY")) {
		return fmt.Errorf("%w: %v", errConflict, err)
	}
	return err
}

func (s *store) updateEntry(ctx context.Context, tx *sql.Tx, ttag string, e *aclEntry) error {
	_, err := tx.ExecContext(ctx, `UPDATE acl SET rights = ?, end_time = ?, uses = ?
		WHERE ttag = ? AND system_id = ? AND principal_id = ?`,
		joinList(e.Rights), nullTime(e.EndTime), nullInt(e.Uses), ttag, e.SystemID, e.PrincipalID)
	return err
}

func (s *store) deleteEntry(ctx context.Context, tx *sql.Tx, ttag string, systemID int64, principalID string) error {
	_, err := tx.ExecContext(ctx, `DELETE FROM acl WHERE ttag = ? AND system_id = ? AND principal_id = ?`,
		ttag, systemID, principalID)
	return err
}

// useEntry spends one use of a limited entry.
func (s *store) useEntry(ctx context.Context, tx *sql.Tx, ttag string, e *aclEntry) error {
	if e.Uses == nil {
		return nil
	}
	_, err := tx.ExecContext(ctx, `UPDATE acl SET uses = uses - 1
		WHERE ttag = ? AND system_id = ? AND principal_id = ? AND uses > 0`, ttag, e.SystemID, e.PrincipalID)
	return err
}

func (s *store) expireKey(ctx context.Context, tx *sql.Tx, ttag string) error {
	_, err := tx.ExecContext(ctx, `UPDATE keys SET expired = 1 WHERE ttag = ?`, ttag)
	return err
}

func (s *store) removeKey(ctx context.Context, tx *sql.Tx, ttag string) error {
	if _, err := tx.ExecContext(ctx, `DELETE FROM acl WHERE ttag = ?`, ttag); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, `DELETE FROM keys WHERE ttag = ?`, ttag)
	return err
}

// Key server audit.

// Outcomes of a key-server decision.
const (
	OutcomeOK     = "OK"
	OutcomeFailed = "FAILED"
)

// AuditRow is one key-server decision, as the key server's own audit keeps
// it. Link is the key's hidden link, "" when the key was not found. Code is
// "" for an OK row.
type AuditRow struct {
	Time        time.Time
	Principal   string
	SystemID    int64
	PrincipalID string
	Operation   string
	Link        string
	Outcome     string
	Code        string
}

func (s *store) insertAudit(ctx context.Context, q queryer, row AuditRow) error {
	_, err := q.ExecContext(ctx, `INSERT INTO keyserver_audit (at, principal, system_id, principal_id, operation, link, outcome, code)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, row.Time.UnixNano(), row.Principal, row.SystemID, row.PrincipalID,
		row.Operation, row.Link, row.Outcome, row.Code)
	return err
}

func (s *store) audit(ctx context.Context) ([]AuditRow, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT at, principal, system_id, principal_id, operation, link, outcome, code
		FROM keyserver_audit ORDER BY id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []AuditRow
	for rows.Next() {
		var r AuditRow
		var at int64
		if err := rows.Scan(&at, &r.Principal, &r.SystemID, &r.PrincipalID, &r.Operation, &r.Link, &r.Outcome, &r.Code); err != nil {
			return nil, err
		}
		r.Time = time.Unix(0, at).UTC()
		out = append(out, r)
	}
	return out, rows.Err()
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
