package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// twoProcessEnv names the file a child process of
// TestChainAcrossTwoProcesses writes its lines to.
const twoProcessEnv = "PDMCP_AUDIT_TWO_PROCESS_FILE"

// TestChainAcrossTwoProcesses: two processes appending tool-call lines to
// one file at once keep one chain between them, and a line appended by a
// writer outside the Log is chained from by the next line.
func TestChainAcrossTwoProcesses(t *testing.T) {
	const n = 300
	if path := os.Getenv(twoProcessEnv); path != "" {
		writeLines(t, path, "child", n)
		return
	}
	path := writeChained(t, 1, Options{})
	before := len(fileLines(t, path))
	child := exec.Command(os.Args[0], "-test.run=^TestChainAcrossTwoProcesses$", "-test.count=1")
	child.Env = append(os.Environ(), twoProcessEnv+"="+path)
	out := &strings.Builder{}
	child.Stdout, child.Stderr = out, out
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	writeLines(t, path, "parent", n)
	if err := child.Wait(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	rep := verify(t, VerifyOptions{}, path)
	wantWhole(t, rep)
	if rep.Files[0].Lines != before+2*n {
		t.Fatalf("%d lines, want %d", rep.Files[0].Lines, before+2*n)
	}
	lines := fileLines(t, path)
	if strings.Count(strings.Join(lines, ""), `"runId":"child"`) != n {
		t.Fatal("the child's lines are not all in the file")
	}

	l, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.WriteToolCall(readLine()); err != nil {
		t.Fatal(err)
	}
	foreign := `{"event":"shutdown","runId":"elsewhere"}`
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(foreign + "\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := l.WriteToolCall(readLine()); err != nil {
		t.Fatal(err)
	}
	lines = fileLines(t, path)
	sum := sha256.Sum256([]byte(foreign))
	if last := lines[len(lines)-1]; !strings.HasSuffix(last, `"prev":"`+hex.EncodeToString(sum[:])+`"}`+"\n") {
		t.Fatalf("the line after another writer's %q does not chain from it: %s", foreign, last)
	}
}

// writeLines writes n tool-call lines of run to path through a Log of its
// own.
func writeLines(t *testing.T, path, run string, n int) {
	t.Helper()
	l, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	line := readLine()
	line.RunID = run
	for i := range n {
		line.LatencyMs = int64(i)
		if err := l.WriteToolCall(line); err != nil {
			t.Fatal(fmt.Errorf("line %d: %w", i, err))
		}
	}
}
