package journal

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestBindTask: the first task binds the journal; the same task again
// passes; another is refused by name, by BindTask and by CheckTask, and
// the journal keeps its own.
func TestBindTask(t *testing.T) {
	ctx := context.Background()
	j, _ := openTemp(t)
	if got, err := j.Task(ctx); err != nil || got != "" {
		t.Fatalf("a new journal's task %q %v", got, err)
	}
	if err := j.CheckTask(ctx, "task-a"); err != nil {
		t.Fatalf("an unbound journal refused: %v", err)
	}
	if err := j.BindTask(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if got, _ := j.Task(ctx); got != "" {
		t.Fatalf("an empty task was bound: %q", got)
	}
	for range 2 {
		if err := j.BindTask(ctx, "task-a"); err != nil {
			t.Fatal(err)
		}
	}
	for _, refuse := range []func() error{
		func() error { return j.BindTask(ctx, "task-b") },
		func() error { return j.CheckTask(ctx, "task-b") },
	} {
		err := refuse()
		var te *TaskError
		if !errors.Is(err, ErrOtherTask) || !errors.As(err, &te) || te.Journal != "task-a" || te.Want != "task-b" {
			t.Fatalf("another task: %v", err)
		}
		if !strings.Contains(err.Error(), `"task-a"`) || !strings.Contains(err.Error(), `"task-b"`) {
			t.Fatalf("the refusal does not name both tasks: %v", err)
		}
	}
	if err := j.CheckTask(ctx, ""); err != nil {
		t.Fatalf("a manifest without a task refused: %v", err)
	}
	if got, _ := j.Task(ctx); got != "task-a" {
		t.Fatalf("task %q after the refusals", got)
	}
}

// TestMigrateKeepsEachVersionsKey: a schema 4 journal's versions take the
// t-Tag their save recorded, so a version saved before the upgrade keeps
// its own key too; the journal has no task until one is bound.
func TestMigrateKeepsEachVersionsKey(t *testing.T) {
	ctx := context.Background()
	// Literal values: the driver numbers each statement's parameters from
	// the first argument.
	at, x, y := nowText(), sum("x"), sum("y")
	path := journalAtSchema(t, 4, `
INSERT INTO saves (kind, caller, target, idempotency_key, text_sha256, state, ttag, iv, ciphertext, placed_version, placed_path,
	receipt, created_at, updated_at, acting_as)
VALUES ('result', '', 'd', 'k1', '`+x+`', 'committed', 't-old', x'01', x'02', 1, 'results/d.v1.bin', '{}', '`+at+`', '`+at+`', 'agent');
INSERT INTO versions (kind, target, version, path, iv, sha256, size, saved_at, caller, acting_as, idempotency_key)
VALUES ('result', 'd', 1, 'results/d.v1.bin', 'AQ==', '`+x+`', 1, '`+at+`', '', 'agent', 'k1'),
       ('result', 'd', 2, 'results/d.v2.bin', 'Ag==', '`+y+`', 1, '`+at+`', '', 'agent', 'no-save-row');`)
	j := openAt(t, path)
	vs, err := j.Versions(ctx)
	if err != nil || len(vs) != 2 {
		t.Fatalf("versions %+v %v", vs, err)
	}
	if vs[0].TTag != "t-old" || vs[1].TTag != "" || vs[0].CiphertextSHA256 != "" {
		t.Fatalf("migrated keys %q %q digest %q", vs[0].TTag, vs[1].TTag, vs[0].CiphertextSHA256)
	}
	if task, err := j.Task(ctx); err != nil || task != "" {
		t.Fatalf("migrated task %q %v", task, err)
	}
	if err := j.BindTask(ctx, "task-a"); err != nil {
		t.Fatalf("an old journal takes the manifest's task on first use: %v", err)
	}
}

// TestCommitKeepsTheSavesKey: the record's row names the key the save's
// ciphertext was made under, and its ciphertext digest.
func TestCommitKeepsTheSavesKey(t *testing.T) {
	ctx := context.Background()
	j, _ := openTemp(t)
	key := SaveKey{Destination: "d", IdempotencyKey: "a"}
	encrypted(t, j, key, "a")
	r, err := j.Place(ctx, key, nil, 0, 0, resultPath)
	if err != nil {
		t.Fatal(err)
	}
	v := Version{Version: r.Placement.Version, Path: r.Placement.Path, IV: "aXY=", SHA256: sum("x"), Size: 1,
		SavedAt: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), CiphertextSHA256: sum("ct")}
	if _, err := j.CommitVersion(ctx, key, v, DocumentBase{}); err != nil {
		t.Fatal(err)
	}
	vs, err := j.Versions(ctx)
	if err != nil || len(vs) != 1 || vs[0].TTag != "t" || vs[0].CiphertextSHA256 != sum("ct") {
		t.Fatalf("record %+v %v", vs, err)
	}
	if has, err := j.HasVersions(ctx); err != nil || !has {
		t.Fatalf("HasVersions %v %v", has, err)
	}
}

// TestRestoreVersions: restored rows are read back as saved; restoring
// them again adds nothing; a row at a version the record holds otherwise
// is refused and adds nothing.
func TestRestoreVersions(t *testing.T) {
	ctx := context.Background()
	j, _ := openTemp(t)
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	vs := []Version{
		{Destination: "d", Version: 1, Path: "results/d.v1.bin", IV: "AQ==", TTag: "t-1", SHA256: sum("a"), Size: 1, SavedAt: at,
			ActingAs: "agent", IdempotencyKey: "k1", CiphertextSHA256: sum("c1")},
		{DocumentID: "x", FragmentID: "A", Version: 2, DocumentVersion: 2, BaseIV: "ivA", Path: "documents/x/A.v2.bin", IV: "Ag==",
			TTag: "t-lab", SHA256: sum("b"), Size: 1, SavedAt: at, Caller: "bob", IdempotencyKey: "k2"},
	}
	if n, err := j.RestoreVersions(ctx, vs); err != nil || n != 2 {
		t.Fatalf("restore: %d %v", n, err)
	}
	got, err := j.Versions(ctx)
	if err != nil || len(got) != 2 {
		t.Fatalf("versions %+v %v", got, err)
	}
	// Versions lists results before sections.
	for i, want := range vs {
		if got[i] != want {
			t.Fatalf("restored row %d\n got %+v\nwant %+v", i, got[i], want)
		}
	}
	if n, err := j.RestoreVersions(ctx, vs); err != nil || n != 0 {
		t.Fatalf("restore again: %d %v", n, err)
	}
	other := vs[0]
	other.IV = "Aw=="
	if n, err := j.RestoreVersions(ctx, []Version{vs[1], other}); !errors.Is(err, ErrVersionTaken) || n != 0 {
		t.Fatalf("restore over another version: %d %v", n, err)
	}
	if n, err := j.RestoreVersions(ctx, []Version{{Destination: "d", Version: 3, Path: "results/d.v3.bin"}}); !errors.Is(err, ErrInvalid) || n != 0 {
		t.Fatalf("restore of a row without an IV: %d %v", n, err)
	}
}
