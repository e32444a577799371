package journal

import (
	"context"
	"path/filepath"
	"testing"
)

// TestOpenPragmas: the journal is WAL with synchronous=FULL, Reserve's
// connection NORMAL; only the benchmark seam turns fsync off.
func TestOpenPragmas(t *testing.T) {
	for _, tc := range []struct {
		name              string
		open              func(context.Context, string) (*Journal, error)
		sync, reserveSync int
	}{{"Open", Open, 2, 1}, {"OpenNonDurableForBenchmarks", OpenNonDurableForBenchmarks, 0, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			j, err := tc.open(context.Background(), filepath.Join(t.TempDir(), "j.sqlite"))
			if err != nil {
				t.Fatal(err)
			}
			defer j.Close()
			var mode string
			var sync, fk int
			if err := j.db.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil {
				t.Fatal(err)
			}
			if err := j.db.QueryRow("PRAGMA synchronous").Scan(&sync); err != nil {
				t.Fatal(err)
			}
			if err := j.db.QueryRow("PRAGMA foreign_keys").Scan(&fk); err != nil {
				t.Fatal(err)
			}
			if mode != "wal" || sync != tc.sync || fk != 1 {
				t.Errorf("journal_mode=%s synchronous=%d foreign_keys=%d, want wal, %d, 1", mode, sync, fk, tc.sync)
			}
			// Reserve's connection: NORMAL, made durable by the save's next
			// FULL commit.
			if err := j.reserveDB.QueryRow("PRAGMA synchronous").Scan(&sync); err != nil {
				t.Fatal(err)
			}
			if err := j.reserveDB.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil {
				t.Fatal(err)
			}
			if mode != "wal" || sync != tc.reserveSync {
				t.Errorf("reserve connection: journal_mode=%s synchronous=%d, want wal, %d", mode, sync, tc.reserveSync)
			}
		})
	}
}
