package journal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/internal/testutil"
)

func TestFileEncryption(t *testing.T) {
	ctx := context.Background()
	j, path := openTemp(t)
	root := "/srv/task"
	key := FileKey{Caller: "", Root: root, RelPath: "report.docx", ContentSHA256: sum("report")}
	minted := MintedKey{TTag: "new-key", LinkDigest: "0123456789ab", IV: bytes.Repeat([]byte{3}, 16), Ciphertext: []byte("sealed")}

	r, err := j.ReserveFile(ctx, key)
	if err != nil || !r.New || r.State != FileReserved || r.TTag != "" {
		t.Fatalf("first ReserveFile: %+v, %v", r, err)
	}
	if ok, err := j.KeyMintedHere(ctx, root, "new-key"); err != nil || ok {
		t.Fatalf("KeyMintedHere before the answer = %v, %v; want false", ok, err)
	}
	// A second reservation is not new: the caller finds the row as it is
	// (here still reserved, so the one that claims the send sends it).
	if r, err = j.ReserveFile(ctx, key); err != nil || r.New || r.State != FileReserved {
		t.Fatalf("second ReserveFile: %+v, %v", r, err)
	}
	if _, err := j.MarkFileDone(ctx, key); !errors.Is(err, ErrOutOfOrder) {
		t.Errorf("done before minted: err = %v, want ErrOutOfOrder", err)
	}
	if r, err = j.RecordMinted(ctx, key, minted); err != nil || r.State != FileMinted || r.TTag != "new-key" ||
		r.CiphertextSHA256 != sum("sealed") || r.MintedAt.IsZero() {
		t.Fatalf("RecordMinted: %+v, %v", r, err)
	}
	if _, err := j.MarkAnswerLost(ctx, key); !errors.Is(err, ErrOutOfOrder) {
		t.Errorf("answer lost after minted: err = %v, want ErrOutOfOrder", err)
	}
	j.Close()

	// After a restart the envelope can be written again from the row.
	j = openAt(t, path)
	r, err = j.ReserveFile(ctx, key)
	if err != nil || r.New || r.State != FileMinted || !bytes.Equal(r.Ciphertext, minted.Ciphertext) ||
		!bytes.Equal(r.IV, minted.IV) || r.LinkDigest != minted.LinkDigest {
		t.Fatalf("ReserveFile after restart: %+v, %v", r, err)
	}
	// A second answer never replaces the first key.
	other := minted
	other.TTag = "second-key"
	if r, err = j.RecordMinted(ctx, key, other); err != nil || r.TTag != "new-key" {
		t.Fatalf("second RecordMinted: %+v, %v; want the first key kept", r, err)
	}
	if r, err = j.MarkFileDone(ctx, key); err != nil || r.State != FileDone {
		t.Fatalf("MarkFileDone: %+v, %v", r, err)
	}
	if r, err = j.MarkFileDone(ctx, key); err != nil || r.State != FileDone {
		t.Fatalf("MarkFileDone again: %+v, %v", r, err)
	}

	tests := []struct {
		root, ttag string
		want       bool
	}{
		{root, "new-key", true},
		{root, "second-key", false},
		{"/srv/other", "new-key", false},
		{root, "unknown", false},
	}
	for _, tc := range tests {
		if got, err := j.KeyMintedHere(ctx, tc.root, tc.ttag); err != nil || got != tc.want {
			t.Errorf("KeyMintedHere(%q, %q) = %v, %v; want %v", tc.root, tc.ttag, got, err, tc.want)
		}
	}
	f, err := j.MintedFile(ctx, root, "new-key")
	if err != nil || f.Key != key || f.Key.ContentSHA256 != sum("report") {
		t.Errorf("MintedFile: %+v, %v", f, err)
	}
	if _, err := j.MintedFile(ctx, root, "unknown"); !errors.Is(err, ErrNotFound) {
		t.Errorf("MintedFile of an unknown key: err = %v, want ErrNotFound", err)
	}
}

func TestFileAnswerLost(t *testing.T) {
	ctx := context.Background()
	j, key := reservedFile(t, "a")
	r, err := j.MarkAnswerLost(ctx, key)
	if err != nil || r.State != FileAnswerLost {
		t.Fatalf("MarkAnswerLost: %+v, %v", r, err)
	}
	if r, err = j.MarkAnswerLost(ctx, key); err != nil || r.State != FileAnswerLost {
		t.Fatalf("MarkAnswerLost again: %+v, %v", r, err)
	}
	// The same file again: the row says lost, so it is not encrypted again.
	if r, err = j.ReserveFile(ctx, key); err != nil || r.New || r.State != FileAnswerLost {
		t.Fatalf("ReserveFile after lost: %+v, %v", r, err)
	}
	// Nor claimed again: only a reserved row is sent.
	if claimed, r, err := j.ClaimSend(ctx, key); err != nil || claimed || r.State != FileAnswerLost {
		t.Fatalf("ClaimSend after lost: %v, %+v, %v", claimed, r, err)
	}
	// New content at the same path is a new row.
	if r, err = j.ReserveFile(ctx, FileKey{Root: "/srv/task", RelPath: "a.txt", ContentSHA256: sum("a2")}); err != nil || !r.New {
		t.Fatalf("ReserveFile of new content: %+v, %v", r, err)
	}
}

func TestFileCallersAreSeparate(t *testing.T) {
	ctx := context.Background()
	j, _ := openTemp(t)
	alice := FileKey{Caller: "alice", Root: "/srv/task", RelPath: "a.txt", ContentSHA256: sum("a")}
	bob := alice
	bob.Caller = "bob"
	for _, k := range []FileKey{alice, bob} {
		if r, err := j.ReserveFile(ctx, k); err != nil || !r.New {
			t.Fatalf("ReserveFile(%s): %+v, %v", k.Caller, r, err)
		}
		m := MintedKey{TTag: "key-" + k.Caller, LinkDigest: "abcdefabcdef", IV: []byte{1}, Ciphertext: []byte(k.Caller)}
		if _, err := j.RecordMinted(ctx, k, m); err != nil {
			t.Fatal(err)
		}
	}
	// Which keys were minted here is shared by every caller.
	for _, ttag := range []string{"key-alice", "key-bob"} {
		if ok, err := j.KeyMintedHere(ctx, "/srv/task", ttag); err != nil || !ok {
			t.Errorf("KeyMintedHere(%s) = %v, %v", ttag, ok, err)
		}
	}
	if r, _ := j.GetFile(ctx, bob); r.TTag != "key-bob" {
		t.Errorf("bob's row has key %q", r.TTag)
	}
}

func TestFileArgumentsChecked(t *testing.T) {
	ctx := context.Background()
	j, _ := openTemp(t)
	good := FileKey{Root: "/r", RelPath: "a", ContentSHA256: sum("a")}
	for _, k := range []FileKey{
		{RelPath: "a", ContentSHA256: sum("a")},
		{Root: "/r", ContentSHA256: sum("a")},
		{Root: "/r", RelPath: "a", ContentSHA256: "nothex"},
	} {
		if _, err := j.ReserveFile(ctx, k); !errors.Is(err, ErrInvalid) {
			t.Errorf("ReserveFile(%+v): err = %v, want ErrInvalid", k, err)
		}
	}
	if _, err := j.ReserveFile(ctx, good); err != nil {
		t.Fatal(err)
	}
	for _, m := range []MintedKey{
		{LinkDigest: "0123456789ab", IV: []byte{1}, Ciphertext: []byte{1}},
		{TTag: "t", LinkDigest: "0123456789abcdef", IV: []byte{1}, Ciphertext: []byte{1}},
		{TTag: "t", LinkDigest: "0123456789ab", Ciphertext: []byte{1}},
	} {
		if _, err := j.RecordMinted(ctx, good, m); !errors.Is(err, ErrInvalid) {
			t.Errorf("RecordMinted(%+v): err = %v, want ErrInvalid", m, err)
		}
	}
	if _, err := j.GetFile(ctx, FileKey{Root: "/r", RelPath: "b", ContentSHA256: sum("b")}); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetFile of an unknown file: err = %v, want ErrNotFound", err)
	}
}

func TestHandOffs(t *testing.T) {
	ctx := context.Background()
	j, path := openTemp(t)
	end := time.Date(2026, 10, 24, 12, 30, 0, 0, time.UTC)
	h := HandOff{Step: "referral", Caller: "patient", TTag: "problems-key", DocumentID: "ccd-1", FragmentID: "problems",
		SystemID: 1234567890, PrincipalID: "1004", EndTime: end}

	first, inserted, err := j.AddHandOff(ctx, h)
	if err != nil || !inserted || first.ID == 0 || first.State != HandOffOpen || !first.EndTime.Equal(end) || first.CreatedAt.IsZero() {
		t.Fatalf("AddHandOff: %+v, %v, %v", first, inserted, err)
	}
	again, inserted, err := j.AddHandOff(ctx, h)
	if err != nil || inserted || again.ID != first.ID {
		t.Fatalf("AddHandOff again: %+v, inserted=%v, %v; want the first row", again, inserted, err)
	}
	h2 := h
	h2.TTag, h2.FragmentID = "history-key", "history"
	second, inserted, err := j.AddHandOff(ctx, h2)
	if err != nil || !inserted {
		t.Fatal(err)
	}
	other := h
	other.Step = "other-step"
	if _, _, err := j.AddHandOff(ctx, other); err != nil {
		t.Fatal(err)
	}
	j.Close()

	j = openAt(t, path)
	open, err := j.OpenHandOffs(ctx, "referral")
	if err != nil || len(open) != 2 || open[0].ID != first.ID || open[1].ID != second.ID {
		t.Fatalf("OpenHandOffs: %+v, %v", open, err)
	}
	if open[0].SystemID != h.SystemID || open[0].PrincipalID != h.PrincipalID || open[0].DocumentID != "ccd-1" ||
		open[0].FragmentID != "problems" || open[0].Caller != "patient" {
		t.Errorf("stored row differs: %+v", open[0])
	}
	closed, err := j.CloseHandOff(ctx, first.ID)
	if err != nil || closed.State != HandOffClosed || closed.ClosedAt.IsZero() {
		t.Fatalf("CloseHandOff: %+v, %v", closed, err)
	}
	if again, err := j.CloseHandOff(ctx, first.ID); err != nil || !again.ClosedAt.Equal(closed.ClosedAt) {
		t.Errorf("CloseHandOff again: %+v, %v; want it unchanged", again, err)
	}
	if open, err = j.OpenHandOffs(ctx, "referral"); err != nil || len(open) != 1 || open[0].ID != second.ID {
		t.Fatalf("OpenHandOffs after close: %+v, %v", open, err)
	}
	// A closed entry does not block handing the same key again.
	reopened, inserted, err := j.AddHandOff(ctx, h)
	if err != nil || !inserted || reopened.ID == first.ID {
		t.Fatalf("AddHandOff after close: %+v, %v, %v", reopened, inserted, err)
	}
	if _, err := j.CloseHandOff(ctx, 9999); !errors.Is(err, ErrNotFound) {
		t.Errorf("CloseHandOff of an unknown id: err = %v, want ErrNotFound", err)
	}
	if _, _, err := j.AddHandOff(ctx, HandOff{Step: "s", TTag: "t", PrincipalID: "p"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("AddHandOff without an end time: err = %v, want ErrInvalid", err)
	}
}

func TestHandOffBatchesAndVerification(t *testing.T) {
	ctx := context.Background()
	j, _ := openTemp(t)
	end := time.Date(2026, 10, 24, 12, 30, 0, 0, time.UTC)
	base := HandOff{Step: "referral", Caller: "alice", DocumentID: "ccd-1", SystemID: 7, PrincipalID: "1004",
		EndTime: end, Batch: "b1", GrantID: "g1"}
	var ids []int64
	for _, k := range []string{"k1", "k2"} {
		h := base
		h.TTag = k
		row, _, err := j.AddHandOff(ctx, h)
		if err != nil || row.Batch != "b1" || row.GrantID != "g1" || !row.VerifiedAt.IsZero() {
			t.Fatalf("AddHandOff: %+v, %v", row, err)
		}
		ids = append(ids, row.ID)
	}
	other := base
	other.TTag, other.Caller, other.GrantID = "k1", "bob", "g2"
	if _, _, err := j.AddHandOff(ctx, other); err != nil {
		t.Fatal(err)
	}
	if err := j.VerifyHandOffs(ctx, ids[:1]); err != nil {
		t.Fatal(err)
	}
	rows, err := j.StepHandOffs(ctx, "referral", "alice")
	if err != nil || len(rows) != 2 || rows[0].VerifiedAt.IsZero() || !rows[1].VerifiedAt.IsZero() {
		t.Fatalf("StepHandOffs: %+v, %v", rows, err)
	}
	if rows, err := j.OpenHandOffsOfGrant(ctx, "g1"); err != nil || len(rows) != 2 {
		t.Fatalf("OpenHandOffsOfGrant(g1): %+v, %v", rows, err)
	}
	if rows, err := j.OpenHandOffsTo(ctx, "k1", 7, "1004"); err != nil || len(rows) != 2 {
		t.Fatalf("OpenHandOffsTo(k1): %+v, %v", rows, err)
	}
	if _, err := j.CloseHandOff(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	// Verifying a closed entry does not change it.
	if err := j.VerifyHandOffs(ctx, ids); err != nil {
		t.Fatal(err)
	}
	rows, _ = j.StepHandOffs(ctx, "referral", "alice")
	if rows[0].State != HandOffClosed || rows[1].VerifiedAt.IsZero() {
		t.Fatalf("after close and verify: %+v", rows)
	}
	if rows, _ := j.OpenHandOffsOfGrant(ctx, "g1"); len(rows) != 1 || rows[0].ID != ids[1] {
		t.Fatalf("open of g1 after close: %+v", rows)
	}
}

func TestHandOffSchemaUpgrade(t *testing.T) {
	// A file written at schema 1 (before batches) opens, keeps its rows,
	// and reads them with empty batch and grant.
	ctx := context.Background()
	path := journalAtSchema(t, 1, `INSERT INTO handoffs (step, caller, ttag, system_id, principal_id, end_time, state, created_at)
VALUES ('s', '', 'k', 1, 'p', '2026-10-24T12:30:00Z', 'open', '2026-10-24T12:00:00Z')`)
	j := openAt(t, path)
	rows, err := j.OpenHandOffs(ctx, "s")
	if err != nil || len(rows) != 1 || rows[0].Batch != "" || rows[0].GrantID != "" || !rows[0].VerifiedAt.IsZero() {
		t.Fatalf("after upgrade: %+v, %v", rows, err)
	}
}

// A refused encrypt made no key: its reservation is released and the same
// file may be reserved anew. Nothing past a reservation is ever released.
func TestReleaseFile(t *testing.T) {
	ctx := context.Background()
	j, _ := openTemp(t)
	key := FileKey{Root: "/srv/task", RelPath: "r.txt", ContentSHA256: sum("r")}
	if err := j.ReleaseFile(ctx, key); !errors.Is(err, ErrNotFound) {
		t.Fatalf("release of no row: %v", err)
	}
	if _, err := j.ReserveFile(ctx, key); err != nil {
		t.Fatal(err)
	}
	if err := j.ReleaseFile(ctx, key); err != nil {
		t.Fatalf("ReleaseFile: %v", err)
	}
	if r, err := j.ReserveFile(ctx, key); err != nil || !r.New {
		t.Fatalf("ReserveFile after release: %+v, %v", r, err)
	}
	// The call that claimed the send releases after an outright refusal.
	if claimed, _, err := j.ClaimSend(ctx, key); err != nil || !claimed {
		t.Fatalf("ClaimSend: %v, %v", claimed, err)
	}
	if err := j.ReleaseFile(ctx, key); err != nil {
		t.Fatalf("release after a claimed send: %v", err)
	}
	// A row with a key is never released.
	if _, err := j.ReserveFile(ctx, key); err != nil {
		t.Fatal(err)
	}
	m := MintedKey{TTag: "k", LinkDigest: "aaaaaaaaaaaa", IV: []byte{1}, Ciphertext: []byte{1}}
	if _, err := j.RecordMinted(ctx, key, m); err != nil {
		t.Fatal(err)
	}
	if err := j.ReleaseFile(ctx, key); !errors.Is(err, ErrOutOfOrder) {
		t.Fatalf("release of a minted row: %v, want ErrOutOfOrder", err)
	}
}

// Exactly one call claims a reserved row's send; the claimer's answer is
// recorded; later claims find the row as it is.
func TestClaimSend(t *testing.T) {
	ctx := context.Background()
	j, key := reservedFile(t, "c")
	results := make(chan bool, 8)
	for range 8 {
		go func() {
			claimed, _, err := j.ClaimSend(ctx, key)
			results <- err == nil && claimed
		}()
	}
	won := 0
	for range 8 {
		if <-results {
			won++
		}
	}
	if won != 1 {
		t.Fatalf("%d calls claimed the send, want 1", won)
	}
	m := MintedKey{TTag: "k", LinkDigest: "aaaaaaaaaaaa", IV: []byte{1}, Ciphertext: []byte{1}}
	if r, err := j.RecordMinted(ctx, key, m); err != nil || r.State != FileMinted || r.TTag != "k" {
		t.Fatalf("RecordMinted by the claimer: %+v, %v", r, err)
	}
	if claimed, r, err := j.ClaimSend(ctx, key); err != nil || claimed || r.State != FileMinted {
		t.Fatalf("ClaimSend of a minted row: %v, %+v, %v", claimed, r, err)
	}
}

// A ciphertext kept outside the database: the row stores its hash only.
func TestRecordMintedWithoutTheBlob(t *testing.T) {
	ctx := context.Background()
	j, key := reservedFile(t, "e")
	m := MintedKey{TTag: "k", LinkDigest: "aaaaaaaaaaaa", IV: []byte{1}, CiphertextSHA256: "not-hex"}
	if _, err := j.RecordMinted(ctx, key, m); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a bad hash: %v", err)
	}
	m.CiphertextSHA256 = sum("sealed elsewhere")
	r, err := j.RecordMinted(ctx, key, m)
	if err != nil || r.State != FileMinted || r.CiphertextSHA256 != sum("sealed elsewhere") {
		t.Fatalf("RecordMinted: %+v, %v", r, err)
	}
	if r, err = j.GetFile(ctx, key); err != nil || r.Ciphertext != nil || r.CiphertextSHA256 != sum("sealed elsewhere") {
		t.Fatalf("GetFile: %+v, %v", r, err)
	}
}

// releaseKey is the file row the release helper reserves and releases.
var releaseKey = FileKey{Root: "/srv/task", RelPath: "shared.txt", ContentSHA256: sum("shared")}

// runReleaseHelper is the second process: it reserves the row (finding the
// first process's, or making its own) and releases it, as encrypt_file does
// when it stops before sending. It prints the state it found.
func runReleaseHelper(path string) int {
	return asHelper(path, func(ctx context.Context, j *Journal) error {
		r, err := j.ReserveFile(ctx, releaseKey)
		if err != nil {
			return err
		}
		if err := j.ReleaseFile(ctx, releaseKey); err != nil {
			return err
		}
		fmt.Printf("found %s new %v\n", r.State, r.New)
		return nil
	})
}

func releaseInAnotherProcess(t *testing.T, path string) string {
	t.Helper()
	c := testutil.StartChild(t, helperReleaseEnv+"="+path)
	out := c.Line(t)
	c.Wait(t)
	return out
}

// TestReleaseFileAcrossProcesses: another process's release never removes
// a row this one reserved or claimed, so the claimer records its key and
// no second encrypt (no second key) follows; its own reservation it does
// release.
func TestReleaseFileAcrossProcesses(t *testing.T) {
	ctx := context.Background()
	j, path := openTemp(t)

	// Reserved here, not yet claimed: the other process leaves it.
	if _, err := j.ReserveFile(ctx, releaseKey); err != nil {
		t.Fatal(err)
	}
	if got := releaseInAnotherProcess(t, path); got != "found reserved new false" {
		t.Fatalf("helper: %q", got)
	}
	// Claimed and sent here: the other process leaves it too, and the key
	// is recorded.
	if claimed, _, err := j.ClaimSend(ctx, releaseKey); err != nil || !claimed {
		t.Fatalf("ClaimSend after the other's release: %v, %v", claimed, err)
	}
	if got := releaseInAnotherProcess(t, path); got != "found answer-lost new false" {
		t.Fatalf("helper: %q", got)
	}
	m := MintedKey{TTag: "k1", LinkDigest: "aaaaaaaaaaaa", IV: []byte{1}, Ciphertext: []byte{1}}
	r, err := j.RecordMinted(ctx, releaseKey, m)
	if err != nil || r.State != FileMinted || r.TTag != "k1" {
		t.Fatalf("RecordMinted after the other process released: %+v, %v", r, err)
	}
	// A second encrypt of the same content finds the key: nothing to send.
	if r, err := j.ReserveFile(ctx, releaseKey); err != nil || r.New || r.State != FileMinted {
		t.Fatalf("ReserveFile after the key was recorded: %+v, %v", r, err)
	}

	// Its own reservation the other process does remove.
	j2, path2 := openTemp(t)
	if got := releaseInAnotherProcess(t, path2); got != "found reserved new true" {
		t.Fatalf("helper: %q", got)
	}
	if _, err := j2.GetFile(ctx, releaseKey); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the helper's own reservation was kept: %v", err)
	}
}

// TestReleaseFileOwners: within one process, two handles behave as two
// processes; a row written before the owner column (schema 2) is held by
// nobody until a call claims it.
func TestReleaseFileOwners(t *testing.T) {
	ctx := context.Background()
	old := FileKey{Root: "/srv/task", RelPath: "old.txt", ContentSHA256: sum("old")}
	path := journalAtSchema(t, 2, `INSERT INTO files (caller, root, rel_path, content_sha256, state, created_at, updated_at)
VALUES ('', ?, ?, ?, 'reserved', '2026-11-30T12:00:00Z', '2026-11-30T12:00:00Z')`, old.Root, old.RelPath, old.ContentSHA256)
	a := openAt(t, path)
	b := openAt(t, path)
	if err := a.ReleaseFile(ctx, old); err != nil {
		t.Fatal(err)
	}
	if r, err := a.GetFile(ctx, old); err != nil || r.State != FileReserved {
		t.Fatalf("a row of schema 2 was released by a handle that does not hold it: %+v, %v", r, err)
	}
	// b claims it, so b holds it; a's release leaves it, b's removes it.
	if claimed, _, err := b.ClaimSend(ctx, old); err != nil || !claimed {
		t.Fatalf("claim: %v %v", claimed, err)
	}
	if err := a.ReleaseFile(ctx, old); err != nil {
		t.Fatal(err)
	}
	if r, err := a.GetFile(ctx, old); err != nil || r.State != FileAnswerLost {
		t.Fatalf("a released b's claimed row: %+v, %v", r, err)
	}
	if err := b.ReleaseFile(ctx, old); err != nil {
		t.Fatal(err)
	}
	if _, err := a.GetFile(ctx, old); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the claimer's release kept the row: %v", err)
	}
}

// reservedFile opens a fresh journal holding one reserved file row, for
// name.txt under /srv/task with the sha256 of name, and returns its key.
func reservedFile(t *testing.T, name string) (*Journal, FileKey) {
	t.Helper()
	j, _ := openTemp(t)
	key := FileKey{Root: "/srv/task", RelPath: name + ".txt", ContentSHA256: sum(name)}
	if _, err := j.ReserveFile(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	return j, key
}
