//go:build unix

package serve_test

import (
	"bytes"
	"context"
	"maps"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/reference/reftest"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/mcptest"
)

// Over HTTP each user's encrypt_file mints that user's own key and keeps
// its own journal row, even for the same content at the same path; a
// user opens another's envelope only when the key server's access list
// says so, and the server writes nothing when it does not.
func TestHTTPFileToolsKeepUsersApart(t *testing.T) {
	root := mcptest.FileRoot(t)
	hs := newHTTPStack(t, 8, fileTools(root))
	content := []byte("the same content, encrypted by two users\n")
	shared := filepath.Join(root, "shared.txt")
	if err := os.WriteFile(shared, content, 0o644); err != nil {
		t.Fatal(err)
	}
	alice := hs.connect(t, hs.token(t, "alice", "pw-a"))
	bob := hs.connect(t, hs.token(t, "bob", "pw-b"))

	a, isErr := mcptest.Call(t, alice, "encrypt_file", map[string]any{"path": "shared.txt"})
	if isErr || a["replayed"] != false {
		t.Fatalf("alice's encrypt_file: %v", a)
	}
	aliceEnv := filepath.Join(root, "alice.pisoft")
	if err := os.Rename(shared+".pisoft", aliceEnv); err != nil {
		t.Fatal(err)
	}
	// bob, same content, same path: not alice's row, so his own key.
	encrypts := hs.env.Gateway.Count(api.RouteEncrypt)
	b, isErr := mcptest.Call(t, bob, "encrypt_file", map[string]any{"path": "shared.txt"})
	if isErr || b["replayed"] != false {
		t.Fatalf("bob's encrypt_file: %v", b)
	}
	if n := hs.env.Gateway.Count(api.RouteEncrypt) - encrypts; n != 1 {
		t.Fatalf("bob's encrypt sent %d encrypts, want 1", n)
	}
	aliceTTag := mcptest.EnvelopeTTag(t, aliceEnv)
	bobTTag := mcptest.EnvelopeTTag(t, shared+".pisoft")
	if aliceTTag == bobTTag {
		t.Fatal("two users got the same key")
	}
	// alice again: her first result, whoever encrypted since.
	if err := os.Rename(shared+".pisoft", filepath.Join(root, "bob.pisoft")); err != nil {
		t.Fatal(err)
	}
	if again, isErr := mcptest.Call(t, alice, "encrypt_file", map[string]any{"path": "shared.txt"}); isErr ||
		again["replayed"] != true || mcptest.EnvelopeTTag(t, shared+".pisoft") != aliceTTag {
		t.Fatalf("alice's retry: %v", again)
	}

	// bob opens alice's envelope: the key was minted here, so the server
	// asks, and the key server refuses; nothing is written.
	res, isErr := mcptest.Call(t, bob, "decrypt_file", map[string]any{"path": "alice.pisoft"})
	if !isErr || res["layer"] != "keyserver" {
		t.Fatalf("bob's decrypt of alice's envelope: %v", res)
	}
	if _, err := os.Stat(filepath.Join(root, "shared.decrypted.txt")); !os.IsNotExist(err) {
		t.Fatal("a refused decrypt wrote a file")
	}
	// bob's own envelope opens for him.
	if res, isErr := mcptest.Call(t, bob, "decrypt_file", map[string]any{"path": "bob.pisoft"}); isErr || res["path"] != "shared.decrypted.txt" {
		t.Fatalf("bob's decrypt of his envelope: %v", res)
	}

	// alice gives bob read on her key at the key server: now it opens.
	ctx := context.Background()
	c := hs.env.ServiceClient(t, hs.svc)
	bobP, err := hs.env.Client(t).Admin(reftest.AdminUser, reftest.AdminPassword).GetPrincipal(ctx, hs.svc.Prefix+"t.bob")
	if err != nil {
		t.Fatal(err)
	}
	as, err := c.Mint(ctx, gateway.MintRequest{ActingAs: hs.svc.Prefix + "t.alice", Objects: []string{aliceTTag}, TTL: 60e9})
	if err != nil {
		t.Fatal(err)
	}
	defer as.Revoke(ctx)
	if err := as.ACLGrant(ctx, api.ACLGrantRequest{TTag: aliceTTag, SystemID: bobP.SystemID, PrincipalID: bobP.PrincipalID,
		Rights: []string{api.RightRead}}); err != nil {
		t.Fatal(err)
	}
	res, isErr = mcptest.Call(t, bob, "decrypt_file", map[string]any{"path": "alice.pisoft"})
	if isErr || res["sha256"] != mcptest.SHA256(content) {
		t.Fatalf("bob's decrypt once alice allowed it: %v", res)
	}
	got, err := os.ReadFile(filepath.Join(root, res["path"].(string)))
	if err != nil || !bytes.Equal(got, content) {
		t.Fatalf("bob's decrypted copy differs (%v)", err)
	}
}

// Over HTTP too: the largest file round-trips, one byte more is refused
// with nothing sent. The Gateway timeout is long here: 16 MiB through a
// -race build on a loaded machine can take longer than the default 30 s,
// and this test is about the size limit, not the timeout.
func TestHTTPFileRoundTripAtTheLimit(t *testing.T) {
	root := mcptest.FileRoot(t)
	hs := newHTTPStack(t, 8, fileTools(root), func(_ *testing.T, h *httpStack, _ string, _ *grant.LaunchOptions) {
		h.gatewayTimeout = 5 * time.Minute
	})
	max := bytes.Repeat([]byte{1, 2, 3, 250}, api.MaxDataBytes/4+1)[:api.MaxDataBytes]
	if err := os.WriteFile(filepath.Join(root, "max.bin"), max, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "over.bin"), append(bytes.Clone(max), 0), 0o644); err != nil {
		t.Fatal(err)
	}
	alice := hs.connect(t, hs.token(t, "alice", "pw-a"))
	before := hs.env.Gateway.Counts()
	res, isErr := mcptest.Call(t, alice, "encrypt_file", map[string]any{"path": "over.bin"})
	if !isErr || res["code"] != "FILE_TOO_LARGE" || res["layer"] != "adapter" {
		t.Fatalf("16,777,216 bytes over HTTP: %v", res)
	}
	if after := hs.env.Gateway.Counts(); !maps.Equal(before, after) {
		t.Fatalf("the refusal reached the Gateway: %v -> %v", before, after)
	}
	if res, isErr = mcptest.Call(t, alice, "encrypt_file", map[string]any{"path": "max.bin"}); isErr {
		t.Fatalf("16,777,215 bytes over HTTP: %v", res)
	}
	if err := os.Remove(filepath.Join(root, "max.bin")); err != nil {
		t.Fatal(err)
	}
	res, isErr = mcptest.Call(t, alice, "decrypt_file", map[string]any{"path": "max.bin.pisoft"})
	if isErr || res["sha256"] != mcptest.SHA256(max) {
		t.Fatalf("decrypt over HTTP: %v", res)
	}
	got, err := os.ReadFile(filepath.Join(root, res["path"].(string)))
	if err != nil || mcptest.SHA256(got) != mcptest.SHA256(max) {
		t.Fatalf("decrypted copy differs (%v)", err)
	}
}

// fileTools gives the HTTP stack's grant the file tools on root.
func fileTools(root string) stackOption {
	return func(_ *testing.T, _ *httpStack, _ string, lo *grant.LaunchOptions) {
		lo.FileRoot = root
		lo.Tools = grant.FileTools()
	}
}
