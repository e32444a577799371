package journal

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/pdmcp/pdmcp/internal/safefile"
	"github.com/pdmcp/pdmcp/internal/testutil"
)

// The two-process test runs this test binary again as a helper; these
// variables tell the child what to do.
const (
	helperDBEnv   = "PDMCP_JOURNAL_HELPER_DB"
	helperNameEnv = "PDMCP_JOURNAL_HELPER_NAME"
	// helperReleaseEnv makes the helper reserve and release the file row
	// named by releaseKey (a second process's stray release).
	helperReleaseEnv = "PDMCP_JOURNAL_HELPER_RELEASE"
)

func TestMain(m *testing.M) {
	if path := os.Getenv(helperReleaseEnv); path != "" {
		os.Exit(runReleaseHelper(path))
	}
	if path := os.Getenv(helperDBEnv); path != "" {
		os.Exit(runHelper(path, os.Getenv(helperNameEnv)))
	}
	if path := os.Getenv(lockHelperEnv); path != "" {
		os.Exit(runLockHelper(path))
	}
	os.Exit(m.Run())
}

func sum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func openAt(t *testing.T, path string) *Journal {
	t.Helper()
	j, err := Open(context.Background(), path)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

func openTemp(t *testing.T) (*Journal, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "manifest.journal.sqlite")
	return openAt(t, path), path
}

// journalAtSchema writes a journal as the release of schema n left it: the
// first n migrations, user_version n, then the rows insert (with args)
// adds. It returns the file's path.
func journalAtSchema(t *testing.T, n int, insert string, args ...any) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "old.journal.sqlite")
	if _, err := preparePrivateFile(path, true); err != nil {
		t.Fatal(err)
	}
	raw, err := sql.Open("sqlite", path+"?_journal_mode=WAL")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	for _, step := range migrations()[:n] {
		if _, err := raw.Exec(step); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := raw.Exec(fmt.Sprintf("PRAGMA user_version = %d", n)); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(insert, args...); err != nil {
		t.Fatal(err)
	}
	return path
}

// asHelper is the body of a helper process: it opens the journal at path
// and runs work on it, printing an error to stderr and exiting 1 on
// failure.
func asHelper(path string, work func(context.Context, *Journal) error) int {
	ctx := context.Background()
	j, err := Open(ctx, path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer j.Close()
	if err := work(ctx, j); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func TestDefaultPath(t *testing.T) {
	tests := []struct{ manifest, want string }{
		{"task-data/manifest.json", "task-data/manifest.journal.sqlite"},
		{"/etc/pdmcp/ops.manifest.json", "/etc/pdmcp/ops.manifest.journal.sqlite"},
		{"manifest", "manifest.journal.sqlite"},
	}
	for _, tc := range tests {
		if got := DefaultPath(tc.manifest); got != tc.want {
			t.Errorf("DefaultPath(%q) = %q, want %q", tc.manifest, got, tc.want)
		}
	}
}

func TestOpenCreatesPrivateFiles(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Log("permission bits are not meaningful on Windows; checking creation only")
	}
	j, path := openTemp(t)
	if _, err := j.Reserve(context.Background(), SaveKey{Destination: "d", IdempotencyKey: "k"}, sum("x")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatalf("stat %s: %v", p, err)
		}
		if runtime.GOOS != "windows" && fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %#o, want 0600", filepath.Base(p), fi.Mode().Perm())
		}
	}
	var mode string
	var fk int
	if err := j.db.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("journal_mode = %q (%v), want wal", mode, err)
	}
	if err := j.db.QueryRow("PRAGMA foreign_keys").Scan(&fk); err != nil || fk != 1 {
		t.Errorf("foreign_keys = %d (%v), want 1", fk, err)
	}
}

func TestOpenRefusesSharedFile(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Log("permission bits are not checked on Windows")
		return
	}
	path := filepath.Join(t.TempDir(), "j.sqlite")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Open(context.Background(), path)
	if !errors.Is(err, ErrUnsafeMode) {
		t.Fatalf("Open of a 0644 file: err = %v, want ErrUnsafeMode", err)
	}
	// The wording of every operator file's mode (internal/safefile).
	if want := "journal: " + path + " has mode 0644: group and others must have no access (chmod 600)"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	if !errors.Is(err, safefile.ErrNotOwnerOnly) {
		t.Errorf("error %q does not match safefile.ErrNotOwnerOnly", err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o644 || fi.Size() != 0 {
		t.Errorf("refused file was changed: mode %#o size %d", fi.Mode().Perm(), fi.Size())
	}
}

func TestOpenRefusesBadPaths(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"", filepath.Join(dir, "a?b.sqlite"), filepath.Join(dir, "a#b.sqlite")} {
		if _, err := Open(context.Background(), p); !errors.Is(err, ErrInvalid) {
			t.Errorf("Open(%q): err = %v, want ErrInvalid", p, err)
		}
	}
	if _, err := Open(context.Background(), dir); err == nil {
		t.Errorf("Open of a directory succeeded")
	}
}

func TestSchemaVersion(t *testing.T) {
	ctx := context.Background()
	j, path := openTemp(t)
	var v int
	if err := j.db.QueryRow("PRAGMA user_version").Scan(&v); err != nil || v != SchemaVersion {
		t.Fatalf("user_version = %d (%v), want %d", v, err, SchemaVersion)
	}
	if _, err := j.Reserve(ctx, SaveKey{Destination: "d", IdempotencyKey: "k"}, sum("kept")); err != nil {
		t.Fatal(err)
	}
	j.Close()

	// Reopening at the same version keeps the rows.
	j2 := openAt(t, path)
	if r, err := j2.Get(ctx, SaveKey{Destination: "d", IdempotencyKey: "k"}); err != nil || r.TextSHA256 != sum("kept") {
		t.Fatalf("after reopen: %+v, %v", r, err)
	}
	j2.Close()

	// A newer program's file is refused.
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(fmt.Sprintf("PRAGMA user_version = %d", SchemaVersion+1)); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	_, err = Open(ctx, path)
	if !errors.Is(err, ErrNewerSchema) {
		t.Fatalf("Open of a newer schema: err = %v, want ErrNewerSchema", err)
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("version %d", SchemaVersion+1)) {
		t.Errorf("error %q does not name the file's version", err)
	}
}

func TestReserveOutcomes(t *testing.T) {
	ctx := context.Background()
	j, _ := openTemp(t)
	key := SaveKey{Caller: "", Destination: "summary", IdempotencyKey: "k1"}
	payload := EncryptedPayload{IV: bytes.Repeat([]byte{1}, 16), Ciphertext: []byte("ct"), TTag: "tag"}
	receipt := Receipt{Destination: "summary", Version: 2, Path: "results/summary.v2.bin", SHA256: sum("t"), Size: 1}

	r, err := j.Reserve(ctx, key, sum("text"))
	if err != nil || !r.New || r.State != SaveReserved || r.Encrypted != nil || r.Receipt != nil {
		t.Fatalf("first Reserve: %+v, %v; want a new reserved row", r, err)
	}
	tests := []struct {
		name      string
		prepare   func() error
		text      string
		wantErr   error
		wantState SaveState
	}{
		{"same text while reserved", nil, "text", nil, SaveReserved},
		{"other text while reserved", nil, "other", ErrIdempotencyConflict, ""},
		{"same text once encrypted", func() error { _, err := j.RecordEncrypted(ctx, key, payload); return err }, "text", nil, SaveEncrypted},
		{"same text once committed", func() error { _, err := j.Commit(ctx, key, receipt); return err }, "text", nil, SaveCommitted},
		{"other text once committed", nil, "other", ErrIdempotencyConflict, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.prepare != nil {
				if err := tc.prepare(); err != nil {
					t.Fatal(err)
				}
			}
			r, err := j.Reserve(ctx, key, sum(tc.text))
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.New || r.State != tc.wantState {
				t.Fatalf("got New=%v State=%s, want New=false State=%s", r.New, r.State, tc.wantState)
			}
			if tc.wantState == SaveCommitted && (r.Receipt == nil || *r.Receipt != receipt) {
				t.Errorf("receipt = %+v, want %+v", r.Receipt, receipt)
			}
			if tc.wantState != SaveReserved && (r.Encrypted == nil || !bytes.Equal(r.Encrypted.Ciphertext, payload.Ciphertext)) {
				t.Errorf("encrypted payload = %+v, want the recorded one", r.Encrypted)
			}
		})
	}
	// A conflict changes nothing.
	if r, err := j.Get(ctx, key); err != nil || r.TextSHA256 != sum("text") || r.State != SaveCommitted {
		t.Errorf("after conflicts: %+v, %v", r, err)
	}
}

// TestCrashSequence walks a save through reserve -> encrypt -> record
// encrypted -> place -> write -> rename -> commit, reopening the journal (a
// new process) at each point, and checks a retry can tell what is left.
func TestCrashSequence(t *testing.T) {
	ctx := context.Background()
	_, path := openTemp(t)
	key := SaveKey{Destination: "summary", IdempotencyKey: "run-7"}
	text := sum("the result")
	first := EncryptedPayload{IV: bytes.Repeat([]byte{7}, 16), Ciphertext: []byte("first answer"), TTag: "dest-tag"}
	late := EncryptedPayload{IV: bytes.Repeat([]byte{8}, 16), Ciphertext: []byte("late answer"), TTag: "dest-tag"}
	restart := func() *Journal {
		t.Helper()
		return openAt(t, path)
	}

	j := restart()
	if r, err := j.Reserve(ctx, key, text); err != nil || !r.New {
		t.Fatalf("reserve: %+v, %v", r, err)
	}
	j.Close()

	// Crash during the encrypt: nothing recorded, so encrypt (again).
	j = restart()
	r, err := j.Reserve(ctx, key, text)
	if err != nil || r.New || r.State != SaveReserved || r.Encrypted != nil {
		t.Fatalf("after crash before answer: %+v, %v; want reserved with no payload", r, err)
	}
	if _, err := j.RecordPlacement(ctx, key, Placement{Version: 1, Path: "results/summary.v1.bin"}); !errors.Is(err, ErrOutOfOrder) {
		t.Errorf("placement before encrypt: err = %v, want ErrOutOfOrder", err)
	}
	if _, err := j.Commit(ctx, key, Receipt{Version: 1}); !errors.Is(err, ErrOutOfOrder) {
		t.Errorf("commit before encrypt: err = %v, want ErrOutOfOrder", err)
	}
	if _, err := j.RecordEncrypted(ctx, key, first); err != nil {
		t.Fatal(err)
	}
	j.Close()

	// Crash after the answer was recorded: use it, no second encrypt. A late
	// answer from a concurrent retry does not replace it.
	j = restart()
	r, err = j.Reserve(ctx, key, text)
	if err != nil || r.State != SaveEncrypted || r.Encrypted == nil || !bytes.Equal(r.Encrypted.Ciphertext, first.Ciphertext) ||
		!bytes.Equal(r.Encrypted.IV, first.IV) || r.Encrypted.TTag != first.TTag {
		t.Fatalf("after crash after record: %+v, %v; want the first payload", r, err)
	}
	if r, err = j.RecordEncrypted(ctx, key, late); err != nil || !bytes.Equal(r.Encrypted.Ciphertext, first.Ciphertext) {
		t.Fatalf("late answer: %+v, %v; want the first payload kept", r, err)
	}
	if _, err := j.RecordPlacement(ctx, key, Placement{Version: 3, Path: "results/summary.v3.bin"}); err != nil {
		t.Fatal(err)
	}
	j.Close()

	// Crash after placement (file maybe written, manifest maybe renamed):
	// the retry knows which version and file to look at.
	j = restart()
	r, err = j.Reserve(ctx, key, text)
	if err != nil || r.State != SavePlaced || r.Placement == nil || *r.Placement != (Placement{3, "results/summary.v3.bin"}) ||
		!bytes.Equal(r.Encrypted.Ciphertext, first.Ciphertext) {
		t.Fatalf("after crash after placement: %+v, %v", r, err)
	}
	// Another save took version 3 meanwhile: move to 4.
	if _, err := j.RecordPlacement(ctx, key, Placement{Version: 4, Path: "results/summary.v4.bin"}); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Commit(ctx, key, Receipt{Version: 3, Path: "results/summary.v3.bin"}); !errors.Is(err, ErrOutOfOrder) {
		t.Errorf("commit naming a stale placement: err = %v, want ErrOutOfOrder", err)
	}
	rc := Receipt{Destination: "summary", Version: 4, Path: "results/summary.v4.bin", SHA256: text, Size: 10}
	if r, err = j.Commit(ctx, key, rc); err != nil || r.State != SaveCommitted {
		t.Fatalf("commit: %+v, %v", r, err)
	}
	j.Close()

	// After commit: the first receipt, every time.
	j = restart()
	r, err = j.Reserve(ctx, key, text)
	if err != nil || r.State != SaveCommitted || r.Receipt == nil || *r.Receipt != rc {
		t.Fatalf("after commit: %+v, %v", r, err)
	}
	if r, err = j.Commit(ctx, key, Receipt{Version: 9, Path: "x"}); err != nil || *r.Receipt != rc {
		t.Errorf("second commit: %+v, %v; want the first receipt", r.Receipt, err)
	}
	if _, err := j.RecordPlacement(ctx, key, Placement{Version: 5, Path: "y"}); !errors.Is(err, ErrOutOfOrder) {
		t.Errorf("placement after commit: err = %v, want ErrOutOfOrder", err)
	}
}

func TestCommitWithoutPlacement(t *testing.T) {
	ctx := context.Background()
	j, _ := openTemp(t)
	key := FragmentKey{Caller: "alice", DocumentID: "ccd-1", FragmentID: "problems", IdempotencyKey: "k"}
	if _, err := j.Reserve(ctx, key, sum("s")); err != nil {
		t.Fatal(err)
	}
	if _, err := j.RecordEncrypted(ctx, key, EncryptedPayload{IV: []byte{1}, Ciphertext: []byte{2}, TTag: "t"}); err != nil {
		t.Fatal(err)
	}
	rc := Receipt{DocumentID: "ccd-1", FragmentID: "problems", Version: 2, Path: "p", SHA256: sum("s"), Size: 1}
	r, err := j.Commit(ctx, key, rc)
	if err != nil || r.State != SaveCommitted || *r.Receipt != rc || r.Placement != nil {
		t.Fatalf("commit from encrypted: %+v, %v", r, err)
	}
}

func TestSaveKeysAreSeparate(t *testing.T) {
	ctx := context.Background()
	j, _ := openTemp(t)
	// Same idempotency key everywhere; different callers, kinds, targets.
	keys := []SaveID{
		SaveKey{Caller: "", Destination: "summary", IdempotencyKey: "k"},
		SaveKey{Caller: "alice", Destination: "summary", IdempotencyKey: "k"},
		SaveKey{Caller: "bob", Destination: "summary", IdempotencyKey: "k"},
		SaveKey{Caller: "alice", Destination: "other", IdempotencyKey: "k"},
		FragmentKey{Caller: "alice", DocumentID: "summary", FragmentID: "f1", IdempotencyKey: "k"},
		FragmentKey{Caller: "alice", DocumentID: "summary", FragmentID: "f2", IdempotencyKey: "k"},
	}
	for i, k := range keys {
		r, err := j.Reserve(ctx, k, sum(fmt.Sprint("text ", i)))
		if err != nil || !r.New {
			t.Errorf("Reserve(%+v): New=%v err=%v; want a new row with no conflict", k, r.New, err)
		}
	}
	for i, k := range keys {
		r, err := j.Get(ctx, k)
		if err != nil || r.TextSHA256 != sum(fmt.Sprint("text ", i)) {
			t.Errorf("Get(%+v) = %+v, %v", k, r, err)
		}
	}
}

func TestSaveArgumentsChecked(t *testing.T) {
	ctx := context.Background()
	j, _ := openTemp(t)
	good := SaveKey{Destination: "d", IdempotencyKey: "k"}
	tests := []struct {
		name string
		key  SaveID
		sha  string
	}{
		{"no destination", SaveKey{IdempotencyKey: "k"}, sum("x")},
		{"no idempotency key", SaveKey{Destination: "d"}, sum("x")},
		{"fragment without fragment id", FragmentKey{DocumentID: "d", IdempotencyKey: "k"}, sum("x")},
		{"short sha", good, "abc"},
		{"upper-case sha", good, strings.ToUpper(sum("x"))},
	}
	for _, tc := range tests {
		if _, err := j.Reserve(ctx, tc.key, tc.sha); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", tc.name, err)
		}
	}
	if _, err := j.Get(ctx, good); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get of an unknown key: err = %v, want ErrNotFound", err)
	}
	if _, err := j.RecordEncrypted(ctx, good, EncryptedPayload{IV: []byte{1}, Ciphertext: []byte{1}, TTag: "t"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("RecordEncrypted of an unknown key: err = %v, want ErrNotFound", err)
	}
	if _, err := j.Reserve(ctx, good, sum("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := j.RecordEncrypted(ctx, good, EncryptedPayload{TTag: "t"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("empty payload: err = %v, want ErrInvalid", err)
	}
	if r, _ := j.Get(ctx, good); r.State != SaveReserved {
		t.Errorf("a refused payload changed the row to %s", r.State)
	}
}

// TestConcurrentHandles uses two Opens of one file from many goroutines.
func TestConcurrentHandles(t *testing.T) {
	ctx := context.Background()
	j1, path := openTemp(t)
	j2 := openAt(t, path)
	handles := []*Journal{j1, j2}
	key := SaveKey{Caller: "alice", Destination: "summary", IdempotencyKey: "same"}

	const n = 8
	results := make([]Reservation, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			results[i], errs[i] = handles[i%2].Reserve(ctx, key, sum("text"))
		})
	}
	wg.Wait()
	news := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("goroutine %d: %v", i, errs[i])
		}
		if results[i].New {
			news++
		}
	}
	if news != 1 {
		t.Fatalf("%d of %d concurrent Reserves got New, want exactly 1", news, n)
	}

	// Each handle sees the other's commits.
	for i, h := range handles {
		other := handles[1-i]
		k := SaveKey{Caller: "alice", Destination: "summary", IdempotencyKey: fmt.Sprint("own-", i)}
		if _, err := h.Reserve(ctx, k, sum("t")); err != nil {
			t.Fatal(err)
		}
		if _, err := h.RecordEncrypted(ctx, k, EncryptedPayload{IV: []byte{1}, Ciphertext: []byte{2}, TTag: "t"}); err != nil {
			t.Fatal(err)
		}
		rc := Receipt{Destination: "summary", Version: i + 1, Path: "p", SHA256: sum("t"), Size: 1}
		if _, err := h.Commit(ctx, k, rc); err != nil {
			t.Fatal(err)
		}
		r, err := other.Get(ctx, k)
		if err != nil || r.State != SaveCommitted || *r.Receipt != rc {
			t.Errorf("handle %d does not see handle %d's commit: %+v, %v", 1-i, i, r, err)
		}
	}

	// Many goroutines writing distinct rows through both handles.
	var wg2 sync.WaitGroup
	errc := make(chan error, 40)
	for i := range 40 {
		wg2.Go(func() {
			k := FragmentKey{Caller: "bob", DocumentID: "doc", FragmentID: "f", IdempotencyKey: fmt.Sprint(i)}
			h := handles[i%2]
			if _, err := h.Reserve(ctx, k, sum("x")); err != nil {
				errc <- err
				return
			}
			if _, err := h.RecordEncrypted(ctx, k, EncryptedPayload{IV: []byte{1}, Ciphertext: []byte{2}, TTag: "t"}); err != nil {
				errc <- err
			}
		})
	}
	wg2.Wait()
	close(errc)
	for err := range errc {
		t.Errorf("concurrent write: %v", err)
	}
	var count int
	if err := j1.db.QueryRow(`SELECT count(*) FROM saves WHERE caller = 'bob' AND state = 'encrypted'`).Scan(&count); err != nil || count != 40 {
		t.Errorf("encrypted rows = %d (%v), want 40", count, err)
	}
}

// runHelper is the child side of TestTwoProcesses: it reserves a shared key
// (printing whether it got the new row) and commits 20 keys of its own.
func runHelper(path, name string) int {
	return asHelper(path, func(ctx context.Context, j *Journal) error {
		r, err := j.Reserve(ctx, SaveKey{Caller: "shared", Destination: "d", IdempotencyKey: "same"}, sum("same text"))
		if err != nil {
			return err
		}
		fmt.Println("new:", r.New)
		for i := range 20 {
			k := SaveKey{Caller: name, Destination: "d", IdempotencyKey: fmt.Sprint(i)}
			if _, err := j.Reserve(ctx, k, sum("t")); err != nil {
				return err
			}
			if _, err := j.RecordEncrypted(ctx, k, EncryptedPayload{IV: []byte{1}, Ciphertext: []byte{2}, TTag: "t"}); err != nil {
				return err
			}
			if _, err := j.Commit(ctx, k, Receipt{Destination: "d", Version: i + 1, Path: "p", SHA256: sum("t")}); err != nil {
				return err
			}
		}
		return nil
	})
}

func TestTwoProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "shared.journal.sqlite")
	names := []string{"p1", "p2"}
	children := make([]*testutil.Child, len(names))
	for i, name := range names {
		children[i] = testutil.StartChild(t, helperDBEnv+"="+path, helperNameEnv+"="+name)
	}
	news := 0
	for i, c := range children {
		out := c.Line(t)
		c.Wait(t)
		switch out {
		case "new: true":
			news++
		case "new: false":
		default:
			t.Fatalf("helper %s printed %q", names[i], out)
		}
	}
	if news != 1 {
		t.Fatalf("%d processes got the new row, want exactly 1", news)
	}
	j := openAt(t, path)
	for _, name := range names {
		for i := range 20 {
			r, err := j.Get(context.Background(), SaveKey{Caller: name, Destination: "d", IdempotencyKey: fmt.Sprint(i)})
			if err != nil || r.State != SaveCommitted || r.Receipt.Version != i+1 {
				t.Errorf("%s key %d: %+v, %v", name, i, r, err)
			}
		}
	}
}
