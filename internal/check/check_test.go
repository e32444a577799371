package check

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/filelock"
	"github.com/pdmcp/pdmcp/server/journal"
	"github.com/pdmcp/pdmcp/server/sidecar"
)

var at = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func hexSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// folder is a task folder: a manifest of task "task-a" with destination d
// and compound document x, and what each test puts beside it.
type folder struct {
	t        *testing.T
	dir      string
	manifest string
	root     *os.Root
}

func newFolder(t *testing.T) *folder {
	t.Helper()
	dir := t.TempDir()
	mp := filepath.Join(dir, "manifest.json")
	m := &grant.Manifest{Version: grant.ManifestVersion, Task: "task-a",
		Destinations: map[string]grant.Destination{"d": {TTag: "t-d-0123456789"}}}
	if err := m.Save(mp); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	return &folder{t: t, dir: dir, manifest: mp, root: root}
}

func (f *folder) journalPath() string { return journal.DefaultPath(f.manifest) }

// version is result version n of d, whose file holds "ct-<n>".
func version(n int) sidecar.Version {
	ct := fmt.Sprintf("ct-%d", n)
	return sidecar.Version{Task: "task-a", Record: journal.Version{Destination: "d", Version: n,
		Path: fmt.Sprintf("results/d.v%d.bin", n), IV: "AAAAAAAAAAAAAAAAAAAAAA==", TTag: "t-d-0123456789",
		CiphertextSHA256: hexSum([]byte(ct)), SHA256: hexSum([]byte("plain " + ct)), Size: int64(len(ct)),
		SavedAt: at.Add(time.Duration(n) * time.Second), Caller: "alice", ActingAs: "agent", IdempotencyKey: fmt.Sprintf("k%d", n)}}
}

// save puts version n's sidecar and file in the folder.
func (f *folder) save(n int) sidecar.Version {
	f.t.Helper()
	v := version(n)
	if err := f.root.MkdirAll("results", 0o700); err != nil {
		f.t.Fatal(err)
	}
	if err := sidecar.Write(f.root, v, false); err != nil {
		f.t.Fatal(err)
	}
	f.write(v.Record.Path, fmt.Sprintf("ct-%d", n))
	return v
}

func (f *folder) write(rel, data string) {
	f.t.Helper()
	if err := f.root.MkdirAll(filepath.Dir(filepath.FromSlash(rel)), 0o700); err != nil {
		f.t.Fatal(err)
	}
	if err := f.root.WriteFile(filepath.FromSlash(rel), []byte(data), 0o600); err != nil {
		f.t.Fatal(err)
	}
}

// record opens (creating) the journal, binds it to task and restores vs.
func (f *folder) record(task string, vs ...sidecar.Version) *journal.Journal {
	f.t.Helper()
	ctx := context.Background()
	j, err := journal.Open(ctx, f.journalPath())
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { j.Close() })
	if err := j.BindTask(ctx, task); err != nil {
		f.t.Fatal(err)
	}
	rows := make([]journal.Version, 0, len(vs))
	for _, v := range vs {
		rows = append(rows, v.Record)
	}
	if _, err := j.RestoreVersions(ctx, rows); err != nil {
		f.t.Fatal(err)
	}
	return j
}

func kinds(fs []Finding) []string {
	out := []string{}
	for _, f := range fs {
		out = append(out, f.Kind+" "+f.Path)
	}
	slices.Sort(out)
	return out
}

type keysGone map[string]bool

func (k keysGone) KeyExists(_ context.Context, ttag string) (bool, error) { return !k[ttag], nil }

// TestCheck: each way folder, record and manifest disagree is a finding of
// its kind, repairable or not as the package says; what --repair can do
// it does, after which the folder checks clean, and what it cannot it
// leaves (the finding stays).
func TestCheck(t *testing.T) {
	cases := []struct {
		name  string
		setup func(f *folder)
		keys  KeyChecker
		// want: findings before repair ("kind path"); left: after repair.
		want, left []string
		notes      []string
		// after checks the folder once repaired.
		after func(t *testing.T, f *folder)
	}{
		{name: "clean", setup: func(f *folder) {
			f.record("task-a", f.save(1), f.save(2))
		}},
		{name: "no journal, no versions", setup: func(f *folder) {}},
		{name: "journal missing", setup: func(f *folder) {
			f.save(1)
			f.save(2)
		}, want: []string{"journal-missing manifest.journal.sqlite"}, after: recordHolds(1, 2)},
		{name: "journal empty", setup: func(f *folder) {
			f.save(1)
			f.record("")
		}, want: []string{"journal-empty manifest.journal.sqlite"}, after: recordHolds(1)},
		{name: "journal older than the folder", setup: func(f *folder) {
			f.record("task-a", f.save(1))
			f.save(2)
			f.save(3)
		}, want: []string{"unrecorded results/d.v2.bin", "unrecorded results/d.v3.bin"}, after: recordHolds(1, 2, 3)},
		{name: "journal damaged", setup: func(f *folder) {
			f.save(1)
			f.record("task-a", f.save(2)).Close()
			damage(f.t, f.journalPath())
		}, want: []string{"journal-damaged manifest.journal.sqlite"}, after: func(t *testing.T, f *folder) {
			recordHolds(1, 2)(t, f)
			aside, _ := filepath.Glob(f.journalPath() + ".damaged-*")
			if len(aside) == 0 {
				t.Fatal("the damaged journal was not kept")
			}
		}},
		{name: "another task's journal", setup: func(f *folder) {
			f.record("task-b", f.save(1))
		}, want: []string{"other-task manifest.journal.sqlite"}, left: []string{"other-task manifest.journal.sqlite"}},
		{name: "another task's version", setup: func(f *folder) {
			v := version(2)
			v.Task = "task-b"
			f.record("task-a", f.save(1))
			if err := sidecar.Write(f.root, v, false); err != nil {
				f.t.Fatal(err)
			}
			f.write(v.Record.Path, "ct-2")
		}, want: []string{"other-task results/d.v2.json"}, left: []string{"other-task results/d.v2.json"}},
		{name: "recorded file missing", setup: func(f *folder) {
			f.record("task-a", f.save(1), f.save(2))
			os.Remove(filepath.Join(f.dir, "results", "d.v2.bin"))
			os.Remove(filepath.Join(f.dir, "results", "d.v2.json"))
		}, want: []string{"version-missing results/d.v2.bin"}, left: []string{"version-missing results/d.v2.bin"}},
		{name: "recorded file changed", setup: func(f *folder) {
			f.record("task-a", f.save(1))
			f.write("results/d.v1.bin", "other bytes")
		}, want: []string{"version-changed results/d.v1.bin"}, left: []string{"version-changed results/d.v1.bin"}},
		{name: "unknown version file", setup: func(f *folder) {
			f.record("task-a", f.save(1))
			f.write("results/d.v7.bin", "stray")
		}, want: []string{"unknown-file results/d.v7.bin"}, left: []string{"unknown-file results/d.v7.bin"}},
		{name: "temporary files", setup: func(f *folder) {
			f.record("task-a", f.save(1))
			f.write("results/.pdmcp-save-0123456789abcdef01234567.tmp", "half")
			f.write("results/.pdmcp-sidecar-0123456789abcdef01234567.tmp", "half")
		}, want: []string{"temporary results/.pdmcp-save-0123456789abcdef01234567.tmp",
			"temporary results/.pdmcp-sidecar-0123456789abcdef01234567.tmp"},
			after: func(t *testing.T, f *folder) {
				if left, _ := filepath.Glob(filepath.Join(f.dir, "results", "*.tmp")); len(left) != 0 {
					t.Fatalf("left: %v", left)
				}
			}},
		{name: "sidecar without its file", setup: func(f *folder) {
			f.record("task-a", f.save(1))
			if err := sidecar.Write(f.root, version(2), false); err != nil {
				f.t.Fatal(err)
			}
		}, want: []string{"sidecar-leftover results/d.v2.json"}},
		{name: "a save between placement and commit", setup: func(f *folder) {
			j := f.record("task-a", f.save(1))
			ctx := context.Background()
			key := journal.SaveKey{Caller: "alice", Destination: "d", IdempotencyKey: "k2"}
			if _, err := j.Reserve(ctx, key, version(2).Record.SHA256); err != nil {
				f.t.Fatal(err)
			}
			enc := &journal.EncryptedPayload{IV: []byte("iv"), Ciphertext: []byte("ct-2"), TTag: "t-d-0123456789"}
			if _, err := j.Place(ctx, key, enc, 0, 0, func(n int) string { return fmt.Sprintf("results/d.v%d.bin", n) }); err != nil {
				f.t.Fatal(err)
			}
			f.save(2)
		}, notes: []string{"save-unfinished results/d.v2.bin"}},
		{name: "hand-off open past its window", setup: func(f *folder) {
			j := f.record("task-a", f.save(1))
			if _, _, err := j.AddHandOff(context.Background(), journal.HandOff{Step: "review", TTag: "t-d-0123456789",
				SystemID: 1, PrincipalID: "p", EndTime: at, Batch: "b"}); err != nil {
				f.t.Fatal(err)
			}
		}, want: []string{"handoff-overdue manifest.journal.sqlite"}, left: []string{"handoff-overdue manifest.journal.sqlite"}},
		{name: "key gone", keys: keysGone{"t-d-0123456789": true}, setup: func(f *folder) {
			f.record("task-a", f.save(1))
		}, want: []string{"key-gone results/d.v1.bin"}, left: []string{"key-gone results/d.v1.bin"}},
		{name: "key there", keys: keysGone{}, setup: func(f *folder) {
			f.record("task-a", f.save(1))
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			f := newFolder(t)
			c.setup(f)
			o := Options{ManifestPath: f.manifest, Keys: c.keys, Now: func() time.Time { return at.Add(time.Hour) }}
			rep, err := Run(ctx, o)
			if err != nil {
				t.Fatal(err)
			}
			if got := kinds(rep.Findings); !slices.Equal(got, sorted(c.want)) {
				t.Fatalf("findings %v, want %v\n%+v", got, c.want, rep.Findings)
			}
			if got := kinds(rep.Notes); !slices.Equal(got, sorted(c.notes)) {
				t.Fatalf("notes %v, want %v", got, c.notes)
			}
			if rep.OK != (len(c.want) == 0) {
				t.Fatalf("OK %v with findings %v", rep.OK, rep.Findings)
			}
			for _, fd := range rep.Findings {
				wantRepairable := !slices.Contains(c.left, fd.Kind+" "+fd.Path)
				if fd.Repairable != wantRepairable {
					t.Errorf("%s %s: repairable %v, want %v", fd.Kind, fd.Path, fd.Repairable, wantRepairable)
				}
				if strings.Contains(fd.Detail, "t-d-0123456789") || strings.Contains(fd.Detail, "AAAAAAAAAAAAAAAAAAAAAA==") {
					t.Errorf("%s names a key or an IV in full: %s", fd.Kind, fd.Detail)
				}
			}
			o.Repair = true
			rep, err = Run(ctx, o)
			if err != nil {
				t.Fatal(err)
			}
			if got := kinds(rep.Findings); !slices.Equal(got, sorted(c.left)) {
				t.Fatalf("after repair: findings %v, want %v\n%+v\nrepaired %+v", got, c.left, rep.Findings, rep.Repaired)
			}
			if len(c.want) > len(c.left) && len(rep.Repaired) == 0 {
				t.Fatal("repair did something but says nothing")
			}
			if c.after != nil {
				c.after(t, f)
			}
		})
	}
}

func sorted(s []string) []string {
	out := append([]string{}, s...)
	slices.Sort(out)
	return out
}

// recordHolds checks the journal holds exactly versions ns of d, bound to
// task-a, each as its sidecar says.
func recordHolds(ns ...int) func(t *testing.T, f *folder) {
	return func(t *testing.T, f *folder) {
		t.Helper()
		ctx := context.Background()
		j, err := journal.Open(ctx, f.journalPath())
		if err != nil {
			t.Fatal(err)
		}
		defer j.Close()
		if task, err := j.Task(ctx); err != nil || task != "task-a" {
			t.Fatalf("journal task %q %v", task, err)
		}
		vs, err := j.Versions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var got []int
		for _, v := range vs {
			want := version(v.Version).Record
			if v.Path != want.Path || v.IV != want.IV || v.TTag != want.TTag || v.CiphertextSHA256 != want.CiphertextSHA256 ||
				v.Caller != want.Caller || v.IdempotencyKey != want.IdempotencyKey {
				t.Errorf("version %d: %+v, want %+v", v.Version, v, want)
			}
			got = append(got, v.Version)
		}
		if !slices.Equal(got, ns) {
			t.Fatalf("record holds %v, want %v", got, ns)
		}
	}
}

// damage overwrites the journal's header, as a bad copy or a disk would.
func damage(t *testing.T, p string) {
	t.Helper()
	os.Remove(p + "-wal")
	os.Remove(p + "-shm")
	fh, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fh.WriteAt([]byte(strings.Repeat("garbage!", 16)), 0); err != nil {
		t.Fatal(err)
	}
	fh.Close()
}

// TestExplicitJournalMustExist: a --journal that names no file is an
// error naming it, not a missing journal (and nothing is created there).
func TestExplicitJournalMustExist(t *testing.T) {
	f := newFolder(t)
	f.save(1)
	p := filepath.Join(f.dir, "mistyped.sqlite")
	for _, repair := range []bool{false, true} {
		_, err := Run(context.Background(), Options{ManifestPath: f.manifest, JournalPath: p, Repair: repair})
		if !errors.Is(err, ErrNoJournal) || !strings.Contains(err.Error(), p) {
			t.Fatalf("repair=%v: %v", repair, err)
		}
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("repair=%v made %s", repair, p)
		}
	}
}

// TestRepairWaitsForASaveInProgress: while a save holds its
// cross-process lock, its temporary file is a save in progress (a note)
// to a check, and repair does nothing: it waits (bounded) and gives up
// with ErrLocksBusy, the journal still missing and the file there; once
// the lock is free the file is a stopped save's, and repair removes it
// and rebuilds the record.
func TestRepairWaitsForASaveInProgress(t *testing.T) {
	ctx := context.Background()
	f := newFolder(t)
	f.record("task-a", f.save(1))
	f.save(2)
	temp := "results/.pdmcp-save-a7b8c9d0e1f2a3b4c5d6e7f8.tmp"
	f.write(temp, "being written")
	if err := os.MkdirAll(f.journalPath()+".locks", 0o700); err != nil {
		t.Fatal(err)
	}
	l, err := filelock.Acquire(ctx, filepath.Join(f.journalPath()+".locks", "save-a7.lock"))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Run(ctx, Options{ManifestPath: f.manifest})
	if err != nil || !slices.Equal(kinds(rep.Findings), []string{"unrecorded results/d.v2.bin"}) ||
		!slices.Equal(kinds(rep.Notes), []string{"save-unfinished " + temp}) {
		t.Fatalf("check with the save's lock held: %+v %v", rep, err)
	}
	o := Options{ManifestPath: f.manifest, Repair: true, LockWait: 300 * time.Millisecond}
	if _, err := Run(ctx, o); !errors.Is(err, ErrLocksBusy) {
		t.Fatalf("repair with a save's lock held: %v", err)
	}
	if _, err := os.Stat(filepath.Join(f.dir, filepath.FromSlash(temp))); err != nil {
		t.Fatalf("repair touched the save's file while it held its lock: %v", err)
	}
	recordHolds(1)(t, f)
	l.Release()
	rep, err = Run(ctx, Options{ManifestPath: f.manifest})
	if err != nil || !slices.Equal(kinds(rep.Findings), []string{"temporary " + temp, "unrecorded results/d.v2.bin"}) {
		t.Fatalf("check once the lock is free: %+v %v", rep, err)
	}
	o.LockWait = time.Minute
	if rep, err = Run(ctx, o); err != nil || !rep.OK {
		t.Fatalf("repair once the lock is free: %+v %v", rep, err)
	}
	if _, err := os.Stat(filepath.Join(f.dir, filepath.FromSlash(temp))); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the stopped save's file is still there: %v", err)
	}
	recordHolds(1, 2)(t, f)
}
