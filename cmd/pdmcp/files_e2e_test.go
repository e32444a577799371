package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/reference"
	"github.com/pdmcp/pdmcp/internal/mcptest"
)

// newFileStack is a stack whose grant gives the file tools on a fresh
// folder, made by the launcher as an operator would.
func newFileStack(t testing.TB) (*stack, string) {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s := newStack(t, "--all-approved", "--file-root", root, "--ttl", "15m")
	return s, root
}

// TestFileToolsOverStdio: through pdmcp serve over stdio, a file is
// encrypted, the original deleted, the envelope decrypted and the sha256
// equal; the largest file round-trips and one byte more is refused with
// nothing sent.
func TestFileToolsOverStdio(t *testing.T) {
	s, root := newFileStack(t)
	content := []byte("a contract draft, synthetic\n")
	if err := os.WriteFile(filepath.Join(root, "draft.txt"), content, 0o644); err != nil {
		t.Fatal(err)
	}
	max := bytes.Repeat([]byte{0xA5, 0x5A, 0x00, 0xFF}, api.MaxDataBytes/4+1)[:api.MaxDataBytes]
	if err := os.WriteFile(filepath.Join(root, "max.bin"), max, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "over.bin"), append(slices.Clone(max), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	// host-config starts the host in the file root (Codex's cwd), so a
	// relative path the model gives means the same to the host and here.
	tomlText := run(t, "host-config", "--format", "codex-toml", "--config", s.config, "--manifest", s.manifest,
		"--grant", s.grant, "--audit", s.audit)
	var codex map[string]map[string]map[string]any
	if _, err := toml.Decode(tomlText, &codex); err != nil {
		t.Fatalf("codex TOML: %v\n%s", err, tomlText)
	}
	if cwd := codex["mcp_servers"]["protected-documents"]["cwd"]; cwd != root {
		t.Fatalf("codex cwd %v, want the file root %s", cwd, root)
	}

	cs := s.connect(t)
	names := mcptest.ToolNames(t, cs)
	if !slices.Equal(names, []string{"decrypt_file", "encrypt_file"}) {
		t.Fatalf("tools/list: %v", names)
	}

	for _, name := range []string{"draft.txt", "max.bin"} {
		want, _ := os.ReadFile(filepath.Join(root, name))
		res, isErr := call(t, cs, "encrypt_file", map[string]any{"path": name})
		if isErr || res["sha256"] != mcptest.SHA256(want) || res["envelope"] != name+".pisoft" {
			t.Fatalf("encrypt_file %s: %v", name, res)
		}
		if err := os.Remove(filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
		res, isErr = call(t, cs, "decrypt_file", map[string]any{"path": filepath.Join(root, name+".pisoft")})
		if isErr || res["sha256"] != mcptest.SHA256(want) {
			t.Fatalf("decrypt_file %s: %v", name, res)
		}
		got, err := os.ReadFile(filepath.Join(root, res["path"].(string)))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("decrypted %s differs (%v)", name, err)
		}
	}
	s.quiet(t, "a file one byte over the limit", func() {
		m, e := call(t, cs, "encrypt_file", map[string]any{"path": "over.bin"})
		wantRefused(t, m, e, "adapter", "FILE_TOO_LARGE")
		m, e = call(t, cs, "encrypt_file", map[string]any{"path": "../" + filepath.Base(filepath.Dir(s.manifest)) + "/manifest.json"})
		wantRefused(t, m, e, "adapter", "OUTSIDE_ROOT")
	})
}

// TestEncryptFileSurvivesKillAtEachStep kills the server (SIGKILL, through
// the PDMCP_TEST_KILL_AT hook) at each step of encrypt_file, then retries
// on a fresh server. Killed before the send was claimed, nothing was sent
// and the retry encrypts. Once the minted key is in the journal, the retry
// returns that first result (envelope written if missing) with no second
// encrypt. In between (claimed as sent, no answer kept) the retry sends
// nothing and says a key may have been left unused. Never more than one
// key is made.
func TestEncryptFileSurvivesKillAtEachStep(t *testing.T) {
	for _, tc := range []struct {
		point string
		// answered: the retry returns a result (replayed: the first one);
		// otherwise the encrypt was claimed as sent and no answer kept.
		answered, replayed bool
		encrypts           int
	}{
		{"encrypt_file:reserved", true, false, 1}, // nothing was sent: the retry sends it
		{"encrypt_file:claimed", false, false, 0},
		{"encrypt_file:encrypted", false, false, 1},
		// The envelope and the ciphertext are written, the key not yet
		// recorded: no answer was kept, and the staged envelope is removed.
		{"encrypt_file:staged", false, false, 1},
		{"encrypt_file:minted", true, true, 1},
		{"encrypt_file:envelope-written", true, true, 1},
	} {
		t.Run(tc.point, func(t *testing.T) {
			s, root := newFileStack(t)
			content := []byte("kill me at " + tc.point)
			if err := os.WriteFile(filepath.Join(root, "k.txt"), content, 0o644); err != nil {
				t.Fatal(err)
			}
			keys := s.keyCount(t)
			encrypts := s.env.Gateway.Count(api.RouteEncrypt)
			s.callDies(t, tc.point, "encrypt_file", map[string]any{"path": "k.txt"})
			cs := s.connect(t)
			res, isErr := call(t, cs, "encrypt_file", map[string]any{"path": "k.txt"})
			if tc.answered {
				if isErr || res["replayed"] != tc.replayed || res["sha256"] != mcptest.SHA256(content) {
					t.Fatalf("retry after the kill: %v", res)
				}
				if again, isErr := call(t, cs, "encrypt_file", map[string]any{"path": "k.txt"}); isErr || again["replayed"] != true {
					t.Fatalf("second retry: %v", again)
				}
				if err := os.Remove(filepath.Join(root, "k.txt")); err != nil {
					t.Fatal(err)
				}
				dec, isErr := call(t, cs, "decrypt_file", map[string]any{"path": "k.txt.pisoft"})
				got, _ := os.ReadFile(filepath.Join(root, "k.decrypted.txt"))
				if isErr || !bytes.Equal(got, content) {
					t.Fatalf("decrypt after the kill: %v", dec)
				}
			} else {
				wantRefused(t, res, isErr, "adapter", "ENCRYPT_ANSWER_LOST")
				if _, err := os.Stat(filepath.Join(root, "k.txt.pisoft")); !os.IsNotExist(err) {
					t.Fatal("an envelope exists though no answer was kept")
				}
			}
			if n := s.env.Gateway.Count(api.RouteEncrypt) - encrypts; n != tc.encrypts {
				t.Errorf("Gateway encrypts: %d, want %d", n, tc.encrypts)
			}
			if n := s.keyCount(t) - keys; n != tc.encrypts {
				t.Errorf("keys minted: %d, want %d", n, tc.encrypts)
			}
			leftovers, _ := filepath.Glob(filepath.Join(root, ".*"))
			if len(leftovers) != 0 {
				t.Errorf("temporary files left: %v", leftovers)
			}
		})
	}
}

// TestEncryptFileTwoProcessesAtOnce: two pdmcp serve processes on one
// journal encrypt the same file at the same moment, round after round
// with new content, while the Gateway holds every answer long enough that
// the two calls always overlap. Each round makes one key and one envelope
// that decrypts to the content; both calls succeed, the one that waited
// for the other's send with that send's result (replayed), never
// ENCRYPT_ANSWER_LOST; no temporary file (the staged envelope included) is
// left.
func TestEncryptFileTwoProcessesAtOnce(t *testing.T) {
	s, root := newFileStack(t)
	a, b := s.connect(t), s.connect(t)
	for round := range 6 {
		content := []byte(fmt.Sprintf("two processes, round %d", round))
		if err := os.WriteFile(filepath.Join(root, "k.txt"), content, 0o644); err != nil {
			t.Fatal(err)
		}
		keys, encrypts := s.keyCount(t), s.env.Gateway.Count(api.RouteEncrypt)
		results := make([]*mcp.CallToolResult, 2)
		errs := make([]error, 2)
		// Every Gateway answer waits: the first call's encrypt is in flight
		// when the second reaches the journal.
		s.env.Gateway.SetFaults(reference.Faults{Delay: 150 * time.Millisecond})
		var wg sync.WaitGroup
		for i, cs := range []*mcp.ClientSession{a, b} {
			wg.Go(func() {
				results[i], errs[i] = cs.CallTool(context.Background(), mcpCall("encrypt_file", map[string]any{"path": "k.txt"}))
			})
		}
		wg.Wait()
		s.env.Gateway.SetFaults(reference.Faults{})
		replayed := 0
		for i := range results {
			if errs[i] != nil {
				t.Fatalf("round %d, process %d: %v", round, i, errs[i])
			}
			m := mcptest.Result(t, results[i])
			if results[i].IsError || m["sha256"] != mcptest.SHA256(content) {
				t.Fatalf("round %d, process %d: %v", round, i, m)
			}
			if m["replayed"] == true {
				replayed++
			}
		}
		if replayed != 1 {
			t.Fatalf("round %d: %d of the two calls replayed, want 1", round, replayed)
		}
		for _, cs := range []*mcp.ClientSession{a, b} {
			if res, isErr := call(t, cs, "encrypt_file", map[string]any{"path": "k.txt"}); isErr || res["replayed"] != true {
				t.Fatalf("round %d: retry after both: %v", round, res)
			}
		}
		if n := s.keyCount(t) - keys; n != 1 {
			t.Fatalf("round %d: %d keys minted, want 1", round, n)
		}
		if n := s.env.Gateway.Count(api.RouteEncrypt) - encrypts; n != 1 {
			t.Fatalf("round %d: %d Gateway encrypts, want 1", round, n)
		}
		if leftovers, _ := filepath.Glob(filepath.Join(root, ".*")); len(leftovers) != 0 {
			t.Fatalf("round %d: temporary files left: %v", round, leftovers)
		}
		if err := os.Remove(filepath.Join(root, "k.txt")); err != nil {
			t.Fatal(err)
		}
		if dec, isErr := call(t, b, "decrypt_file", map[string]any{"path": "k.txt.pisoft"}); isErr || dec["sha256"] != mcptest.SHA256(content) {
			t.Fatalf("round %d: decrypt_file: %v", round, dec)
		}
		for _, name := range []string{"k.txt.pisoft", "k.decrypted.txt"} {
			if err := os.Remove(filepath.Join(root, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
}
