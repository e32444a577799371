//go:build unix

package server_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/filelock"
	"github.com/pdmcp/pdmcp/internal/mcptest"
	"github.com/pdmcp/pdmcp/server"
	"github.com/pdmcp/pdmcp/server/refusal"
)

// TestStoppedEncryptLockHolderIsBounded: another server stopped while it
// encrypts a file (a second handle holding that file's encrypt lock).
// Before, encrypt_file of the same file waited without end, holding its
// in-process lock. Now it is refused FILE_BUSY within LockWait with
// nothing sent, and encrypts once the holder is gone.
func TestStoppedEncryptLockHolderIsBounded(t *testing.T) {
	ctx := context.Background()
	root := mcptest.FileRoot(t)
	content := []byte("figures held by a stopped server\n")
	if err := os.WriteFile(filepath.Join(root, "q.txt"), content, 0o644); err != nil {
		t.Fatal(err)
	}
	var cfg server.Config
	f := newFixture(t, basicDocs, withFileRoot(root, false), func(c *server.Config) {
		c.LockWait = 2 * time.Second
		cfg = *c
	})
	lockFile, err := server.EncryptLockFile(cfg, "q.txt", content)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(lockFile), 0o700); err != nil {
		t.Fatal(err)
	}
	held, err := filelock.Acquire(ctx, lockFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { held.Release() })
	encrypts := f.env.Gateway.Count(api.RouteEncrypt)
	callCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	res, err := f.cs.CallTool(callCtx, &mcp.CallToolParams{Name: grant.ToolEncryptFile, Arguments: map[string]any{"path": "q.txt"}})
	if err != nil {
		t.Fatalf("encrypt_file under a held lock: %v (wedged?)", err)
	}
	if m := mcptest.Result(t, res); !res.IsError || m["code"] != string(refusal.FileBusy) {
		t.Fatalf("encrypt_file under a held lock: %v, want FILE_BUSY", m)
	}
	if n := f.env.Gateway.Count(api.RouteEncrypt) - encrypts; n != 0 {
		t.Fatalf("%d encrypts sent under a held lock", n)
	}
	if err := held.Release(); err != nil {
		t.Fatal(err)
	}
	if m, isErr := f.call(t, grant.ToolEncryptFile, map[string]any{"path": "q.txt"}); isErr || m["replayed"] != false {
		t.Fatalf("encrypt_file once the holder is gone: %v", m)
	}
}
