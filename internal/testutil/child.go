package testutil

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Child is the test binary started again as a helper process: it runs no
// test, and the variables in env (which the package's TestMain reads) say
// what it does. The test writes to Stdin and reads Stdout line by line;
// Stderr is kept for the failure message. At cleanup its stdin is closed
// and it is killed if it still runs.
type Child struct {
	Cmd    *exec.Cmd
	Stdin  io.WriteCloser
	Stdout *bufio.Reader
	Stderr *LogBuffer
}

// StartChild starts the helper with env added to this process's
// environment.
func StartChild(t testing.TB, env ...string) *Child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c := &Child{Cmd: cmd, Stdin: in, Stdout: bufio.NewReader(out), Stderr: &LogBuffer{}}
	cmd.Stderr = c.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = in.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return c
}

// Line reads the helper's next line of output, without its newline.
func (c *Child) Line(t testing.TB) string {
	t.Helper()
	s, err := c.Stdout.ReadString('\n')
	if err != nil {
		t.Fatalf("helper said nothing more (%v); stderr: %s", err, c.Stderr)
	}
	return strings.TrimSuffix(s, "\n")
}

// Wait closes the helper's stdin and waits for it to end, failing the
// test unless it ends well.
func (c *Child) Wait(t testing.TB) {
	t.Helper()
	_ = c.Stdin.Close()
	if err := c.Cmd.Wait(); err != nil {
		t.Fatalf("helper: %v; stderr: %s", err, c.Stderr)
	}
}
