package audit

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// A rotation under load: writers keep writing while the file is renamed
// and reopened. Every line lands whole in one file or the other, none is
// lost, and the lines written after Reopen are in the new file.
func TestReopenAfterRenameKeepsEveryLineWhole(t *testing.T) {
	l, path := openTemp(t)
	const writers, each = 4, 200
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if err := l.Write(Shutdown{RunID: "w", Reason: "load", TS: fixed()}); err != nil {
					t.Errorf("writer %d line %d: %v", w, i, err)
					return
				}
			}
		}()
	}
	rotated := path + ".1"
	if err := os.Rename(path, rotated); err != nil {
		t.Fatal(err)
	}
	if err := l.Reopen(); err != nil {
		t.Fatalf("Reopen: %v", err)
	}
	wg.Wait()
	if err := l.Write(Shutdown{RunID: "after", Reason: "rotated", TS: fixed()}); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	old, cur := readLines(t, rotated), readLines(t, path)
	if got := len(old) + len(cur); got != writers*each+1 {
		t.Fatalf("%d lines in the two files, want %d", got, writers*each+1)
	}
	if last := cur[len(cur)-1]; last["runId"] != "after" {
		t.Fatalf("the line written after Reopen is not last in the new file: %v", last)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("the new file has mode %#o, want 0600", fi.Mode().Perm())
	}
}

// A path that cannot be reopened (someone put a world-readable file
// there) is refused and the old file is kept: no line is lost.
func TestReopenRefusedKeepsTheOpenFile(t *testing.T) {
	l, path := openTemp(t)
	rotated := path + ".1"
	if err := os.Rename(path, rotated); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	err := l.Reopen()
	if !errors.Is(err, ErrUnsafeMode) {
		t.Fatalf("Reopen onto a 0644 file: %v, want ErrUnsafeMode", err)
	}
	if err := l.Write(Shutdown{RunID: "kept", Reason: "x", TS: fixed()}); err != nil {
		t.Fatal(err)
	}
	if got := readLines(t, rotated); len(got) != 1 || got[0]["runId"] != "kept" {
		t.Fatalf("the line did not go to the file still open: %v", got)
	}
	if b, _ := os.ReadFile(path); len(b) != 0 {
		t.Fatalf("the refused file was written to: %q", b)
	}
}

// Reopen on a closed, nil or discarding Log.
func TestReopenClosedNilDiscard(t *testing.T) {
	var nilLog *Log
	if err := nilLog.Reopen(); err != nil {
		t.Fatalf("nil: %v", err)
	}
	if err := Discard().Reopen(); err != nil {
		t.Fatalf("discard: %v", err)
	}
	l, err := Open(filepath.Join(t.TempDir(), "a.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if err := l.Reopen(); !errors.Is(err, ErrClosed) {
		t.Fatalf("closed: %v, want ErrClosed", err)
	}
}
