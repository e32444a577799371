package main

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pdmcp/pdmcp/server/journal"
)

// TestLostJournalIsRefused is issue 32's "Why" 1 through the binary: the
// journal deleted (or replaced by an empty one) after saves, and the
// server restarted. Before, serve re-created it in silence and served the
// manifest's versions as if nothing had been saved; versions listed
// nothing. Now serve and every command that reads the record refuse,
// naming `pdmcp check --repair`, and none creates a journal.
func TestLostJournalIsRefused(t *testing.T) {
	s := newStack(t)
	cs := s.connect(t)
	for _, key := range []string{"k-1", "k-2"} {
		if m, isErr := call(t, cs, "save_protected_result", saveArgs("evaluation-summary", "text "+key, key)); isErr {
			t.Fatalf("save: %v", m)
		}
	}
	_ = cs.Close()
	jpath := journal.DefaultPath(s.manifest)
	commands := map[string][]string{
		"serve":           {"serve", "--config", s.config, "--manifest", s.manifest, "--grant", s.grant, "--audit", s.audit},
		"versions":        {"versions", "--manifest", s.manifest},
		"export-manifest": {"export-manifest", "--manifest", s.manifest, "--out", filepath.Join(s.dir, "merged.json")},
		"seed --cleanup":  {"seed", "--config", s.config, "--cleanup", "--seed-record", s.record()},
	}
	tests := []struct {
		name string
		lose func(t *testing.T)
	}{
		{"deleted", func(t *testing.T) {
			for _, p := range []string{jpath, jpath + "-wal", jpath + "-shm"} {
				if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
					t.Fatal(err)
				}
			}
		}},
		{"replaced by an empty one", func(t *testing.T) {
			j, err := journal.Open(context.Background(), jpath)
			if err != nil {
				t.Fatal(err)
			}
			j.Close()
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.lose(t)
			for name, args := range commands {
				// serve's standard input is empty: on a good journal it
				// would serve until that ends, at once.
				cmd := pdmcpCmd(t, args...)
				var stdout, stderr strings.Builder
				cmd.Stdout, cmd.Stderr = &stdout, &stderr
				err := cmd.Run()
				if err == nil {
					t.Errorf("%s ran with the journal %s:\n%s", name, tc.name, stdout.String())
					continue
				}
				// The operator commands' refusal of a lost record: exit 3.
				if name != "serve" && cmd.ProcessState.ExitCode() != exitRefused {
					t.Errorf("%s exited %d, want %d", name, cmd.ProcessState.ExitCode(), exitRefused)
				}
				if !strings.Contains(stderr.String(), "pdmcp check --repair") || !strings.Contains(stderr.String(), "results/evaluation-summary.v1.bin") {
					t.Errorf("%s's refusal does not name pdmcp check --repair and the saved files:\n%s", name, stderr.String())
				}
				if strings.Contains(stdout.String(), "SEED CLEANUP: OK") {
					t.Errorf("%s removed the keys of versions it could not account for:\n%s", name, stdout.String())
				}
			}
			if tc.name == "deleted" {
				if _, err := os.Stat(jpath); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("a journal was created where the lost one was: %v", err)
				}
			}
		})
	}
}
