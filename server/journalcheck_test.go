package server_test

import (
	"io"
	"os"
	"strings"
	"testing"

	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/server/journal"
	"github.com/pdmcp/pdmcp/server/refusal"
)

// TestSavesRefusedOnceTheJournalIsGone: the journal removed (or replaced
// by a restore) while the server runs. Before, SQLite went on writing to
// the file it held open: the save got a receipt (version 2), and after a
// restart the destination was back at version 1. Now the server looks at
// the journal's identity before each save, as it does at the manifest's,
// and refuses RECORD_UNAVAILABLE with nothing sent, logging it once.
func TestSavesRefusedOnceTheJournalIsGone(t *testing.T) {
	tests := []struct {
		name   string
		change func(t *testing.T, path string)
	}{
		{"removed", func(t *testing.T, path string) {
			for _, p := range []string{path, path + "-wal", path + "-shm"} {
				if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
					t.Fatal(err)
				}
			}
		}},
		{"replaced by an older copy", func(t *testing.T, path string) {
			copyFile(t, path, path+".restore")
			if err := os.Rename(path+".restore", path); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, basicDocs, nil)
			save := func(key string) (map[string]any, bool) {
				return f.call(t, grant.ToolSaveProtectedResult,
					map[string]any{"destinationId": "summary", "text": "a result " + key, "idempotencyKey": key})
			}
			if res, isErr := save("k1"); isErr || res["version"] != float64(1) {
				t.Fatalf("the first save: %v", res)
			}
			tc.change(t, journal.DefaultPath(f.manifest))
			encrypts := f.env.Gateway.Count(api.RouteEncrypt)
			for _, key := range []string{"k2", "k3"} {
				res, isErr := save(key)
				if !isErr || res["code"] != string(refusal.RecordUnavailable) {
					t.Fatalf("save %s after the journal was %s: %v, want RECORD_UNAVAILABLE", key, tc.name, res)
				}
			}
			if n := f.env.Gateway.Count(api.RouteEncrypt) - encrypts; n != 0 {
				t.Errorf("%d encrypts sent after the journal was %s", n, tc.name)
			}
			if n := strings.Count(f.logs.String(), "the journal was removed or replaced while serving"); n != 1 {
				t.Errorf("the log names the lost journal %d times, want once:\n%s", n, f.logs.String())
			}
		})
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
