package journal

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

func resultPath(n int) string { return fmt.Sprintf("results/d.v%d.bin", n) }

// encrypted reserves and records an encrypt for key.
func encrypted(t *testing.T, j *Journal, key SaveID, text string) {
	t.Helper()
	ctx := context.Background()
	if _, err := j.Reserve(ctx, key, sum(text)); err != nil {
		t.Fatal(err)
	}
	if _, err := j.RecordEncrypted(ctx, key, EncryptedPayload{IV: []byte(text + "-iv"), Ciphertext: []byte(text), TTag: "t", ActingAs: "agent"}); err != nil {
		t.Fatal(err)
	}
}

func commitPlaced(t *testing.T, j *Journal, key SaveID, r Reservation, doc DocumentBase) Reservation {
	t.Helper()
	v := Version{Version: r.Placement.Version, Path: r.Placement.Path, IV: "aXY=", SHA256: sum("x"), Size: 1,
		SavedAt: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), ActingAs: "agent"}
	c, err := j.CommitVersion(context.Background(), key, v, doc)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestPlaceAllocatesAboveEverything: a version goes above the manifest's
// floor, the record, every other save's placement, and a stray file's
// version; committing it puts one row in the record with the receipt.
func TestPlaceAllocatesAboveEverything(t *testing.T) {
	ctx := context.Background()
	j, _ := openTemp(t)
	a := SaveKey{Destination: "d", IdempotencyKey: "a"}
	b := SaveKey{Caller: "bob", Destination: "d", IdempotencyKey: "b"}
	encrypted(t, j, a, "a")
	encrypted(t, j, b, "b")
	ra, err := j.Place(ctx, a, nil, 3, 0, resultPath)
	if err != nil || ra.Placement.Version != 4 || ra.Placement.Path != "results/d.v4.bin" {
		t.Fatalf("above a floor of 3: %+v %v", ra.Placement, err)
	}
	rb, err := j.Place(ctx, b, nil, 3, 0, resultPath)
	if err != nil || rb.Placement.Version != 5 {
		t.Fatalf("above another save's placement: %+v %v", rb.Placement, err)
	}
	if rb, err = j.Place(ctx, b, nil, 3, 7, resultPath); err != nil || rb.Placement.Version != 8 {
		t.Fatalf("above a stray at 7: %+v %v", rb.Placement, err)
	}
	c := commitPlaced(t, j, b, rb, DocumentBase{})
	if c.State != SaveCommitted || c.Receipt.Version != 8 || c.Receipt.Destination != "d" {
		t.Fatalf("commit: %+v", c.Receipt)
	}
	// Committing again is the first receipt, and no second row.
	again := commitPlaced(t, j, b, rb, DocumentBase{})
	if again.Receipt.SavedAt != c.Receipt.SavedAt {
		t.Fatal("a second commit changed the receipt")
	}
	vs, err := j.Versions(ctx)
	if err != nil || len(vs) != 1 || vs[0].Version != 8 || vs[0].Caller != "bob" || vs[0].ActingAs != "agent" || vs[0].IdempotencyKey != "b" {
		t.Fatalf("record: %+v %v", vs, err)
	}
	// The next placement is above the record.
	c2 := SaveKey{Destination: "d", IdempotencyKey: "c"}
	encrypted(t, j, c2, "c")
	if r, err := j.Place(ctx, c2, nil, 0, 0, resultPath); err != nil || r.Placement.Version != 9 {
		t.Fatalf("above the record: %+v %v", r.Placement, err)
	}
	// A commit that does not match the placement is refused.
	if _, err := j.CommitVersion(ctx, a, Version{Version: 5, Path: resultPath(5)}, DocumentBase{}); !errors.Is(err, ErrOutOfOrder) {
		t.Fatalf("commit of another version: %v", err)
	}
}

// TestCommitVersionRefusesATakenVersion: a row already at the version or
// the path (put there by hand) refuses the commit and changes nothing.
func TestCommitVersionRefusesATakenVersion(t *testing.T) {
	ctx := context.Background()
	j, _ := openTemp(t)
	a := SaveKey{Destination: "d", IdempotencyKey: "a"}
	encrypted(t, j, a, "a")
	r, err := j.Place(ctx, a, nil, 0, 0, resultPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.db.Exec(`INSERT INTO versions (kind, target, version, path, iv, sha256, size, saved_at, caller, acting_as, idempotency_key)
VALUES ('result', 'd', 1, 'results/d.v1.bin', 'x', 'y', 0, '2026-12-01T00:00:00Z', '', '', 'other')`); err != nil {
		t.Fatal(err)
	}
	v := Version{Version: 1, Path: r.Placement.Path, IV: "aXY=", SHA256: sum("a"), SavedAt: time.Now()}
	if _, err := j.CommitVersion(ctx, a, v, DocumentBase{}); !errors.Is(err, ErrVersionTaken) {
		t.Fatalf("commit at a taken version: %v", err)
	}
	if got, _ := j.Get(ctx, a); got.State != SavePlaced {
		t.Fatalf("the save moved to %s", got.State)
	}
}

// TestSectionChains: a section's versions chain from the manifest's IV;
// the document's version goes up by one per save, across sections; a
// section the operator protected again (a new IV) starts over from the
// manifest, its old chain history.
func TestSectionChains(t *testing.T) {
	ctx := context.Background()
	j, _ := openTemp(t)
	doc := DocumentBase{Version: 1, FragmentIVs: map[string]string{"A": "ivA", "B": "ivB"}}
	path := func(frag string) func(int) string {
		return func(n int) string { return fmt.Sprintf("documents/x/%s.v%d.bin", frag, n) }
	}
	save := func(frag, idem string, floor int, d DocumentBase) Receipt {
		t.Helper()
		k := FragmentKey{DocumentID: "x", FragmentID: frag, IdempotencyKey: idem}
		encrypted(t, j, k, frag+idem)
		r, err := j.Place(ctx, k, nil, floor, 0, path(frag))
		if err != nil {
			t.Fatal(err)
		}
		return *commitPlaced(t, j, k, r, d).Receipt
	}
	if rc := save("A", "1", 1, doc); rc.Version != 2 || rc.DocumentVersion != 2 {
		t.Fatalf("first: %+v", rc)
	}
	if rc := save("B", "1", 1, doc); rc.Version != 2 || rc.DocumentVersion != 3 {
		t.Fatalf("other section: %+v", rc)
	}
	if rc := save("A", "2", 1, doc); rc.Version != 3 || rc.DocumentVersion != 4 {
		t.Fatalf("second of A: %+v", rc)
	}
	heads, err := j.Heads(ctx, "x", doc.FragmentIVs)
	if err != nil || heads["A"].Version != 3 || heads["B"].Version != 2 || heads["A"].BaseIV != "ivA" {
		t.Fatalf("heads %+v %v", heads, err)
	}
	again := DocumentBase{Version: 5, FragmentIVs: map[string]string{"A": "new", "B": "ivB"}}
	heads, _ = j.Heads(ctx, "x", again.FragmentIVs)
	if _, ok := heads["A"]; ok || heads["B"].Version != 2 {
		t.Fatalf("after A was protected again: %+v", heads)
	}
	// Its next version is still above every one the record holds.
	if rc := save("A", "3", 1, again); rc.Version != 4 || rc.DocumentVersion != 6 {
		t.Fatalf("after protect again: %+v", rc)
	}
}

// TestOpensAJournalOfSchema2: a journal written by the release before the
// record opens, keeps its saves (a committed one replays its receipt), and
// gains the record.
func TestOpensAJournalOfSchema2(t *testing.T) {
	ctx := context.Background()
	path := journalAtSchema(t, 2, `INSERT INTO saves (kind, caller, target, idempotency_key, text_sha256, state, ttag, iv, ciphertext, placed_version, placed_path,
	receipt, created_at, updated_at)
VALUES ('result', '', 'd', 'old', '`+sum("old")+`', 'committed', 't', x'00', x'01', 1, 'results/d.v1.bin',
	'{"destination":"d","version":1,"path":"results/d.v1.bin","sha256":"`+sum("old")+`","size":3,"savedAt":"2026-11-30T00:00:00Z"}',
	'2026-11-30T00:00:00Z', '2026-11-30T00:00:00Z')`)
	j := openAt(t, path)
	r, err := j.Reserve(ctx, SaveKey{Destination: "d", IdempotencyKey: "old"}, sum("old"))
	if err != nil || r.State != SaveCommitted || r.Receipt.Version != 1 || r.Encrypted.ActingAs != "" {
		t.Fatalf("old save: %+v %v", r, err)
	}
	k := SaveKey{Destination: "d", IdempotencyKey: "new"}
	encrypted(t, j, k, "new")
	// The old save's placement counts: the manifest of that release lists
	// version 1 (its floor), and the journal knows it too.
	if p, err := j.Place(ctx, k, nil, 0, 0, resultPath); err != nil || p.Placement.Version != 2 {
		t.Fatalf("place after an old save: %+v %v", p.Placement, err)
	}
}

// TestPlaceConcurrent: many goroutines on many handles place and commit at
// once; every version is taken once, 1..n.
func TestPlaceConcurrent(t *testing.T) {
	ctx := context.Background()
	j, path := openTemp(t)
	const n = 12
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		h := j
		if i%2 == 1 {
			h = openAt(t, path)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := SaveKey{Caller: fmt.Sprint(i), Destination: "d", IdempotencyKey: "k"}
			if _, err := h.Reserve(ctx, k, sum("t")); err != nil {
				errs <- err
				return
			}
			// The answer and the placement in one transaction.
			r, err := h.Place(ctx, k, &EncryptedPayload{IV: []byte{1}, Ciphertext: []byte{2}, TTag: "t"}, 0, 0, resultPath)
			if err != nil {
				errs <- err
				return
			}
			_, err = h.CommitVersion(ctx, k, Version{Version: r.Placement.Version, Path: r.Placement.Path, IV: "x", SHA256: sum("t"),
				SavedAt: time.Now()}, DocumentBase{})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	vs, err := j.Versions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for _, v := range vs {
		got = append(got, v.Version)
	}
	want := make([]int, n)
	for i := range want {
		want[i] = i + 1
	}
	if !slices.Equal(got, want) {
		t.Fatalf("versions %v, want %v", got, want)
	}
}
