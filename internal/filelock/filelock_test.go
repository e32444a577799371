package filelock

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/pdmcp/pdmcp/internal/testutil"
)

// helperEnv makes the test binary a helper process: its value is the mode,
// the lock file is helperPathEnv.
const (
	helperEnv     = "FILELOCK_TEST_HELPER"
	helperPathEnv = "FILELOCK_TEST_PATH"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		if err := helper(mode, os.Getenv(helperPathEnv)); err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// helper is one process of a test. "hold" takes the lock, says "held" and
// keeps it until its standard input ends. "wait" checks the lock is taken
// ("busy"), waits for it, and says what the state file beside it held when
// it got it. "count:N" waits for "go", then N times takes the lock and
// adds one to a counter file, written in two steps so an unguarded writer
// loses counts.
func helper(mode, path string) error {
	ctx := context.Background()
	switch {
	case mode == "hold":
		l, err := Acquire(ctx, path)
		if err != nil {
			return err
		}
		fmt.Println("held")
		_, _ = io.Copy(io.Discard, os.Stdin)
		return l.Release()
	case mode == "wait":
		if _, err := TryAcquire(path); !errors.Is(err, ErrLocked) {
			return fmt.Errorf("the lock was not taken: %v", err)
		}
		fmt.Println("busy")
		l, err := Acquire(ctx, path)
		if err != nil {
			return err
		}
		state, err := os.ReadFile(path + ".state")
		if err != nil {
			return err
		}
		fmt.Println("acquired", string(state))
		return l.Release()
	case strings.HasPrefix(mode, "count:"):
		n, err := strconv.Atoi(strings.TrimPrefix(mode, "count:"))
		if err != nil {
			return err
		}
		if line, _ := bufio.NewReader(os.Stdin).ReadString('\n'); line != "go\n" {
			return fmt.Errorf("no go: %q", line)
		}
		counter := path + ".count"
		for range n {
			l, err := Acquire(ctx, path)
			if err != nil {
				return err
			}
			data, err := os.ReadFile(counter)
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
			v, _ := strconv.Atoi(string(data))
			f, err := os.OpenFile(counter, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
			if err != nil {
				return err
			}
			if _, err := f.WriteString(strconv.Itoa(v + 1)); err != nil {
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			if err := l.Release(); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("unknown mode %q", mode)
}

// startChild starts the test binary as a helper in mode on the lock at
// path.
func startChild(t *testing.T, mode, path string) *testutil.Child {
	t.Helper()
	return testutil.StartChild(t, helperEnv+"="+mode, helperPathEnv+"="+path)
}

// TestAcquireWaitsForAnotherProcess: while this process holds the lock,
// another process finds it taken and waits; it gets the lock only after
// this one released it, which the state file written just before the
// release shows.
func TestAcquireWaitsForAnotherProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "manifest.json.lock")
	l := tryHold(t, path)
	if err := os.WriteFile(path+".state", []byte("holding"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := startChild(t, "wait", path)
	if got := c.Line(t); got != "busy" {
		t.Fatalf("helper: %q, want busy", got)
	}
	if err := os.WriteFile(path+".state", []byte("released"), 0o600); err != nil {
		t.Fatal(err)
	}
	release(t, l)
	if got := c.Line(t); got != "acquired released" {
		t.Fatalf("helper: %q, want it to get the lock only after the release", got)
	}
	c.Wait(t)
}

// TestLockExcludesOtherProcesses: three processes each add one to a counter
// file 200 times, each addition under the lock; not one is lost.
func TestLockExcludesOtherProcesses(t *testing.T) {
	const procs, rounds = 3, 200
	path := filepath.Join(t.TempDir(), "counter.lock")
	var children []*testutil.Child
	for range procs {
		children = append(children, startChild(t, "count:"+strconv.Itoa(rounds), path))
	}
	for _, c := range children {
		if _, err := io.WriteString(c.Stdin, "go\n"); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range children {
		c.Wait(t)
	}
	data, err := os.ReadFile(path + ".count")
	if err != nil {
		t.Fatal(err)
	}
	if got := string(data); got != strconv.Itoa(procs*rounds) {
		t.Fatalf("counter %s, want %d: additions were lost", got, procs*rounds)
	}
}

// TestLockReleasedWhenHolderKilled: a holder killed outright leaves a lock
// file that stops no one.
func TestLockReleasedWhenHolderKilled(t *testing.T) {
	path := filepath.Join(t.TempDir(), "manifest.json.lock")
	c := startChild(t, "hold", path)
	if got := c.Line(t); got != "held" {
		t.Fatalf("helper: %q", got)
	}
	if _, err := TryAcquire(path); !errors.Is(err, ErrLocked) {
		t.Fatalf("while another process holds it: %v, want ErrLocked", err)
	}
	if err := c.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = c.Cmd.Wait()
	l, err := Acquire(context.Background(), path)
	if err != nil {
		t.Fatalf("after the holder was killed: %v", err)
	}
	release(t, l)
}

// TestTwoLocksInOneProcess: the lock excludes a second holder in the same
// process too, and a released lock can be taken again.
func TestTwoLocksInOneProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	l := tryHold(t, path)
	if _, err := TryAcquire(path); !errors.Is(err, ErrLocked) {
		t.Fatalf("second TryAcquire: %v, want ErrLocked", err)
	}
	release(t, l)
	if err := l.Release(); err != nil {
		t.Fatalf("a second Release: %v", err)
	}
	again := tryHold(t, path)
	release(t, again)
}

// TestAcquireEndsWithContext: a wait whose context ends returns the
// context's error, and the lock it would have got is not kept: the next
// Acquire gets it once the holder releases.
func TestAcquireEndsWithContext(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	l := tryHold(t, path)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Acquire(ctx, path); !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire with an ended context: %v, want context.Canceled", err)
	}
	release(t, l)
	next, err := Acquire(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	release(t, next)
}

// TestLockFileMustBeRegular: a lock path that is a folder is refused.
func TestLockFileMustBeRegular(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := TryAcquire(path); err == nil {
		t.Fatal("a folder was taken as a lock file")
	}
}

// tryHold takes the lock at path without waiting, failing the test if it
// cannot.
func tryHold(t *testing.T, path string) *Lock {
	t.Helper()
	l, err := TryAcquire(path)
	if err != nil {
		t.Fatalf("TryAcquire(%s): %v", path, err)
	}
	return l
}

// release releases l, failing the test on an error.
func release(t *testing.T, l *Lock) {
	t.Helper()
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
}
