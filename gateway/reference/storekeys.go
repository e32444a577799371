package reference

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

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
