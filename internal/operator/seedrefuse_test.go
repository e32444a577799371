package operator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/server/journal"
	"github.com/pdmcp/pdmcp/server/sidecar"
)

// TestSeedRefusesSavedVersions: a folder whose journal holds versions, or
// whose sidecars do (the journal gone), is refused before anything is
// made; a folder with an empty journal, or none, is not.
func TestSeedRefusesSavedVersions(t *testing.T) {
	ctx := context.Background()
	ct := []byte("ciphertext")
	sum := sha256.Sum256(ct)
	v := sidecar.Version{Record: journal.Version{Destination: "d", Version: 1, Path: "results/d.v1.bin",
		IV: "AAAAAAAAAAAAAAAAAAAAAA==", TTag: "t-d", CiphertextSHA256: hex.EncodeToString(sum[:]),
		SHA256: hex.EncodeToString(sum[:]), Size: 4, SavedAt: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}}
	tests := []struct {
		name    string
		prepare func(t *testing.T, dir string)
		refused bool
	}{
		{"an empty folder", func(*testing.T, string) {}, false},
		{"a folder that does not exist yet", func(t *testing.T, dir string) {
			if err := os.Remove(dir); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"an empty journal", func(t *testing.T, dir string) {
			j, err := journal.Open(ctx, journal.DefaultPath(filepath.Join(dir, "manifest.json")))
			if err != nil {
				t.Fatal(err)
			}
			j.Close()
		}, false},
		{"a journal with versions", func(t *testing.T, dir string) {
			j, err := journal.Open(ctx, journal.DefaultPath(filepath.Join(dir, "manifest.json")))
			if err != nil {
				t.Fatal(err)
			}
			defer j.Close()
			if _, err := j.RestoreVersions(ctx, []journal.Version{v.Record}); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"sidecars alone", func(t *testing.T, dir string) {
			root, err := os.OpenRoot(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer root.Close()
			if err := root.MkdirAll("results", 0o700); err != nil {
				t.Fatal(err)
			}
			if err := sidecar.Write(root, v, false); err != nil {
				t.Fatal(err)
			}
			if err := root.WriteFile("results/d.v1.bin", ct, 0o600); err != nil {
				t.Fatal(err)
			}
		}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "task-data")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			tc.prepare(t, dir)
			// An empty service config: a refusal comes before the Gateway
			// client is made, and a folder that passes fails there.
			_, err := Seed(ctx, SeedOptions{Config: &gateway.ServiceConfig{}, OutDir: dir})
			if got := errors.Is(err, ErrSavedVersions); got != tc.refused {
				t.Fatalf("refused %v, want %v: %v", got, tc.refused, err)
			}
			if _, err := os.Stat(filepath.Join(dir, "seed-record.json")); tc.refused && !os.IsNotExist(err) {
				t.Fatalf("a refused seed wrote its record: %v", err)
			}
		})
	}
}
