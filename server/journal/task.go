package journal

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// A journal belongs to one task: the manifest's task identity
// (grant.Manifest.Task) is kept in the meta table the first time a
// program that knows it opens the journal, and a journal of another task
// is refused by name from then on. A new task seeded into a folder whose
// journal is still there never inherits that journal's versions.

// versionKeysSchema is schema step 4 -> 5: each version keeps the t-Tag it
// was encrypted under and the sha256 of its ciphertext (a rotated
// destination key never relabels an old version), and the meta table
// holds the task. A version saved before this step takes its key from its
// save's row, which has always kept it; its ciphertext digest stays empty
// (unknown: the file was not read by the migration).
const versionKeysSchema = `
ALTER TABLE versions ADD COLUMN ttag TEXT NOT NULL DEFAULT '';
ALTER TABLE versions ADD COLUMN ciphertext_sha256 TEXT NOT NULL DEFAULT '';
UPDATE versions SET ttag = COALESCE((
	SELECT s.ttag FROM saves s
	WHERE s.kind = versions.kind AND s.caller = versions.caller AND s.target = versions.target
		AND s.fragment = versions.fragment AND s.idempotency_key = versions.idempotency_key), '');

CREATE TABLE meta (
	name  TEXT PRIMARY KEY,
	value TEXT NOT NULL
) STRICT;
`

// metaTask is the meta row naming the task the journal belongs to.
const metaTask = "task"

// ErrOtherTask: the journal belongs to another task than the manifest's.
var ErrOtherTask = errors.New("the journal belongs to another task")

// TaskError is ErrOtherTask with both names.
type TaskError struct {
	Path string // the journal file
	// Journal is the task the journal belongs to, Want the one asked for
	// (the manifest's).
	Journal, Want string
}

func (e *TaskError) Error() string {
	return fmt.Sprintf("journal %s belongs to task %q, not to the manifest's task %q: %v; "+
		"use the journal of task %q (or move this one away; pdmcp check --repair rebuilds the record from the folder)",
		e.Path, e.Journal, e.Want, ErrOtherTask, e.Want)
}

// Is makes errors.Is(err, ErrOtherTask) hold.
func (e *TaskError) Is(target error) bool { return target == ErrOtherTask }

// Task returns the task the journal belongs to; "" when none is recorded
// (a journal of a release before task identities, or not yet used by one
// that knows its task).
func (j *Journal) Task(ctx context.Context) (string, error) {
	return readTask(ctx, j.db)
}

func readTask(ctx context.Context, q rowsQueryer) (string, error) {
	rows, err := q.QueryContext(ctx, `SELECT value FROM meta WHERE name = ?`, metaTask)
	if err != nil {
		return "", fmt.Errorf("journal: read task: %w", err)
	}
	defer rows.Close()
	var task string
	if rows.Next() {
		if err := rows.Scan(&task); err != nil {
			return "", fmt.Errorf("journal: read task: %w", err)
		}
	}
	if err := rows.Err(); err != nil {
		return "", fmt.Errorf("journal: read task: %w", err)
	}
	return task, nil
}

// CheckTask refuses, with a *TaskError, a journal that belongs to another
// task than task. A journal with no task recorded, or an empty task (a
// manifest from before task identities), passes: there is nothing to
// compare. It writes nothing; BindTask is what records a task.
func (j *Journal) CheckTask(ctx context.Context, task string) error {
	have, err := j.Task(ctx)
	if err != nil {
		return err
	}
	if task != "" && have != "" && have != task {
		return &TaskError{Path: j.path, Journal: have, Want: task}
	}
	return nil
}

// BindTask records task as the journal's on first use, and refuses (a
// *TaskError) a journal that already belongs to another. An empty task
// binds nothing. In one write transaction, so two processes binding at
// once agree.
func (j *Journal) BindTask(ctx context.Context, task string) error {
	if task == "" {
		return nil
	}
	return j.inTx(ctx, func(tx *sql.Tx) error {
		have, err := readTask(ctx, tx)
		if err != nil {
			return err
		}
		switch {
		case have == task:
			return nil
		case have != "":
			return &TaskError{Path: j.path, Journal: have, Want: task}
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO meta (name, value) VALUES (?, ?)`, metaTask, task); err != nil {
			return fmt.Errorf("journal: record task: %w", err)
		}
		return nil
	})
}

// HasVersions reports whether the record holds any saved version.
func (j *Journal) HasVersions(ctx context.Context) (bool, error) {
	var found bool
	if err := j.db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM versions)`).Scan(&found); err != nil {
		return false, fmt.Errorf("journal: read versions: %w", err)
	}
	return found, nil
}
