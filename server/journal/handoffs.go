package journal

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// HandOffState says whether a hand-off's entry may still exist at the key
// server.
type HandOffState string

// Hand-off states.
const (
	HandOffOpen   HandOffState = "open"
	HandOffClosed HandOffState = "closed"
)

// HandOff is one access-list entry a step made: READ on one key for the
// step's recipient until EndTime. Add it before granting, so an entry made
// just before a crash is still on record to revoke.
type HandOff struct {
	ID          int64 // set by the journal
	Step        string
	Caller      string // "" over stdio, the user id over HTTP
	TTag        string
	DocumentID  string // the section handed, for receipts (optional)
	FragmentID  string
	SystemID    int64 // the recipient
	PrincipalID string
	EndTime     time.Time
	// Batch names the one hand_off call the entry belongs to; GrantID the
	// grant it was made under (shutdown revokes its own grant's entries).
	Batch      string
	GrantID    string
	State      HandOffState // set by the journal
	CreatedAt  time.Time    // set by the journal
	ClosedAt   time.Time    // zero while open
	VerifiedAt time.Time    // zero until the entry read back as granted
}

// AddHandOff records an open hand-off. If one is already open for the same
// step, caller, key and recipient, that row is returned with inserted false
// and nothing is added.
func (j *Journal) AddHandOff(ctx context.Context, h HandOff) (_ HandOff, inserted bool, _ error) {
	if h.Step == "" || h.TTag == "" || h.PrincipalID == "" || h.EndTime.IsZero() {
		return HandOff{}, false, fmt.Errorf("journal: %w: a hand-off needs a step, a t-Tag, a recipient principal id and an end time", ErrInvalid)
	}
	var out HandOff
	err := j.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `
INSERT INTO handoffs (step, caller, ttag, document_id, fragment_id, system_id, principal_id, end_time, state, created_at,
	batch, grant_id)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'open', ?, ?, ?)
ON CONFLICT DO NOTHING`,
			h.Step, h.Caller, h.TTag, h.DocumentID, h.FragmentID, h.SystemID, h.PrincipalID,
			formatTime(h.EndTime), nowText(), h.Batch, h.GrantID)
		if err != nil {
			return fmt.Errorf("journal: add hand-off for step %q: %w", h.Step, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("journal: add hand-off for step %q: %w", h.Step, err)
		}
		inserted = n == 1
		rows, err := queryHandOffs(ctx, tx, `
WHERE step = ? AND caller = ? AND ttag = ? AND system_id = ? AND principal_id = ? AND state = 'open'`,
			h.Step, h.Caller, h.TTag, h.SystemID, h.PrincipalID)
		if err != nil {
			return err
		}
		if len(rows) != 1 {
			return fmt.Errorf("journal: add hand-off for step %q: found %d open rows after insert", h.Step, len(rows))
		}
		out = rows[0]
		return nil
	})
	return out, inserted, err
}

// OpenHandOffs lists a step's open hand-offs, for every caller, oldest
// first.
func (j *Journal) OpenHandOffs(ctx context.Context, step string) ([]HandOff, error) {
	return queryHandOffs(ctx, j.db, `WHERE step = ? AND state = 'open'`, step)
}

// StepHandOffs lists every hand-off of a step by one caller, open and
// closed, oldest first.
func (j *Journal) StepHandOffs(ctx context.Context, step, caller string) ([]HandOff, error) {
	return queryHandOffs(ctx, j.db, `WHERE step = ? AND caller = ?`, step, caller)
}

// OpenHandOffsOfGrant lists the open hand-offs made under one grant, for
// every step and caller, oldest first.
func (j *Journal) OpenHandOffsOfGrant(ctx context.Context, grantID string) ([]HandOff, error) {
	return queryHandOffs(ctx, j.db, `WHERE grant_id = ? AND state = 'open'`, grantID)
}

// OpenHandOffsTo lists the open hand-offs to one recipient on one key, for
// every step and caller.
func (j *Journal) OpenHandOffsTo(ctx context.Context, ttag string, systemID int64, principalID string) ([]HandOff, error) {
	return queryHandOffs(ctx, j.db, `WHERE ttag = ? AND system_id = ? AND principal_id = ? AND state = 'open'`,
		ttag, systemID, principalID)
}

// VerifyHandOffs records that each open hand-off in ids read back as
// granted. A closed one is left as it is.
func (j *Journal) VerifyHandOffs(ctx context.Context, ids []int64) error {
	return j.inTx(ctx, func(tx *sql.Tx) error {
		now := nowText()
		for _, id := range ids {
			if _, err := tx.ExecContext(ctx, `
UPDATE handoffs SET verified_at = ? WHERE id = ? AND state = 'open' AND verified_at IS NULL`, now, id); err != nil {
				return fmt.Errorf("journal: verify hand-off %d: %w", id, err)
			}
		}
		return nil
	})
}

// CloseHandOff records that a hand-off's entry was revoked (and read back
// absent). Closing a closed one returns it unchanged.
func (j *Journal) CloseHandOff(ctx context.Context, id int64) (HandOff, error) {
	var out HandOff
	err := j.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `
UPDATE handoffs SET state = 'closed', closed_at = ? WHERE id = ? AND state = 'open'`, nowText(), id); err != nil {
			return fmt.Errorf("journal: close hand-off %d: %w", id, err)
		}
		rows, err := queryHandOffs(ctx, tx, `WHERE id = ?`, id)
		if err != nil {
			return err
		}
		if len(rows) == 0 {
			return fmt.Errorf("journal: hand-off %d: %w", id, ErrNotFound)
		}
		out = rows[0]
		return nil
	})
	return out, err
}

type rowsQueryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func queryHandOffs(ctx context.Context, q rowsQueryer, where string, args ...any) ([]HandOff, error) {
	rows, err := q.QueryContext(ctx, `
SELECT id, step, caller, ttag, document_id, fragment_id, system_id, principal_id, end_time, state, created_at, closed_at,
	batch, grant_id, verified_at
FROM handoffs `+where+` ORDER BY id`, args...)
	if err != nil {
		return nil, fmt.Errorf("journal: read hand-offs: %w", err)
	}
	defer rows.Close()
	var out []HandOff
	for rows.Next() {
		var (
			h                HandOff
			state            string
			endTime, created string
			closed, verified sql.NullString
		)
		if err := rows.Scan(&h.ID, &h.Step, &h.Caller, &h.TTag, &h.DocumentID, &h.FragmentID, &h.SystemID,
			&h.PrincipalID, &endTime, &state, &created, &closed, &h.Batch, &h.GrantID, &verified); err != nil {
			return nil, fmt.Errorf("journal: read hand-offs: %w", err)
		}
		h.State = HandOffState(state)
		if h.EndTime, err = parseTime(endTime); err != nil {
			return nil, err
		}
		if h.CreatedAt, err = parseTime(created); err != nil {
			return nil, err
		}
		if h.ClosedAt, err = parseNullTime(closed); err != nil {
			return nil, err
		}
		if h.VerifiedAt, err = parseNullTime(verified); err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("journal: read hand-offs: %w", err)
	}
	return out, nil
}
