package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runBounded runs a pdmcp that must end by itself, within a generous bound
// that only keeps a hang from stalling the suite; it returns the output and
// whether it succeeded.
func runBounded(t *testing.T, args ...string) (stdout, stderr string, ok bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), args...)
	cmd.Env = cleanEnv()
	var errb strings.Builder
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if ctx.Err() != nil {
		t.Fatalf("pdmcp %s did not end: it must fail at once", strings.Join(args, " "))
	}
	return string(out), errb.String(), err == nil
}

// TestSecondDevOnOneStateRefused is scenario 4 of issue 33: a second pdmcp
// dev (or dev gateway) on a running one's state folder fails at once naming
// the first's process id, and leaves the first working: its dev.json is
// untouched and pdmcp dev token still signs in against it.
func TestSecondDevOnOneStateRefused(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	first := startDev(t, state)
	// What a second stack used to rewrite.
	files := []string{"dev.json", "ports.json", filepath.Join("task-data", "grant.json"), "config.json"}
	before := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(state, f))
		if err != nil {
			t.Fatal(err)
		}
		before[f] = string(b)
	}
	want := fmt.Sprintf("process %d runs pdmcp dev on", first.cmd.Process.Pid)
	for _, args := range [][]string{{"dev", "--state", state}, {"dev", "gateway", "--state", state}} {
		_, stderr, ok := runBounded(t, args...)
		if ok || !strings.Contains(stderr, want) {
			t.Fatalf("pdmcp %s: ok=%v, stderr %s; want %q", strings.Join(args, " "), ok, stderr, want)
		}
	}
	for _, f := range files {
		if b, _ := os.ReadFile(filepath.Join(state, f)); string(b) != before[f] {
			t.Errorf("the refused run rewrote %s", f)
		}
	}
	if tok := strings.TrimSpace(run(t, "dev", "token", "alice", "--state", state)); tok == "" {
		t.Fatal("no token from the first pdmcp dev")
	}
}

// TestDevGatewayPortKeptOrRefused: pdmcp dev gateway fails on a --port that
// is taken, and on its remembered port when that is taken, naming the port;
// it never serves elsewhere. Once the port is free it serves there again.
func TestDevGatewayPortKeptOrRefused(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	n := busy.Addr().(*net.TCPAddr).Port
	state := t.TempDir()
	_, stderr, ok := runBounded(t, "dev", "gateway", "--state", state, "--port", fmt.Sprint(n))
	if ok || !strings.Contains(stderr, fmt.Sprintf("--port %d is taken", n)) {
		t.Fatalf("--port on a busy port: ok=%v %s", ok, stderr)
	}

	url, _, _, stop := startDevGateway(t, state)
	stop()
	port := url[strings.LastIndex(url, ":")+1:]
	held, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		t.Fatalf("take the stopped Gateway's port: %v", err)
	}
	_, stderr, ok = runBounded(t, "dev", "gateway", "--state", state)
	if ok || !strings.Contains(stderr, "the Gateway's port "+port+" (the last run's") {
		t.Fatalf("restart on a taken remembered port: ok=%v %s", ok, stderr)
	}
	held.Close()
	if again, _, _, _ := startDevGateway(t, state); again != url {
		t.Fatalf("restarted on %s, want %s", again, url)
	}
}
