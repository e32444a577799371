package journal

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// ErrDamaged: the journal's file is not a readable SQLite database, or
// SQLite found it damaged (overwritten bytes, a cut-off file).
var ErrDamaged = errors.New("the journal file is damaged")

// IsDamaged reports whether err is SQLite's answer for a damaged file
// (SQLITE_CORRUPT, SQLITE_NOTADB) or matches ErrDamaged. A file another
// program holds, or one that is not private, is not damaged.
func IsDamaged(err error) bool {
	if errors.Is(err, ErrDamaged) {
		return true
	}
	var coded interface{ Code() int }
	if !errors.As(err, &coded) {
		return false
	}
	switch coded.Code() & 0xff {
	case 11, 26: // SQLITE_CORRUPT, SQLITE_NOTADB
		return true
	}
	return false
}

// QuickCheck runs SQLite's quick_check over the whole file: an error
// matching ErrDamaged names what it found. Opening a journal reads only its
// first pages; a file damaged further in opens, and fails only where a
// query reaches the damage.
func (j *Journal) QuickCheck(ctx context.Context) error {
	rows, err := j.db.QueryContext(ctx, "PRAGMA quick_check")
	if err != nil {
		if IsDamaged(err) {
			return fmt.Errorf("journal: %s: %w: %w", j.path, ErrDamaged, err)
		}
		return fmt.Errorf("journal: check %s: %w", j.path, err)
	}
	defer rows.Close()
	var problems []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return fmt.Errorf("journal: check %s: %w", j.path, err)
		}
		if line != "ok" {
			problems = append(problems, line)
		}
	}
	if err := rows.Err(); err != nil {
		if IsDamaged(err) {
			return fmt.Errorf("journal: %s: %w: %w", j.path, ErrDamaged, err)
		}
		return fmt.Errorf("journal: check %s: %w", j.path, err)
	}
	if len(problems) > 0 {
		return fmt.Errorf("journal: %s: %w: %s", j.path, ErrDamaged, strings.Join(problems[:min(len(problems), 3)], "; "))
	}
	return nil
}
