package journal

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// TestRetryOfARestoredVersionReplays: after a journal is rebuilt from the
// sidecars (RestoreVersions, no save rows), a retry of a version's save,
// with its caller, key and text, gets the version's receipt back as a
// committed save instead of a new save; other text under the key is a
// conflict; another caller's key of the same name is a new save.
func TestRetryOfARestoredVersionReplays(t *testing.T) {
	ctx := context.Background()
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	restored := []Version{
		{Destination: "d", Version: 2, Path: "results/d.v2.bin", IV: "aXY=", TTag: "t1", SHA256: sum("summary"), Size: 7,
			SavedAt: at, Caller: "alice", ActingAs: "agent", IdempotencyKey: "k1"},
		{DocumentID: "doc", FragmentID: "s1", Version: 3, DocumentVersion: 4, BaseIV: "YmFzZQ==", Path: "documents/doc/s1.v3.bin",
			IV: "aXY=", TTag: "t2", SHA256: sum("section"), Size: 7, SavedAt: at, Caller: "alice", ActingAs: "agent", IdempotencyKey: "k2"},
		// Saved over stdio before saves were keyed by user.
		{Destination: "d", Version: 4, Path: "results/d.v4.bin", IV: "aXY=", TTag: "t1", SHA256: sum("legacy"), Size: 6,
			SavedAt: at, Caller: "", ActingAs: "agent", IdempotencyKey: "k3"},
	}
	cases := []struct {
		name    string
		key     SaveID
		text    string
		want    *Receipt // nil: a new save
		wantErr error
	}{
		{"result retried", SaveKey{Caller: "alice", Destination: "d", IdempotencyKey: "k1"}, "summary",
			&Receipt{Destination: "d", Version: 2, Path: "results/d.v2.bin", SHA256: sum("summary"), Size: 7, SavedAt: at}, nil},
		{"section retried", FragmentKey{Caller: "alice", DocumentID: "doc", FragmentID: "s1", IdempotencyKey: "k2"}, "section",
			&Receipt{DocumentID: "doc", FragmentID: "s1", Version: 3, DocumentVersion: 4, Path: "documents/doc/s1.v3.bin",
				SHA256: sum("section"), Size: 7, SavedAt: at}, nil},
		{"other text", SaveKey{Caller: "alice", Destination: "d", IdempotencyKey: "k1"}, "other", nil, ErrIdempotencyConflict},
		{"another caller", SaveKey{Caller: "bob", Destination: "d", IdempotencyKey: "k1"}, "summary", nil, nil},
		{"legacy version retried over stdio", SaveKey{Caller: LocalCaller("alice"), Destination: "d", IdempotencyKey: "k3"}, "legacy",
			&Receipt{Destination: "d", Version: 4, Path: "results/d.v4.bin", SHA256: sum("legacy"), Size: 6, SavedAt: at}, nil},
		{"legacy version, other text over stdio", SaveKey{Caller: LocalCaller("alice"), Destination: "d", IdempotencyKey: "k3"}, "other",
			nil, nil},
		{"another destination", SaveKey{Caller: "alice", Destination: "e", IdempotencyKey: "k1"}, "summary", nil, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			j, _ := openTemp(t)
			if n, err := j.RestoreVersions(ctx, restored); err != nil || n != len(restored) {
				t.Fatalf("restore: %d %v", n, err)
			}
			r, err := j.Reserve(ctx, c.key, sum(c.text))
			if !errors.Is(err, c.wantErr) {
				t.Fatalf("reserve: %v, want %v", err, c.wantErr)
			}
			if c.wantErr != nil {
				return
			}
			if c.want == nil {
				if !r.New || r.State != SaveReserved {
					t.Fatalf("want a new save, got %+v", r)
				}
				return
			}
			if r.New || r.State != SaveCommitted || r.Receipt == nil || *r.Receipt != *c.want {
				t.Fatalf("want the restored version's receipt %+v, got %+v (receipt %+v)", *c.want, r, r.Receipt)
			}
			// A second retry reads the same row; nothing new in the record.
			again, err := j.Reserve(ctx, c.key, sum(c.text))
			if err != nil || again.State != SaveCommitted || *again.Receipt != *c.want {
				t.Fatalf("second retry: %+v %v", again, err)
			}
			vs, err := j.Versions(ctx)
			if err != nil || len(vs) != len(restored) {
				t.Fatalf("record after retries: %d rows, %v", len(vs), err)
			}
		})
	}
}

// TestRestoreSkipsAnUnfinishedSavesPlacement: a version file a save holds
// placed but has not committed is left for that save: restoring it would
// make its commit find the version taken.
func TestRestoreSkipsAnUnfinishedSavesPlacement(t *testing.T) {
	ctx := context.Background()
	j, _ := openTemp(t)
	key := SaveKey{Caller: "alice", Destination: "d", IdempotencyKey: "k"}
	encrypted(t, j, key, "x")
	r, err := j.Place(ctx, key, nil, 0, 0, resultPath)
	if err != nil {
		t.Fatal(err)
	}
	other := Version{Destination: "d", Version: 9, Path: "results/d.v9.bin", IV: "aXY=", SHA256: sum("y"), Size: 1,
		SavedAt: time.Now(), IdempotencyKey: "other"}
	placed := Version{Destination: "d", Version: r.Placement.Version, Path: r.Placement.Path, IV: "aXY=", SHA256: sum("x"),
		Size: 1, SavedAt: time.Now(), Caller: "alice", IdempotencyKey: "k"}
	n, err := j.RestoreVersions(ctx, []Version{placed, other})
	if err != nil || n != 1 {
		t.Fatalf("restore: %d %v, want 1 (the placed one skipped)", n, err)
	}
	paths, err := j.UnfinishedPlacements(ctx)
	if err != nil || !slices.Equal(paths, []string{r.Placement.Path}) {
		t.Fatalf("unfinished placements %v %v", paths, err)
	}
	c := commitPlaced(t, j, key, r, DocumentBase{})
	if c.State != SaveCommitted {
		t.Fatalf("the save's own commit: %+v", c)
	}
	if paths, _ := j.UnfinishedPlacements(ctx); len(paths) != 0 {
		t.Fatalf("after the commit: %v", paths)
	}
}
