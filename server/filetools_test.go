//go:build unix

package server_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/reference"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/crashpoint"
	"github.com/pdmcp/pdmcp/internal/filestest"
	"github.com/pdmcp/pdmcp/internal/mcptest"
	"github.com/pdmcp/pdmcp/server"
	"github.com/pdmcp/pdmcp/server/journal"
)

// withFileRoot gives the fixture's grant the two file tools on root.
func withFileRoot(root string, docTools bool) func(*grant.Grant, *grant.Manifest) {
	return func(g *grant.Grant, _ *grant.Manifest) {
		g.FileRoot = root
		g.AllowedTools = grant.FileTools()
		if docTools {
			g.AllowedTools = append(grant.DocumentTools(), grant.FileTools()...)
		}
	}
}

func (f *fixture) totalRequests() int {
	n := 0
	for _, c := range f.env.Gateway.Counts() {
		n += c
	}
	return n
}

// auditLines reads the audit file's tool-call lines for tool.
func (f *fixture) auditLines(t *testing.T, tool string) []map[string]any {
	t.Helper()
	fh, err := os.Open(f.auditLog)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	var out []map[string]any
	sc := bufio.NewScanner(fh)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["tool"] == tool {
			out = append(out, m)
		}
	}
	return out
}

func TestEncryptDecryptFileRoundTrip(t *testing.T) {
	root := mcptest.FileRoot(t)
	content := []byte("quarterly figures, synthetic\n")
	if err := os.MkdirAll(filepath.Join(root, "reports"), 0o755); err != nil {
		t.Fatal(err)
	}
	orig := filepath.Join(root, "reports", "q3.csv")
	if err := os.WriteFile(orig, content, 0o644); err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, basicDocs, withFileRoot(root, false))
	gw := f.env.Gateway

	enc0 := gw.Count(api.RouteEncrypt)
	res, isErr := f.call(t, grant.ToolEncryptFile, map[string]any{"path": "reports/q3.csv"})
	if isErr || res["envelope"] != "reports/q3.csv.pisoft" || res["path"] != "reports/q3.csv" ||
		res["bytes"] != float64(len(content)) || res["sha256"] != mcptest.SHA256(content) || res["replayed"] != false {
		t.Fatalf("encrypt_file: %v", res)
	}
	if n := gw.Count(api.RouteEncrypt) - enc0; n != 1 {
		t.Fatalf("Gateway encrypts: %d, want 1", n)
	}
	envPath := orig + ".pisoft"
	envBytes, err := os.ReadFile(envPath)
	if err != nil {
		t.Fatal(err)
	}
	var env map[string]any
	if err := json.Unmarshal(envBytes, &env); err != nil {
		t.Fatalf("envelope is not JSON: %v", err)
	}
	pt, _ := env["plaintext"].(map[string]any)
	if env["format"] != "pisoft-file-envelope" || env["formatVersion"] != float64(1) || env["ttag"] == "" ||
		env["iv"] == "" || env["ciphertext"] == "" || env["createdAt"] == "" || pt["name"] != "q3.csv" ||
		pt["bytes"] != float64(len(content)) || pt["sha256"] != mcptest.SHA256(content) || len(env) != 7 || len(pt) != 3 {
		t.Fatalf("envelope fields: %s", envBytes)
	}
	if bytes.Contains(envBytes, content) {
		t.Fatal("the envelope holds the plaintext")
	}

	// Again: the first result, no second key.
	again, isErr := f.call(t, grant.ToolEncryptFile, map[string]any{"path": orig})
	if isErr || again["replayed"] != true || again["envelope"] != res["envelope"] {
		t.Fatalf("encrypt_file again: %v", again)
	}
	// The envelope deleted: written again from the journal, byte for byte.
	if err := os.Remove(envPath); err != nil {
		t.Fatal(err)
	}
	again, isErr = f.call(t, grant.ToolEncryptFile, map[string]any{"path": "./reports/q3.csv"})
	if isErr || again["replayed"] != true || again["rewritten"] != true {
		t.Fatalf("encrypt_file after the envelope was deleted: %v", again)
	}
	if rewritten, _ := os.ReadFile(envPath); !bytes.Equal(rewritten, envBytes) {
		t.Fatalf("rewritten envelope differs:\n%s\n%s", rewritten, envBytes)
	}
	if n := gw.Count(api.RouteEncrypt) - enc0; n != 1 {
		t.Fatalf("Gateway encrypts after two retries: %d, want 1", n)
	}

	// The original deleted, the envelope decrypted beside it.
	if err := os.Remove(orig); err != nil {
		t.Fatal(err)
	}
	dec, isErr := f.call(t, grant.ToolDecryptFile, map[string]any{"path": "reports/q3.csv.pisoft"})
	if isErr || dec["path"] != "reports/q3.decrypted.csv" || dec["sha256"] != mcptest.SHA256(content) || dec["bytes"] != float64(len(content)) {
		t.Fatalf("decrypt_file: %v", dec)
	}
	if strings.Contains(mustJSON(t, dec), string(content[:10])) {
		t.Fatal("decrypt_file returned content")
	}
	got, err := os.ReadFile(filepath.Join(root, "reports", "q3.decrypted.csv"))
	if err != nil || !bytes.Equal(got, content) {
		t.Fatalf("decrypted file: %q, %v", got, err)
	}
	if fi, _ := os.Stat(filepath.Join(root, "reports", "q3.decrypted.csv")); fi.Mode().Perm() != 0o600 {
		t.Errorf("decrypted file mode %v, want 0600", fi.Mode().Perm())
	}
	if dec["replayed"] != false {
		t.Fatalf("the first decrypt_file says replayed: %v", dec)
	}
	// Again: the first copy, not a second one.
	dec, isErr = f.call(t, grant.ToolDecryptFile, map[string]any{"path": "reports/q3.csv.pisoft"})
	if isErr || dec["path"] != "reports/q3.decrypted.csv" || dec["replayed"] != true || dec["sha256"] != mcptest.SHA256(content) {
		t.Fatalf("decrypt_file again: %v", dec)
	}
	if copies, _ := filepath.Glob(filepath.Join(root, "reports", "q3.decrypted*")); len(copies) != 1 {
		t.Fatalf("decrypt_file again wrote another copy: %v", copies)
	}
	// The copy edited (by the model, say): a new copy is written, and a
	// link planted at the next name is not written through.
	if err := os.WriteFile(filepath.Join(root, "reports", "q3.decrypted.csv"), []byte("edited"), 0o600); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.Symlink(victim, filepath.Join(root, "reports", "q3.decrypted-2.csv")); err != nil {
		t.Fatal(err)
	}
	dec, isErr = f.call(t, grant.ToolDecryptFile, map[string]any{"path": "reports/q3.csv.pisoft"})
	if isErr || dec["path"] != "reports/q3.decrypted-3.csv" || dec["replayed"] != false {
		t.Fatalf("decrypt_file with the copy edited and a link at -2: %v", dec)
	}
	if _, err := os.Lstat(victim); !os.IsNotExist(err) {
		t.Fatal("decrypt_file wrote through a planted link")
	}
	leftovers, _ := filepath.Glob(filepath.Join(root, "reports", ".*tmp-*"))
	if len(leftovers) != 0 {
		t.Fatalf("temporary files left: %v", leftovers)
	}

	// The audit lines name the path, the plaintext's sha256, minted and
	// the key link, and never the content or the t-Tag.
	lines := f.auditLines(t, grant.ToolEncryptFile)
	if len(lines) != 3 || lines[0]["path"] != "reports/q3.csv" || lines[0]["plaintextSha256"] != mcptest.SHA256(content) ||
		lines[0]["minted"] != true || len(lines[0]["keyLink"].(string)) != 12 || lines[1]["minted"] != nil ||
		lines[1]["keyLink"] != lines[0]["keyLink"] {
		t.Fatalf("encrypt_file audit lines: %v", lines)
	}
	dlines := f.auditLines(t, grant.ToolDecryptFile)
	if len(dlines) != 3 || dlines[0]["path"] != "reports/q3.csv.pisoft" || dlines[0]["keyLink"] != lines[0]["keyLink"] ||
		dlines[0]["plaintextSha256"] != mcptest.SHA256(content) {
		t.Fatalf("decrypt_file audit lines: %v", dlines)
	}
	raw, _ := os.ReadFile(f.auditLog)
	if bytes.Contains(raw, content[:10]) || bytes.Contains(raw, []byte(env["ttag"].(string))) {
		t.Fatal("the audit file holds the content or the t-Tag")
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Every hostile path is refused with its code by both tools, and no
// request reaches the Gateway.
func TestFileToolsHostilePathsSendNothing(t *testing.T) {
	fx := filestest.New(t)
	f := newFixture(t, basicDocs, withFileRoot(fx.Root, false))
	cases := fx.Cases()
	refused := 0
	for _, c := range cases {
		if c.Code == "" || !utf8.ValidString(c.Path) {
			// Invalid UTF-8 cannot travel in JSON (the client sends
			// U+FFFD instead); the resolver's own test covers it.
			continue
		}
		refused++
		t.Run(c.Name, func(t *testing.T) {
			for _, tool := range []string{grant.ToolEncryptFile, grant.ToolDecryptFile} {
				before := f.totalRequests()
				res, isErr := f.call(t, tool, map[string]any{"path": c.Path})
				if !isErr || res["layer"] != "adapter" || res["code"] != c.Code {
					t.Fatalf("%s(%q) = %v, want adapter %s", tool, c.Path, res, c.Code)
				}
				if n := f.totalRequests() - before; n != 0 {
					t.Fatalf("%s(%q) sent %d Gateway requests", tool, c.Path, n)
				}
			}
		})
	}
	if refused < 30 {
		t.Fatalf("only %d hostile paths", refused)
	}
	// Accepted paths still refused by content rules, also with nothing sent.
	before := f.totalRequests()
	for _, c := range []struct{ tool, path, code string }{
		{grant.ToolEncryptFile, "empty.txt", "EMPTY_FILE"},
		{grant.ToolDecryptFile, "ok.txt", "NOT_AN_ENVELOPE"},
		{grant.ToolDecryptFile, "link-in", "NOT_AN_ENVELOPE"},
	} {
		res, isErr := f.call(t, c.tool, map[string]any{"path": c.path})
		if !isErr || res["code"] != c.code {
			t.Errorf("%s(%q) = %v, want %s", c.tool, c.path, res, c.code)
		}
	}
	if n := f.totalRequests() - before; n != 0 {
		t.Fatalf("content refusals sent %d Gateway requests", n)
	}
}

// Envelope rules: a .pisoft to encrypt_file, an envelope naming a key not
// minted here, an edited envelope, one too large, an envelope already in
// the way.
func TestFileToolsEnvelopeRefusals(t *testing.T) {
	root := mcptest.FileRoot(t)
	writeIn(t, root, "a.txt", []byte("alpha"))
	writeIn(t, root, "b.txt", []byte("bravo"))
	writeIn(t, root, "b.txt.pisoft", []byte("someone else's file"))
	f := newFixture(t, basicDocs, withFileRoot(root, false))
	if res, isErr := f.call(t, grant.ToolEncryptFile, map[string]any{"path": "a.txt"}); isErr {
		t.Fatalf("encrypt_file: %v", res)
	}
	envBytes, _ := os.ReadFile(filepath.Join(root, "a.txt.pisoft"))
	var env map[string]any
	if err := json.Unmarshal(envBytes, &env); err != nil {
		t.Fatal(err)
	}
	edit := func(name string, change func(map[string]any)) {
		t.Helper()
		m := map[string]any{}
		_ = json.Unmarshal(envBytes, &m)
		change(m)
		b, _ := json.Marshal(m)
		writeIn(t, root, name, b)
	}
	m, err := grant.LoadManifest(f.manifest)
	if err != nil {
		t.Fatal(err)
	}
	edit("foreign-key.pisoft", func(m2 map[string]any) { m2["ttag"] = m.Destinations["summary"].TTag })
	edit("edited.pisoft", func(m2 map[string]any) { m2["ciphertext"] = "AAAAAAAAAAAAAAAAAAAAAAAA" })
	edit("extra-field.pisoft", func(m2 map[string]any) { m2["handle"] = "x" })
	edit("renamed-output.pisoft", func(m2 map[string]any) {
		m2["plaintext"].(map[string]any)["name"] = "../../escape.txt"
	})
	writeIn(t, root, "huge.pisoft", nil)
	var big *os.File
	big, err = os.Create(filepath.Join(root, "big.pisoft"))
	if err != nil {
		t.Fatal(err)
	}
	if err := big.Truncate(30 << 20); err != nil {
		t.Fatal(err)
	}
	big.Close()

	before := f.totalRequests()
	for _, c := range []struct{ tool, path, code string }{
		{grant.ToolEncryptFile, "a.txt.pisoft", "ALREADY_AN_ENVELOPE"},
		{grant.ToolEncryptFile, "b.txt", "ENVELOPE_EXISTS"},
		{grant.ToolDecryptFile, "foreign-key.pisoft", "KEY_NOT_MINTED_HERE"},
		{grant.ToolDecryptFile, "edited.pisoft", "NOT_AN_ENVELOPE"},
		{grant.ToolDecryptFile, "extra-field.pisoft", "NOT_AN_ENVELOPE"},
		{grant.ToolDecryptFile, "renamed-output.pisoft", "NOT_AN_ENVELOPE"},
		{grant.ToolDecryptFile, "b.txt.pisoft", "NOT_AN_ENVELOPE"},
		{grant.ToolDecryptFile, "huge.pisoft", "EMPTY_FILE"},
		{grant.ToolDecryptFile, "big.pisoft", "FILE_TOO_LARGE"},
	} {
		res, isErr := f.call(t, c.tool, map[string]any{"path": c.path})
		if !isErr || res["layer"] != "adapter" || res["code"] != c.code {
			t.Errorf("%s(%q) = %v, want %s", c.tool, c.path, res, c.code)
		}
	}
	if n := f.totalRequests() - before; n != 0 {
		t.Fatalf("envelope refusals sent %d Gateway requests", n)
	}
	// ENVELOPE_EXISTS left no reservation: once the name is free the
	// file encrypts.
	if err := os.Remove(filepath.Join(root, "b.txt.pisoft")); err != nil {
		t.Fatal(err)
	}
	if res, isErr := f.call(t, grant.ToolEncryptFile, map[string]any{"path": "b.txt"}); isErr || res["replayed"] != false {
		t.Fatalf("encrypt_file once the name is free: %v", res)
	}
}

// An encrypt whose answer is lost is never sent again: the retry says a
// key may have been created, and sends nothing.
func TestEncryptFileAnswerLostIsNotRetried(t *testing.T) {
	root := mcptest.FileRoot(t)
	writeIn(t, root, "c.txt", []byte("charlie"))
	f := newFixture(t, basicDocs, withFileRoot(root, false))
	f.env.Gateway.SetFaults(reference.Faults{LoseEncryptAnswer: 1})
	res, isErr := f.call(t, grant.ToolEncryptFile, map[string]any{"path": "c.txt"})
	if !isErr || res["code"] != "ENCRYPT_ANSWER_LOST" || !strings.Contains(res["detail"].(string), "key may have been created") {
		t.Fatalf("lost answer: %v", res)
	}
	enc := f.env.Gateway.Count(api.RouteEncrypt)
	res, isErr = f.call(t, grant.ToolEncryptFile, map[string]any{"path": "c.txt"})
	if !isErr || res["code"] != "ENCRYPT_ANSWER_LOST" {
		t.Fatalf("retry after a lost answer: %v", res)
	}
	if n := f.env.Gateway.Count(api.RouteEncrypt) - enc; n != 0 {
		t.Fatalf("the retry sent %d encrypts", n)
	}
	if _, err := os.Stat(filepath.Join(root, "c.txt.pisoft")); !os.IsNotExist(err) {
		t.Fatal("an envelope was written without an answer")
	}
}

// The largest file the key server round-trips does; one byte more is
// refused with nothing sent.
func TestFileSizeLimit(t *testing.T) {
	root := mcptest.FileRoot(t)
	max := bytes.Repeat([]byte("0123456789abcdef"), (api.MaxDataBytes+16)/16)[:api.MaxDataBytes]
	writeIn(t, root, "max.bin", max)
	over := append(max, 'x')
	writeIn(t, root, "over.bin", over)
	f := newFixture(t, basicDocs, withFileRoot(root, false))
	before := f.totalRequests()
	res, isErr := f.call(t, grant.ToolEncryptFile, map[string]any{"path": "over.bin"})
	if !isErr || res["code"] != "FILE_TOO_LARGE" || f.totalRequests() != before {
		t.Fatalf("16,777,216 bytes: %v (requests %d)", res, f.totalRequests()-before)
	}
	res, isErr = f.call(t, grant.ToolEncryptFile, map[string]any{"path": "max.bin"})
	if isErr || res["bytes"] != float64(api.MaxDataBytes) {
		t.Fatalf("16,777,215 bytes: %v", res)
	}
	if err := os.Remove(filepath.Join(root, "max.bin")); err != nil {
		t.Fatal(err)
	}
	res, isErr = f.call(t, grant.ToolDecryptFile, map[string]any{"path": "max.bin.pisoft"})
	if isErr || res["sha256"] != mcptest.SHA256(max) {
		t.Fatalf("decrypt 16,777,215 bytes: %v", res)
	}
	got, err := os.ReadFile(filepath.Join(root, "max.decrypted.bin"))
	if err != nil || mcptest.SHA256(got) != mcptest.SHA256(max) {
		t.Fatalf("decrypted file differs (%v)", err)
	}
}

// Each minted key joins the session's scope, which holds 64 keys: a task
// encrypting more files than that gets a fresh session when the scope is
// full, and every file is encrypted under its own key.
func TestEncryptFileBeyondOneSessionsScope(t *testing.T) {
	root := mcptest.FileRoot(t)
	const n = api.MaxObjects + 6
	for i := range n {
		writeIn(t, root, fmt.Sprintf("f%03d.txt", i), []byte(fmt.Sprintf("file %d", i)))
	}
	f := newFixture(t, basicDocs, withFileRoot(root, false))
	mints := f.env.Gateway.Count(api.RouteScoped)
	ttags := map[string]bool{}
	for i := range n {
		name := fmt.Sprintf("f%03d.txt", i)
		if res, isErr := f.call(t, grant.ToolEncryptFile, map[string]any{"path": name}); isErr {
			t.Fatalf("encrypt_file %s: %v", name, res)
		}
		ttags[mcptest.EnvelopeTTag(t, filepath.Join(root, name+".pisoft"))] = true
	}
	if len(ttags) != n {
		t.Fatalf("%d files under %d keys", n, len(ttags))
	}
	if got := f.env.Gateway.Count(api.RouteScoped) - mints; got < 2 {
		t.Fatalf("%d sessions minted for %d new keys; the scope holds %d", got, n, api.MaxObjects)
	}
}

// A file swapped between the path checks and the open, for a link to a
// file outside the folder or for another file, is FILE_CHANGED from both
// tools, with nothing sent.
func TestFileToolsSwappedFileSendsNothing(t *testing.T) {
	fx := filestest.New(t)
	var swap func()
	f := newFixture(t, basicDocs, withFileRoot(fx.Root, false), func(c *server.Config) {
		c.CrashPoint = func(point crashpoint.Point) {
			if point == crashpoint.FileChecked && swap != nil {
				swap()
				swap = nil
			}
		}
	})
	target := filepath.Join(fx.Root, "ok.txt")
	swaps := map[string]func(){
		"link outside": func() {
			_ = os.Remove(target)
			if err := os.Symlink(filepath.Join(fx.Outside, "secret.txt"), target); err != nil {
				t.Error(err)
			}
		},
		"another file": func() {
			if err := os.WriteFile(target+".new", []byte("other"), 0o644); err != nil {
				t.Error(err)
			}
			if err := os.Rename(target+".new", target); err != nil {
				t.Error(err)
			}
		},
	}
	for name, do := range swaps {
		for _, tool := range []string{grant.ToolEncryptFile, grant.ToolDecryptFile} {
			t.Run(name+" "+tool, func(t *testing.T) {
				_ = os.Remove(target)
				if err := os.WriteFile(target, []byte(filestest.Content), 0o644); err != nil {
					t.Fatal(err)
				}
				swap = do
				before := f.totalRequests()
				res, isErr := f.call(t, tool, map[string]any{"path": "ok.txt"})
				if !isErr || res["layer"] != "adapter" || res["code"] != "FILE_CHANGED" {
					t.Fatalf("%s with the file swapped: %v", tool, res)
				}
				if n := f.totalRequests() - before; n != 0 {
					t.Fatalf("sent %d Gateway requests", n)
				}
			})
		}
	}
}

// The recorded ciphertext is kept beside the journal (folder 700, file 600)
// and a deleted envelope is rewritten from it; with that copy gone too, the
// rewrite is refused and nothing is sent (no second key).
func TestEncryptFileCiphertextCopy(t *testing.T) {
	root := mcptest.FileRoot(t)
	writeIn(t, root, "d.txt", []byte("delta"))
	f := newFixture(t, basicDocs, withFileRoot(root, false))
	if res, isErr := f.call(t, grant.ToolEncryptFile, map[string]any{"path": "d.txt"}); isErr {
		t.Fatalf("encrypt_file: %v", res)
	}
	store := journal.DefaultPath(f.manifest) + ".ciphertexts"
	copies, _ := filepath.Glob(filepath.Join(store, "*.bin"))
	if len(copies) != 1 {
		t.Fatalf("ciphertext copies: %v", copies)
	}
	if fi, err := os.Stat(store); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("store folder: %v %v", fi.Mode().Perm(), err)
	}
	if fi, err := os.Stat(copies[0]); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("store file: %v %v", fi.Mode().Perm(), err)
	}
	env := filepath.Join(root, "d.txt.pisoft")
	if err := os.Remove(env); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(copies[0]); err != nil {
		t.Fatal(err)
	}
	before := f.totalRequests()
	res, isErr := f.call(t, grant.ToolEncryptFile, map[string]any{"path": "d.txt"})
	if !isErr || res["code"] != "CIPHERTEXT_UNAVAILABLE" || f.totalRequests() != before {
		t.Fatalf("rewrite without the copy: %v (requests %d)", res, f.totalRequests()-before)
	}
	if _, err := os.Stat(env); !os.IsNotExist(err) {
		t.Fatal("an envelope was written without its ciphertext")
	}
}

// A name whose envelope, temporary file or decrypted copy would not fit
// the filesystem's name limit (255 bytes here) is refused NAME_TOO_LONG
// before anything is sent: no key is made for a file whose outputs cannot
// be written. The longest name that fits goes all the way round.
func TestFileToolsNameTooLongSendsNothing(t *testing.T) {
	root := mcptest.FileRoot(t)
	// 227 bytes: the envelope (234) fits, its temporary name (256) not.
	long := strings.Repeat("n", 223) + ".csv"
	fits := strings.Repeat("n", 222) + ".csv"
	for _, name := range []string{long, fits} {
		writeIn(t, root, name, []byte("figures of "+fmt.Sprint(len(name))))
	}
	f := newFixture(t, basicDocs, withFileRoot(root, false))
	before := f.totalRequests()
	res, isErr := f.call(t, grant.ToolEncryptFile, map[string]any{"path": long})
	if !isErr || res["layer"] != "adapter" || res["code"] != "NAME_TOO_LONG" || !strings.Contains(fmt.Sprint(res["detail"]), "limit of 255") {
		t.Fatalf("encrypt_file of a %d-byte name: %v", len(long), res)
	}
	if n := f.totalRequests() - before; n != 0 {
		t.Fatalf("the refused encrypt_file sent %d Gateway requests", n)
	}
	if es, _ := os.ReadDir(root); len(es) != 2 {
		t.Fatalf("the refusal left files: %v", es)
	}
	// Again: the same answer, still nothing sent (no reservation was left
	// to say "lost").
	if res, _ := f.call(t, grant.ToolEncryptFile, map[string]any{"path": long}); res["code"] != "NAME_TOO_LONG" {
		t.Fatalf("again: %v", res)
	}
	if n := f.totalRequests() - before; n != 0 {
		t.Fatalf("the second refusal sent %d Gateway requests", n)
	}

	res, isErr = f.call(t, grant.ToolEncryptFile, map[string]any{"path": fits})
	if isErr || res["envelope"] != fits+".pisoft" {
		t.Fatalf("encrypt_file of a %d-byte name: %v", len(fits), res)
	}
	res, isErr = f.call(t, grant.ToolDecryptFile, map[string]any{"path": fits + ".pisoft"})
	if isErr || res["path"] != strings.TrimSuffix(fits, ".csv")+".decrypted.csv" {
		t.Fatalf("decrypt_file: %v", res)
	}
	if b, err := os.ReadFile(filepath.Join(root, res["path"].(string))); err != nil || string(b) != "figures of 226" {
		t.Fatalf("decrypted %q, %v", b, err)
	}
}

// writeIn writes a file of the test's own in the task's folder root.
func writeIn(t *testing.T, root, name string, b []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(root, name), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// encrypt_file writes the envelope under its staged name while the
// ciphertext is stored, and places it once the key is recorded: the
// envelope carries the key's recorded minting time (a rewrite from the
// journal is byte for byte the same), and a staged file that is gone
// before it is placed (a retry of the same content in another process
// removes it as left by a kill) is written again from the journal.
func TestEncryptFileStagedEnvelope(t *testing.T) {
	// The server's clock, an hour and a half behind the journal's.
	clock := time.Now().Add(-90 * time.Minute).Truncate(time.Second)
	for _, tc := range []struct {
		name         string
		removeStaged bool
	}{{"placed", false}, {"staged file gone", true}} {
		t.Run(tc.name, func(t *testing.T) {
			root := mcptest.FileRoot(t)
			content := []byte("staged " + tc.name)
			writeIn(t, root, "s.txt", content)
			var removed []string
			f := newFixture(t, basicDocs, withFileRoot(root, false), func(c *server.Config) {
				c.Now = func() time.Time { return clock }
				c.CrashPoint = func(point crashpoint.Point) {
					if point != crashpoint.EncryptFileStaged || !tc.removeStaged {
						return
					}
					removed, _ = filepath.Glob(filepath.Join(root, ".s.txt.pisoft.tmp-*"))
					for _, r := range removed {
						if err := os.Remove(r); err != nil {
							t.Error(err)
						}
					}
				}
			})
			if res, isErr := f.call(t, grant.ToolEncryptFile, map[string]any{"path": "s.txt"}); isErr || res["replayed"] != false {
				t.Fatalf("encrypt_file: %v", res)
			}
			if tc.removeStaged && len(removed) != 1 {
				t.Fatalf("staged files at the staged point: %v, want one", removed)
			}
			if leftovers, _ := filepath.Glob(filepath.Join(root, ".*")); len(leftovers) != 0 {
				t.Fatalf("temporary files left: %v", leftovers)
			}
			envPath := filepath.Join(root, "s.txt.pisoft")
			envBytes, err := os.ReadFile(envPath)
			if err != nil {
				t.Fatal(err)
			}
			var env struct {
				CreatedAt string `json:"createdAt"`
			}
			if err := json.Unmarshal(envBytes, &env); err != nil || env.CreatedAt != clock.UTC().Format(time.RFC3339) {
				t.Fatalf("envelope createdAt %q, want the server's clock %s (%v)", env.CreatedAt, clock.UTC().Format(time.RFC3339), err)
			}
			if err := os.Remove(envPath); err != nil {
				t.Fatal(err)
			}
			again, isErr := f.call(t, grant.ToolEncryptFile, map[string]any{"path": "s.txt"})
			if isErr || again["rewritten"] != true {
				t.Fatalf("encrypt_file after the envelope was deleted: %v", again)
			}
			if rewritten, _ := os.ReadFile(envPath); !bytes.Equal(rewritten, envBytes) {
				t.Fatalf("rewritten envelope differs:\n%s\n%s", rewritten, envBytes)
			}
			if err := os.Remove(filepath.Join(root, "s.txt")); err != nil {
				t.Fatal(err)
			}
			if dec, isErr := f.call(t, grant.ToolDecryptFile, map[string]any{"path": "s.txt.pisoft"}); isErr || dec["sha256"] != mcptest.SHA256(content) {
				t.Fatalf("decrypt_file: %v", dec)
			}
		})
	}
}
