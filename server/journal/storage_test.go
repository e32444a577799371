package journal

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestStorageUnavailable: the storage's failures (a full database, a lock
// held past the busy timeout, a full disk) are told apart from a
// request's, with real SQLite errors where SQLite can make them.
func TestStorageUnavailable(t *testing.T) {
	ctx := context.Background()
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "small.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	// A database that may not grow: SQLite's own "database or disk is
	// full", as a full disk gives it.
	for _, q := range []string{"CREATE TABLE t (v BLOB)", "PRAGMA max_page_count = 3"} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	var full error
	for i := 0; i < 100 && full == nil; i++ {
		_, full = db.ExecContext(ctx, "INSERT INTO t VALUES (?)", make([]byte, 4096))
	}
	if full == nil || !strings.Contains(full.Error(), "full") {
		t.Fatalf("no full-database error from SQLite: %v", full)
	}
	other, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "other.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	_, constraint := other.ExecContext(ctx, "CREATE TABLE u (k TEXT PRIMARY KEY); INSERT INTO u VALUES ('a'); INSERT INTO u VALUES ('a')")
	if constraint == nil || !strings.Contains(constraint.Error(), "UNIQUE") {
		t.Fatalf("no constraint error from SQLite: %v", constraint)
	}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"a full database", fmt.Errorf("journal: place: %w", full), true},
		{"a disk full on a file write", &fs.PathError{Op: "write", Path: "x", Err: syscall.ENOSPC}, true},
		{"over quota", fmt.Errorf("sync: %w", syscall.EDQUOT), true},
		{"a constraint", constraint, false},
		{"an idempotency conflict", ErrIdempotencyConflict, false},
		{"a missing file", fs.ErrNotExist, false},
		{"nothing", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := StorageUnavailable(tt.err); got != tt.want {
				t.Errorf("StorageUnavailable(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}
