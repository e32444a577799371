package journal

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"
)

// TestLocalCallerAdoptsLegacyRows: saves journaled over stdio before saves
// were keyed by user carry caller "". After the upgrade the first local
// caller to retry one with the same text adopts it, with its record row,
// so nothing saved or half-saved is lost; a legacy row with other text
// refuses no one; and once adopted a row is that user's alone.
func TestLocalCallerAdoptsLegacyRows(t *testing.T) {
	ctx := context.Background()
	j, _ := openTemp(t)
	legacy := func(idem string) SaveKey { return SaveKey{Caller: "", Destination: "summary", IdempotencyKey: idem} }
	as := func(user, idem string) SaveKey {
		return SaveKey{Caller: LocalCaller(user), Destination: "summary", IdempotencyKey: idem}
	}
	// committed: a legacy save finished into the record as version 1.
	if _, err := j.Reserve(ctx, legacy("committed"), sum("text")); err != nil {
		t.Fatal(err)
	}
	payload := &EncryptedPayload{IV: bytes.Repeat([]byte{1}, 16), Ciphertext: []byte("ct"), TTag: "tag", ActingAs: "agent"}
	if _, err := j.Place(ctx, legacy("committed"), payload, 0, 0, resultPath); err != nil {
		t.Fatal(err)
	}
	v := Version{Version: 1, Path: resultPath(1), IV: "AQEBAQEBAQEBAQEBAQEBAQ==", SHA256: sum("text"), Size: 4,
		SavedAt: time.Now().UTC().Truncate(time.Second), ActingAs: "agent"}
	if _, err := j.CommitVersion(ctx, legacy("committed"), v, DocumentBase{}); err != nil {
		t.Fatal(err)
	}
	// half: a legacy save stopped after its encrypt.
	if _, err := j.Reserve(ctx, legacy("half"), sum("text")); err != nil {
		t.Fatal(err)
	}
	if _, err := j.RecordEncrypted(ctx, legacy("half"), *payload); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name      string
		key       SaveKey
		text      string
		wantNew   bool
		wantState SaveState
	}{
		{"a retry of a committed legacy save replays it", as("alice", "committed"), "text", false, SaveCommitted},
		{"once adopted, another user's same key is that user's own", as("bob", "committed"), "text", true, SaveReserved},
		{"a retry of a half-done legacy save finishes it", as("alice", "half"), "text", false, SaveEncrypted},
		{"a legacy key with other text refuses no one", as("carol", "half"), "other", true, SaveReserved},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := j.Reserve(ctx, tc.key, sum(tc.text))
			if err != nil {
				t.Fatal(err)
			}
			if r.New != tc.wantNew || r.State != tc.wantState {
				t.Fatalf("Reserve: New=%v State=%s, want New=%v State=%s", r.New, r.State, tc.wantNew, tc.wantState)
			}
		})
	}
	// The adopted rows are no longer under "": no second user adopts them.
	if _, err := j.Get(ctx, legacy("committed")); !errors.Is(err, ErrNotFound) {
		t.Errorf("the legacy committed row after adoption: %v, want ErrNotFound", err)
	}
	vs, err := j.Versions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 1 || vs[0].Caller != LocalCaller("alice") {
		t.Errorf("the record after adoption: %+v, want version 1 under %q", vs, LocalCaller("alice"))
	}
	// An HTTP caller never adopts a legacy row.
	if _, err := j.Reserve(ctx, legacy("http"), sum("text")); err != nil {
		t.Fatal(err)
	}
	r, err := j.Reserve(ctx, SaveKey{Caller: "https://idp.example|sub", Destination: "summary", IdempotencyKey: "http"}, sum("text"))
	if err != nil || !r.New {
		t.Errorf("an HTTP caller's key beside a legacy row: %+v, %v; want a new row", r, err)
	}
}
