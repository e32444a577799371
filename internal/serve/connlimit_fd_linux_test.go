package serve_test

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/pdmcp/pdmcp/internal/testutil"
)

// TestHTTPStalledConnectionsCannotTakeEveryDescriptor is issue 31's
// scenario 1 as it was measured: another process on the machine opens
// more stalled connections than the server has descriptors to spare (here
// 600 against 150: connections that shake hands and send `POST /mcp`
// headers announcing 200,000 bytes and then nothing, and connections that
// never shake hands). The server keeps its connections under its cap, so
// it never runs out: alice's calls go through on her kept connection and
// on a fresh one, the token exchange and the Gateway calls behind them
// included, nothing is refused for lack of descriptors, and every stalled
// connection is closed by the server.
//
// The descriptor limit is this test process's own, lowered for the test
// (the stack runs in it); the attacker is started before that, so its
// own limit is the usual one.
func TestHTTPStalledConnectionsCannotTakeEveryDescriptor(t *testing.T) {
	hs := newHTTPStack(t, 8, withHTTPConfig(`,"connections":{"max":64,"signedIn":16,"signedInPerUser":4,"headerTimeoutSeconds":10},"bodyTimeoutSeconds":2`))
	tok := hs.token(t, "alice", "pw-a")
	kept, dials := hs.countingClient()
	hs.readAurora(t, kept, tok, "alice before the attack")
	fresh, _ := hs.countingClient()

	attacker := testutil.StartChild(t, fmt.Sprintf("%s=%s %s stalled-body:300 stalled-handshake:300", attackerEnv, hs.url, hs.caFile))

	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	spare := uint64(len(fds) + 150)
	if spare >= old.Cur {
		t.Fatalf("the descriptor limit %d is already under %d", old.Cur, spare)
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: spare, Max: old.Max}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old) })

	fmt.Fprintln(attacker.Stdin, "go")
	var opened, failed int
	if _, err := fmt.Sscanf(attacker.Line(t), "opened %d failed %d", &opened, &failed); err != nil {
		t.Fatal(err)
	}
	if opened < 300 {
		t.Errorf("the attacker held only %d connections (%d failed): the attack did not happen as meant", opened, failed)
	}
	hs.readAurora(t, kept, tok, "alice on her kept connection during the attack")
	hs.readAurora(t, fresh, tok, "alice on a fresh connection during the attack")
	if n := dials.Load(); n != 1 {
		t.Errorf("alice's kept client opened %d connections", n)
	}

	fmt.Fprintln(attacker.Stdin, "wait")
	var closed, all int
	if _, err := fmt.Sscanf(attacker.Line(t), "closed %d of %d", &closed, &all); err != nil {
		t.Fatal(err)
	}
	if closed != all {
		t.Errorf("the server closed %d of the %d stalled connections", closed, all)
	}
	attacker.Wait(t)
	hs.readAurora(t, kept, tok, "alice after the attack")
	if log := hs.stderr.String(); strings.Contains(log, "too many open files") {
		t.Errorf("the server ran out of descriptors:\n%s", lastBytes(log, 2000))
	}
}

func lastBytes(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
