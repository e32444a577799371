package sidecar

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/server/journal"
)

func hexSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

var at = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// result is a result version whose file holds ct.
func result(dest string, n int, ct string) Version {
	return Version{Task: "task-a", Record: journal.Version{Destination: dest, Version: n,
		Path: "results/" + dest + ".v" + string(rune('0'+n)) + ".bin", IV: "AAAAAAAAAAAAAAAAAAAAAA==", TTag: "t-" + dest,
		CiphertextSHA256: hexSum([]byte(ct)), SHA256: hexSum([]byte("plain " + ct)), Size: int64(len(ct)),
		SavedAt: at.Add(time.Duration(n) * time.Second), ActingAs: "agent", IdempotencyKey: "k" + ct}}
}

// section is a section version of document x whose file holds ct.
func section(frag string, n, base int, saved time.Time, ct string) Version {
	return Version{Task: "task-a", DocumentBase: base, Record: journal.Version{DocumentID: "x", FragmentID: frag, Version: n,
		BaseIV: "iv" + frag, Path: "documents/x/" + frag + ".v" + string(rune('0'+n)) + ".bin", IV: "AQ==", TTag: "t-lab",
		CiphertextSHA256: hexSum([]byte(ct)), SHA256: hexSum([]byte("plain " + ct)), Size: 3, SavedAt: saved,
		Caller: "bob", ActingAs: "bob.p", IdempotencyKey: "k" + ct}}
}

// place writes v's sidecar and its version file (holding ct) under dir.
func place(t *testing.T, root *os.Root, v Version, ct string) {
	t.Helper()
	if err := root.MkdirAll(filepath.Dir(filepath.FromSlash(v.Record.Path)), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := Write(root, v, true); err != nil {
		t.Fatal(err)
	}
	if ct != "" {
		if err := root.WriteFile(filepath.FromSlash(v.Record.Path), []byte(ct), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func TestWriteRead(t *testing.T) {
	dir := t.TempDir()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	for _, v := range []Version{result("d", 2, "c2"), section("A", 2, 1, at, "s2")} {
		place(t, root, v, "")
		got, err := Read(root, v.Record.Path)
		if err != nil {
			t.Fatal(err)
		}
		if got != v {
			t.Fatalf("read back\n got %+v\nwant %+v", got, v)
		}
		fi, err := os.Stat(filepath.Join(dir, filepath.FromSlash(PathOf(v.Record.Path))))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("sidecar mode %v %v", fi, err)
		}
		// Writing it again is a no-op; another record for the same
		// version replaces it (a retry of the save that holds it).
		if err := Write(root, v, true); err != nil {
			t.Fatal(err)
		}
		w := v
		w.Record.IV = "Ag=="
		if err := Write(root, w, false); err != nil {
			t.Fatal(err)
		}
		if got, _ := Read(root, v.Record.Path); got.Record.IV != "Ag==" {
			t.Fatalf("rewritten IV %q", got.Record.IV)
		}
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "results"))
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".tmp") {
			t.Fatalf("a temporary file is left: %s", e.Name())
		}
	}
}

// TestEncodeRefusesIncomplete: a version without what opens it (IV, key)
// or what checks it (digests), or with a path outside the folder, is
// never written.
func TestEncodeRefusesIncomplete(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Version)
	}{
		{"no iv", func(v *Version) { v.Record.IV = "" }},
		{"no ttag", func(v *Version) { v.Record.TTag = "" }},
		{"no ciphertext digest", func(v *Version) { v.Record.CiphertextSHA256 = "" }},
		{"upper-case digest", func(v *Version) { v.Record.SHA256 = strings.ToUpper(v.Record.SHA256) }},
		{"version 0", func(v *Version) { v.Record.Version = 0 }},
		{"path outside", func(v *Version) { v.Record.Path = "../d.v2.bin" }},
		{"absolute path", func(v *Version) { v.Record.Path = "/results/d.v2.bin" }},
		{"not a .bin", func(v *Version) { v.Record.Path = "results/d.v2.txt" }},
		{"a result and a section", func(v *Version) { v.Record.DocumentID = "x" }},
		{"no saved at", func(v *Version) { v.Record.SavedAt = time.Time{} }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := result("d", 2, "c")
			tc.change(&v)
			if _, err := Encode(v); !errors.Is(err, ErrInvalid) {
				t.Fatalf("Encode: %v", err)
			}
		})
	}
}

func TestDecodeRefuses(t *testing.T) {
	good, err := Encode(result("d", 2, "c"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ name, sidecar, data string }{
		{"another format", "results/d.v2.json", strings.Replace(string(good), `"pdmcpVersionRecord": 1`, `"pdmcpVersionRecord": 2`, 1)},
		{"unknown field", "results/d.v2.json", strings.Replace(string(good), `"kind"`, `"extra": 1, "kind"`, 1)},
		{"another file's record", "results/d.v3.json", string(good)},
		{"two records", "results/d.v2.json", string(good) + string(good)},
		{"not JSON", "results/d.v2.json", "v2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Decode(tc.sidecar, []byte(tc.data)); !errors.Is(err, ErrInvalid) {
				t.Fatalf("Decode: %v", err)
			}
		})
	}
	if _, err := Decode("results/d.v2.json", good); err != nil {
		t.Fatalf("the good one: %v", err)
	}
}

// TestScan: a sidecar with its file is a version; one whose file is
// missing (a save that never placed its version) or holds other bytes is a
// leftover, never a version; a damaged one and a stopped save's temporary
// files are reported.
func TestScan(t *testing.T) {
	dir := t.TempDir()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	d1, d2 := result("d", 1, "c1"), result("d", 2, "c2")
	a2 := section("A", 2, 1, at, "s2")
	place(t, root, d2, "c2")
	place(t, root, d1, "c1")
	place(t, root, a2, "s2")
	place(t, root, result("d", 3, "c3"), "")                     // never placed
	place(t, root, result("e", 1, "e1"), "a stray file's bytes") // its name taken by another file
	if err := root.WriteFile("results/f.v1.json", []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tmp := range []string{"results/.pdmcp-save-0123.tmp", "documents/x/.pdmcp-sidecar-0123.tmp"} {
		if err := root.WriteFile(tmp, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Not sidecars: the operator's own files are not looked at.
	if err := root.WriteFile("results/notes.json", []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := root.WriteFile("manifest.json", []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	vs, problems, err := Scan(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := []Version{d1, d2, a2}; !slices.Equal(vs, want) {
		t.Fatalf("versions\n got %+v\nwant %+v", vs, want)
	}
	got := map[string]ProblemKind{}
	for _, p := range problems {
		got[p.Path] = p.Kind
		if strings.Contains(p.Detail, "t-") || strings.Contains(p.Detail, "AAAA") {
			t.Errorf("a problem names a key or an IV: %s", p.Detail)
		}
	}
	want := map[string]ProblemKind{
		"results/d.v3.json":                   ProblemLeftover,
		"results/e.v1.json":                   ProblemMismatch,
		"results/f.v1.json":                   ProblemUnreadable,
		"results/.pdmcp-save-0123.tmp":        ProblemTemporary,
		"documents/x/.pdmcp-sidecar-0123.tmp": ProblemTemporary,
	}
	if len(got) != len(want) {
		t.Fatalf("problems %+v", problems)
	}
	for p, k := range want {
		if got[p] != k {
			t.Errorf("%s: %q, want %q (%+v)", p, got[p], k, problems)
		}
	}
	if _, _, err := Scan(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("a folder that does not exist scanned")
	}
}

// TestRebuild: a journal lost and made again from nothing gets every
// version back from the sidecars, with the IVs and keys that open them
// (without which the ciphertexts could never be opened again), and the
// sections' document versions in the order they were saved; a rebuild
// again adds nothing; a journal of another task is refused by name.
func TestRebuild(t *testing.T) {
	ctx := context.Background()
	vs := []Version{
		result("d", 1, "c1"), result("d", 2, "c2"),
		section("A", 2, 1, at, "a2"), section("B", 2, 1, at.Add(time.Second), "b2"), section("A", 3, 1, at.Add(2*time.Second), "a3"),
	}
	j, err := journal.Open(ctx, filepath.Join(t.TempDir(), "manifest.journal.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	n, err := Rebuild(ctx, j, vs)
	if err != nil || n != len(vs) {
		t.Fatalf("rebuild: %d %v", n, err)
	}
	rows, err := j.Versions(ctx)
	if err != nil || len(rows) != len(vs) {
		t.Fatalf("record %+v %v", rows, err)
	}
	byPath := map[string]journal.Version{}
	for _, r := range rows {
		byPath[r.Path] = r
	}
	wantDV := map[string]int{"documents/x/A.v2.bin": 2, "documents/x/B.v2.bin": 3, "documents/x/A.v3.bin": 4}
	for _, v := range vs {
		r := byPath[v.Record.Path]
		want := v.Record
		want.DocumentVersion = wantDV[v.Record.Path]
		if r != want {
			t.Fatalf("rebuilt row\n got %+v\nwant %+v", r, want)
		}
	}
	heads, err := j.Heads(ctx, "x", map[string]string{"A": "ivA", "B": "ivB"})
	if err != nil || heads["A"].Version != 3 || heads["B"].Version != 2 {
		t.Fatalf("heads after the rebuild %+v %v", heads, err)
	}
	if task, _ := j.Task(ctx); task != "task-a" {
		t.Fatalf("the rebuilt journal's task %q", task)
	}
	if n, err := Rebuild(ctx, j, vs); err != nil || n != 0 {
		t.Fatalf("rebuild again: %d %v", n, err)
	}
	other := result("d", 3, "c3")
	other.Task = "task-b"
	if n, err := Rebuild(ctx, j, []Version{other}); !errors.Is(err, journal.ErrOtherTask) || n != 0 || !strings.Contains(err.Error(), "task-b") {
		t.Fatalf("another task's sidecars: %d %v", n, err)
	}
	mixed := []Version{result("e", 1, "e1"), other}
	if n, err := Rebuild(ctx, j, mixed); !errors.Is(err, journal.ErrOtherTask) || n != 0 {
		t.Fatalf("sidecars of two tasks: %d %v", n, err)
	}
}

// FuzzDecode: whatever a file holds, Decode never panics, and what it
// accepts is a complete record that encodes and decodes to itself, naming
// a .bin file inside the folder beside its sidecar.
func FuzzDecode(f *testing.F) {
	for _, v := range []Version{result("d", 2, "c"), section("A", 3, 1, at, "s")} {
		b, err := Encode(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(PathOf(v.Record.Path), b)
	}
	f.Add("results/d.v1.json", []byte(`{"pdmcpVersionRecord":1}`))
	f.Fuzz(func(t *testing.T, name string, data []byte) {
		v, err := Decode(name, data)
		if err != nil {
			return
		}
		if !validPath(v.Record.Path) || PathOf(v.Record.Path) != name {
			t.Fatalf("accepted path %q for sidecar %q", v.Record.Path, name)
		}
		b, err := Encode(v)
		if err != nil {
			t.Fatalf("an accepted record does not encode: %v", err)
		}
		again, err := Decode(name, b)
		if err != nil || again != v {
			t.Fatalf("round trip: %+v, %v; want %+v", again, err, v)
		}
	})
}
