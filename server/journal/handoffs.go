package journal

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
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
	Batch   string
	GrantID string
	// From is the step's delegating user the entry was granted as, so
	// that it can be revoked as that user even after the operator changed
	// or removed the step; "" in rows written before it was recorded.
	From string
	// Maker names the server that made the entry (NewMaker); "" in rows
	// written before it was recorded. A server's shutdown closes its own
	// entries, and leaves those of another server still running alone.
	Maker      string
	State      HandOffState // set by the journal
	CreatedAt  time.Time    // set by the journal
	ClosedAt   time.Time    // zero while open
	VerifiedAt time.Time    // zero until the entry read back as granted
	// CloseReason says how a closed row ended (one of the HandOffClosed*
	// reasons); "" while open, and for rows closed by a program that did
	// not record it (they were revoked).
	CloseReason string
}

// Why a hand-off row was closed.
const (
	// ClosedRevoked: the entry read back as this row granted it, was
	// revoked, and read back absent.
	ClosedRevoked = "revoked"
	// ClosedNotGranted: the key server refused the grant, so the row made
	// nothing and nothing was revoked.
	ClosedNotGranted = "not-granted"
	// ClosedAbsent: the recipient held no entry on the key when the row was
	// closed (the grant never took, or someone else revoked it); nothing was
	// revoked.
	ClosedAbsent = "absent"
	// ClosedLeftAlone: the recipient held an entry that is not the one this
	// row granted (other rights, another end, limited uses); it was left as
	// it is.
	ClosedLeftAlone = "left-alone"
)

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
	batch, grant_id, from_user, maker)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'open', ?, ?, ?, ?, ?)
ON CONFLICT DO NOTHING`,
			h.Step, h.Caller, h.TTag, h.DocumentID, h.FragmentID, h.SystemID, h.PrincipalID,
			formatTime(h.EndTime), nowText(), h.Batch, h.GrantID, h.From, h.Maker)
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

// AllOpenHandOffs lists every open hand-off, of every step, caller and
// grant, oldest first.
func (j *Journal) AllOpenHandOffs(ctx context.Context) ([]HandOff, error) {
	return queryHandOffs(ctx, j.db, `WHERE state = 'open'`)
}

// OpenHandOffsOfGrant lists the open hand-offs made under one grant, for
// every step and caller, oldest first.
func (j *Journal) OpenHandOffsOfGrant(ctx context.Context, grantID string) ([]HandOff, error) {
	return queryHandOffs(ctx, j.db, `WHERE grant_id = ? AND state = 'open'`, grantID)
}

// NewMaker names one server of this process for HandOff.Maker: the process
// id and a random tag, as a lock's holder is named.
func NewMaker() (string, error) {
	var tag [8]byte
	if _, err := rand.Read(tag[:]); err != nil {
		return "", fmt.Errorf("journal: hand-off maker id: %w", err)
	}
	return strconv.Itoa(os.Getpid()) + ":" + hex.EncodeToString(tag[:]), nil
}

// MakerGone reports whether the server named maker can no longer close its
// own hand-offs: its process has ended, or the row does not say who made it
// (written before makers were recorded, or unreadable). Another server of
// this process counts as running. A process id reused since (after a
// reboot) makes a gone server look running: its entries then stay open
// until their endTime, close_step or pdmcp close-step.
func MakerGone(maker string) bool {
	pidText, _, ok := strings.Cut(maker, ":")
	pid, err := strconv.Atoi(pidText)
	if !ok || err != nil || pid <= 0 {
		return true
	}
	if pid == os.Getpid() {
		return false
	}
	return !processAlive(pid)
}

// OpenHandOffsTo lists the open hand-offs to one recipient on one key, for
// every step and caller.
func (j *Journal) OpenHandOffsTo(ctx context.Context, ttag string, systemID int64, principalID string) ([]HandOff, error) {
	return queryHandOffs(ctx, j.db, `WHERE ttag = ? AND system_id = ? AND principal_id = ? AND state = 'open'`,
		ttag, systemID, principalID)
}

// GetHandOff reads one hand-off row by id.
func (j *Journal) GetHandOff(ctx context.Context, id int64) (HandOff, error) {
	rows, err := queryHandOffs(ctx, j.db, `WHERE id = ?`, id)
	if err != nil {
		return HandOff{}, err
	}
	if len(rows) == 0 {
		return HandOff{}, fmt.Errorf("journal: hand-off %d: %w", id, ErrNotFound)
	}
	return rows[0], nil
}

// OpenHandOffsOn lists the open hand-offs on one key, to anyone.
func (j *Journal) OpenHandOffsOn(ctx context.Context, ttag string) ([]HandOff, error) {
	return queryHandOffs(ctx, j.db, `WHERE ttag = ? AND state = 'open'`, ttag)
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
	return j.CloseHandOffAs(ctx, id, ClosedRevoked)
}

// CloseHandOffAs closes a hand-off row, recording why (one of the Closed*
// reasons). Closing a closed one returns it unchanged.
func (j *Journal) CloseHandOffAs(ctx context.Context, id int64, reason string) (HandOff, error) {
	switch reason {
	case ClosedRevoked, ClosedNotGranted, ClosedAbsent, ClosedLeftAlone:
	default:
		return HandOff{}, fmt.Errorf("journal: %w: close reason %q", ErrInvalid, reason)
	}
	var out HandOff
	err := j.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `
UPDATE handoffs SET state = 'closed', closed_at = ?, close_reason = ? WHERE id = ? AND state = 'open'`,
			nowText(), reason, id); err != nil {
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
	return queryRows(ctx, q, "hand-offs", scanHandOff, `
SELECT id, step, caller, ttag, document_id, fragment_id, system_id, principal_id, end_time, state, created_at, closed_at,
	batch, grant_id, verified_at, close_reason, from_user, maker
FROM handoffs `+where+` ORDER BY id`, args...)
}

func scanHandOff(rows *sql.Rows) (HandOff, error) {
	var (
		h                HandOff
		state            string
		endTime, created string
		closed, verified sql.NullString
	)
	err := rows.Scan(&h.ID, &h.Step, &h.Caller, &h.TTag, &h.DocumentID, &h.FragmentID, &h.SystemID,
		&h.PrincipalID, &endTime, &state, &created, &closed, &h.Batch, &h.GrantID, &verified, &h.CloseReason, &h.From, &h.Maker)
	if err != nil {
		return h, fmt.Errorf("journal: read hand-offs: %w", err)
	}
	h.State = HandOffState(state)
	if h.EndTime, err = parseTime(endTime); err != nil {
		return h, err
	}
	if h.CreatedAt, err = parseTime(created); err != nil {
		return h, err
	}
	if h.ClosedAt, err = parseNullTime(closed); err != nil {
		return h, err
	}
	h.VerifiedAt, err = parseNullTime(verified)
	return h, err
}

// queryRows runs query and reads each row it returns with scan; what names
// the rows in errors ("journal: read what: ...").
func queryRows[T any](ctx context.Context, q rowsQueryer, what string, scan func(*sql.Rows) (T, error), query string, args ...any) ([]T, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("journal: read %s: %w", what, err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("journal: read %s: %w", what, err)
	}
	return out, nil
}

// ensureHandOffSchema adds, to a journal of any earlier shape, what this
// file's code needs beyond the numbered migrations: the close_reason and
// from_user columns and the handoff_locks table. All are additive, so a
// journal written by an older pdmcp opens here unchanged, and an older pdmcp
// still reads one written here (it ignores the columns and the table). It
// runs inside migrate's write transaction, so two processes opening one
// file cannot both add a column.
func ensureHandOffSchema(ctx context.Context, tx *sql.Tx) error {
	for _, column := range []string{"close_reason", "from_user", "maker"} {
		has, err := hasColumn(ctx, tx, "handoffs", column)
		if err != nil {
			return err
		}
		if has {
			continue
		}
		// column is one of this file's own names, never input.
		if _, err := tx.ExecContext(ctx, `ALTER TABLE handoffs ADD COLUMN `+column+` TEXT NOT NULL DEFAULT ''`); err != nil {
			return fmt.Errorf("journal: add handoffs.%s: %w", column, err)
		}
	}
	// One row per (key, recipient) a hand-off, a close or a save check is
	// working on: who holds it (process id and a random tag) and until when
	// the hold lasts without being renewed.
	if _, err := tx.ExecContext(ctx, `
CREATE TABLE IF NOT EXISTS handoff_locks (
	ttag         TEXT NOT NULL,
	system_id    INTEGER NOT NULL,
	principal_id TEXT NOT NULL,
	holder       TEXT NOT NULL,
	until        TEXT NOT NULL,
	PRIMARY KEY (ttag, system_id, principal_id)
) STRICT`); err != nil {
		return fmt.Errorf("journal: create handoff_locks: %w", err)
	}
	return nil
}

func hasColumn(ctx context.Context, tx *sql.Tx, table, column string) (bool, error) {
	// PRAGMA takes no parameters; table is this file's own constant.
	rows, err := tx.QueryContext(ctx, "SELECT name FROM pragma_table_info('"+table+"')")
	if err != nil {
		return false, fmt.Errorf("journal: read columns of %s: %w", table, err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return false, fmt.Errorf("journal: read columns of %s: %w", table, err)
		}
		if name == column {
			return true, nil
		}
	}
	return false, rows.Err()
}

// LockKey names what a hand-off lock covers: one key and one recipient.
type LockKey struct {
	TTag        string
	SystemID    int64
	PrincipalID string
}

// ErrLockBusy: another hand-off, close or save check still holds one of
// the keys asked for when the wait ran out.
var ErrLockBusy = errors.New("another hand-off on this key and recipient is in progress")

// LockLease is how long a hand-off lock lasts without renewal. The holder
// renews it every quarter lease while it lives; a holder whose process has
// ended is passed over at once (same machine: the journal is a WAL file,
// which cannot be shared across machines).
const LockLease = time.Minute

// LockOptions change how LockHandOffs waits; the zero value waits up to
// two minutes.
type LockOptions struct {
	// Wait bounds the wait for a busy lock; 0 means two minutes.
	Wait time.Duration
	// OnWait, when set, is called once if the lock was busy at the first
	// try (tests use it to know the caller is waiting).
	OnWait func()
	// OnPanic, when set, is told of a panic recovered in the lock's
	// renewal, which runs on a goroutine of its own; that renewal is
	// skipped, as a failed one is, and the next tick tries again.
	OnPanic func(v any)
}

// LockHandOffs takes, for the caller alone across every goroutine and
// process using this journal, every (key, recipient) in keys: all at once
// or none, so two callers asking for overlapping sets cannot deadlock. It
// waits while any is held by a live holder. The returned function releases
// them. Hand-offs, their closes and the recipient's save check take these
// locks, so one (key, recipient) is worked on by one of them at a time.
func (j *Journal) LockHandOffs(ctx context.Context, keys []LockKey, o LockOptions) (func(), error) {
	if len(keys) == 0 {
		return func() {}, nil
	}
	keys = slices.Clone(keys)
	slices.SortFunc(keys, func(a, b LockKey) int {
		return strings.Compare(a.TTag+"\x00"+strconv.FormatInt(a.SystemID, 10)+"\x00"+a.PrincipalID,
			b.TTag+"\x00"+strconv.FormatInt(b.SystemID, 10)+"\x00"+b.PrincipalID)
	})
	keys = slices.Compact(keys)
	var tag [8]byte
	if _, err := rand.Read(tag[:]); err != nil {
		return nil, fmt.Errorf("journal: lock holder id: %w", err)
	}
	holder := strconv.Itoa(os.Getpid()) + ":" + hex.EncodeToString(tag[:])
	wait := o.Wait
	if wait <= 0 {
		wait = 2 * time.Minute
	}
	deadline := time.Now().Add(wait)
	waited := false
	for pause := 10 * time.Millisecond; ; pause = min(2*pause, 250*time.Millisecond) {
		got, err := j.tryLock(ctx, keys, holder)
		if err != nil {
			return nil, err
		}
		if got {
			break
		}
		if !waited {
			waited = true
			if o.OnWait != nil {
				o.OnWait()
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("journal: %w (waited %s)", ErrLockBusy, wait)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("journal: waiting for a hand-off lock: %w", ctx.Err())
		case <-time.After(pause):
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(LockLease / 4)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				j.renewLock(holder, o.OnPanic)
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(stop)
			wg.Wait()
			rctx, cancel := context.WithTimeout(context.Background(), BusyTimeout)
			defer cancel()
			_ = j.inTx(rctx, func(tx *sql.Tx) error {
				_, err := tx.ExecContext(rctx, `DELETE FROM handoff_locks WHERE holder = ?`, holder)
				return err
			})
		})
	}, nil
}

// renewLock extends holder's locks by LockLease. A failure is dropped: a
// lease is four renewals long, and the next tick tries again. A panic is
// recovered (this runs on its own goroutine, where one would end the
// process) and passed to onPanic.
func (j *Journal) renewLock(holder string, onPanic func(any)) {
	defer func() {
		if v := recover(); v != nil && onPanic != nil {
			onPanic(v)
		}
	}()
	_ = j.inTx(context.Background(), func(tx *sql.Tx) error {
		_, err := tx.Exec(`UPDATE handoff_locks SET until = ? WHERE holder = ?`,
			formatTime(time.Now().Add(LockLease)), holder)
		return err
	})
}

// tryLock takes every key for holder if none is held by a live holder.
func (j *Journal) tryLock(ctx context.Context, keys []LockKey, holder string) (bool, error) {
	got := false
	err := j.inTx(ctx, func(tx *sql.Tx) error {
		now := time.Now()
		for _, k := range keys {
			var other, until string
			err := tx.QueryRowContext(ctx, `SELECT holder, until FROM handoff_locks
WHERE ttag = ? AND system_id = ? AND principal_id = ?`, k.TTag, k.SystemID, k.PrincipalID).Scan(&other, &until)
			if errors.Is(err, sql.ErrNoRows) {
				continue
			}
			if err != nil {
				return fmt.Errorf("journal: read hand-off lock: %w", err)
			}
			if holderLive(other, until, now) {
				return nil
			}
		}
		for _, k := range keys {
			if _, err := tx.ExecContext(ctx, `INSERT INTO handoff_locks (ttag, system_id, principal_id, holder, until)
VALUES (?, ?, ?, ?, ?)
ON CONFLICT (ttag, system_id, principal_id) DO UPDATE SET holder = excluded.holder, until = excluded.until`,
				k.TTag, k.SystemID, k.PrincipalID, holder, formatTime(now.Add(LockLease))); err != nil {
				return fmt.Errorf("journal: take hand-off lock: %w", err)
			}
		}
		got = true
		return nil
	})
	return got, err
}

// holderLive reports whether a lock row still binds: its lease has not run
// out and its process (the number before the colon) is still running.
func holderLive(holder, until string, now time.Time) bool {
	end, err := parseTime(until)
	if err != nil || !end.After(now) {
		return false
	}
	pidText, _, ok := strings.Cut(holder, ":")
	pid, err := strconv.Atoi(pidText)
	if !ok || err != nil || pid <= 0 {
		return true
	}
	if pid == os.Getpid() {
		return true
	}
	return processAlive(pid)
}
