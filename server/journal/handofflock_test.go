package journal

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/internal/testutil"
)

// lockHelperEnv makes the test binary a child that takes the hand-off
// lock on lockKeyA, says "locked", and releases it when its stdin closes.
const lockHelperEnv = "PDMCP_JOURNAL_LOCK_HELPER"

var lockKeyA = LockKey{TTag: "k1", SystemID: 7, PrincipalID: "1004"}

func runLockHelper(path string) int {
	return asHelper(path, func(ctx context.Context, j *Journal) error {
		unlock, err := j.LockHandOffs(ctx, []LockKey{lockKeyA}, LockOptions{})
		if err != nil {
			return err
		}
		fmt.Println("locked")
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		unlock()
		return nil
	})
}

// startLockHolder starts a child process holding lockKeyA and returns it
// once it holds the lock, with the pipe that releases it when closed.
func startLockHolder(t *testing.T, path string) (*exec.Cmd, func()) {
	t.Helper()
	c := testutil.StartChild(t, lockHelperEnv+"="+path)
	if line := c.Line(t); line != "locked" {
		t.Fatalf("lock holder said %q: %s", line, c.Stderr)
	}
	return c.Cmd, func() { c.Stdin.Close() }
}

// TestHandOffLockAcrossProcesses: a (key, recipient) locked by another
// process is not taken while that process holds it; it is taken once the
// holder releases it, and at once when the holder is killed (-9) while
// holding it. A lock on another recipient is never blocked by it.
func TestHandOffLockAcrossProcesses(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "shared.journal.sqlite")
	j := openAt(t, path)

	for _, end := range []string{"release", "SIGKILL"} {
		t.Run(end, func(t *testing.T) {
			cmd, release := startLockHolder(t, path)
			// Another recipient on the same key is not held.
			other, err := j.LockHandOffs(ctx, []LockKey{{TTag: "k1", SystemID: 7, PrincipalID: "1005"}}, LockOptions{Wait: time.Second})
			if err != nil {
				t.Fatalf("another recipient's lock: %v", err)
			}
			other()
			// Waiting on the held one: the parent is told it waits, and then
			// the child ends its hold.
			waiting := make(chan struct{})
			got := make(chan error, 1)
			var unlock func()
			go func() {
				var err error
				unlock, err = j.LockHandOffs(ctx, []LockKey{lockKeyA, {TTag: "k2", SystemID: 7, PrincipalID: "1004"}},
					LockOptions{OnWait: func() { close(waiting) }})
				got <- err
			}()
			select {
			case <-waiting:
			case err := <-got:
				t.Fatalf("took a lock another process holds: %v", err)
			}
			if end == "release" {
				release()
			} else {
				if err := cmd.Process.Kill(); err != nil {
					t.Fatal(err)
				}
				// On Linux the killed child stays a zombie until reaped,
				// which must count as ended (a host may reap late); where
				// that cannot be told, reap it first.
				if runtime.GOOS != "linux" {
					_ = cmd.Wait()
				}
			}
			if err := <-got; err != nil {
				t.Fatalf("after the holder's %s: %v", end, err)
			}
			_ = cmd.Wait()
			release()
			// All or none: the child's key and the second are both ours.
			var holders int
			if err := j.db.QueryRowContext(ctx, `SELECT COUNT(DISTINCT holder) FROM handoff_locks`).Scan(&holders); err != nil || holders != 1 {
				t.Fatalf("holders while locked: %d, %v", holders, err)
			}
			unlock()
			var n int
			if err := j.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM handoff_locks`).Scan(&n); err != nil || n != 0 {
				t.Fatalf("lock rows after release: %d, %v", n, err)
			}
		})
	}
}

// TestHandOffLockInProcess: two goroutines of one process are kept apart
// as two processes are, and a wait that runs out is ErrLockBusy.
func TestHandOffLockInProcess(t *testing.T) {
	ctx := context.Background()
	j, _ := openTemp(t)
	unlock, err := j.LockHandOffs(ctx, []LockKey{lockKeyA}, LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waited := false
	_, err = j.LockHandOffs(ctx, []LockKey{lockKeyA}, LockOptions{Wait: 50 * time.Millisecond, OnWait: func() { waited = true }})
	if !errors.Is(err, ErrLockBusy) || !waited {
		t.Fatalf("second lock: %v (waited %v), want ErrLockBusy", err, waited)
	}
	unlock()
	unlock() // twice is harmless
	again, err := j.LockHandOffs(ctx, []LockKey{lockKeyA}, LockOptions{Wait: time.Second})
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	again()
}

// TestOpensJournalOfSchema2: a journal written before close_reason and
// handoff_locks existed (schema 2, as main wrote it) opens, keeps its
// rows, and gains both.
func TestOpensJournalOfSchema2(t *testing.T) {
	ctx := context.Background()
	path := journalAtSchema(t, 2, `INSERT INTO handoffs (step, caller, ttag, system_id, principal_id, end_time, state,
created_at, batch, grant_id) VALUES ('referral', '', 'k1', 7, '1004', '2026-12-01T12:00:00Z', 'open', '2026-12-01T11:00:00Z', 'b', 'g')`)

	j := openAt(t, path)
	rows, err := j.OpenHandOffs(ctx, "referral")
	if err != nil || len(rows) != 1 || rows[0].CloseReason != "" || rows[0].From != "" {
		t.Fatalf("old row: %+v, %v", rows, err)
	}
	closed, err := j.CloseHandOffAs(ctx, rows[0].ID, ClosedLeftAlone)
	if err != nil || closed.CloseReason != ClosedLeftAlone || closed.State != HandOffClosed {
		t.Fatalf("close: %+v, %v", closed, err)
	}
	if _, err := j.CloseHandOffAs(ctx, rows[0].ID, "whatever"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("an unknown reason: %v", err)
	}
	unlock, err := j.LockHandOffs(ctx, []LockKey{lockKeyA}, LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	unlock()
	j.Close()
	// Opening it again changes nothing.
	j = openAt(t, path)
	if got, err := j.GetHandOff(ctx, rows[0].ID); err != nil || got.CloseReason != ClosedLeftAlone {
		t.Fatalf("reopened: %+v, %v", got, err)
	}
}

// TestHandOffRecordsItsUser: the user an entry was granted as is kept with
// its row, in a journal of the old shape too (revoking it later must not
// depend on the manifest's step still naming that user).
func TestHandOffRecordsItsUser(t *testing.T) {
	ctx := context.Background()
	j := openAt(t, journalAtSchema(t, 2, ""))
	h := HandOff{Step: "referral", TTag: "k1", SystemID: 7, PrincipalID: "1004", EndTime: time.Now().Add(time.Hour),
		Batch: "b", GrantID: "g", From: "t.patient"}
	row, inserted, err := j.AddHandOff(ctx, h)
	if err != nil || !inserted || row.From != "t.patient" {
		t.Fatalf("add: %+v, %v, %v", row, inserted, err)
	}
	rows, err := j.OpenHandOffs(ctx, "referral")
	if err != nil || len(rows) != 1 || rows[0].From != "t.patient" {
		t.Fatalf("read back: %+v, %v", rows, err)
	}
}

// TestHandOffRecordsItsMaker: a row keeps the server that made it, also in
// a journal of schema 2 (the column is added on open), and MakerGone tells
// a running maker from one whose process has ended.
func TestHandOffRecordsItsMaker(t *testing.T) {
	ctx := context.Background()
	j := openAt(t, journalAtSchema(t, 2, ""))
	me, err := NewMaker()
	if err != nil {
		t.Fatal(err)
	}
	h := HandOff{Step: "referral", TTag: "k1", SystemID: 7, PrincipalID: "1004", EndTime: time.Now().Add(time.Hour),
		Batch: "b", GrantID: "g", From: "t.patient", Maker: me}
	if row, _, err := j.AddHandOff(ctx, h); err != nil || row.Maker != me {
		t.Fatalf("add: %+v, %v", row, err)
	}
	if rows, err := j.OpenHandOffsOfGrant(ctx, "g"); err != nil || len(rows) != 1 || rows[0].Maker != me {
		t.Fatalf("read back: %+v, %v", rows, err)
	}

	// A process that has ended and been reaped.
	ended := exec.Command(os.Args[0], "-test.run=^$")
	if err := ended.Run(); err != nil {
		t.Fatal(err)
	}
	// One that runs until the test ends.
	running := exec.Command("sleep", "60")
	if err := running.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { running.Process.Kill(); running.Wait() })
	other, err := NewMaker()
	if err != nil || other == me {
		t.Fatalf("a second maker in this process: %q, %v", other, err)
	}
	for _, tc := range []struct {
		maker string
		gone  bool
	}{
		{me, false},
		{other, false}, // another server of this process
		{strconv.Itoa(running.Process.Pid) + ":0011223344556677", false},
		{strconv.Itoa(ended.Process.Pid) + ":0011223344556677", true},
		{"", true},                   // a row from before makers were recorded
		{"not-a-maker", true},        // unreadable
		{"0:0011223344556677", true}, // no process has id 0
	} {
		if got := MakerGone(tc.maker); got != tc.gone {
			t.Errorf("MakerGone(%q) = %v, want %v", tc.maker, got, tc.gone)
		}
	}
}
