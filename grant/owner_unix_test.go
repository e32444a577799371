//go:build unix

package grant

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/pdmcp/pdmcp/internal/testutil"
)

// TestRewriteKeepsModeAndOwner: a manifest the operator made readable to
// the serving account's group, and gave to that account, keeps its mode
// and its owner and group when a command rewrites it. A writer that may
// not give the replacement that owner is refused and changes nothing.
func TestRewriteKeepsModeAndOwner(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "manifest.json")
	if err := os.WriteFile(path, []byte("old\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := writeFileAtomic(path, []byte("new\n")); err != nil {
		t.Fatal(err)
	}
	testutil.WantMode(t, path, 0o640)

	// Another account's file (nobody's, 65534).
	const other = 65534
	if err := os.Chown(path, other, other); err != nil {
		if os.Geteuid() == 0 {
			t.Fatal(err)
		}
		// Not root: make the other owner's file another way is not
		// possible, so check the refusal on a file root gave away is
		// left to root runs, and check the owner kept is ours.
		st := stat(t, path)
		if int(st.Uid) != os.Geteuid() {
			t.Fatalf("owner %d, want %d", st.Uid, os.Geteuid())
		}
		return
	}
	if err := writeFileAtomic(path, []byte("newer\n")); err != nil {
		t.Fatal(err)
	}
	if st := stat(t, path); st.Uid != other || st.Gid != other {
		t.Fatalf("after a rewrite by root: uid %d gid %d, want %d %d", st.Uid, st.Gid, other, other)
	}
	testutil.WantMode(t, path, 0o640)
	if b, _ := os.ReadFile(path); !bytes.Equal(b, []byte("newer\n")) {
		t.Fatalf("content %q", b)
	}
}

// TestRewriteRefusedWhenOwnerCannotBeKept runs the writer as another
// account (a child process with its credentials set, which needs root to
// start): a file it cannot give the same owner is left as it was, and the
// error says whose it is.
func TestRewriteRefusedWhenOwnerCannotBeKept(t *testing.T) {
	if os.Getenv("PDMCP_TEST_REWRITE_CHILD") != "" {
		err := writeFileAtomic(os.Getenv("PDMCP_TEST_REWRITE_PATH"), []byte("changed\n"))
		if err == nil {
			os.Exit(3)
		}
		os.Stderr.WriteString(err.Error())
		os.Exit(0)
	}
	if os.Geteuid() != 0 {
		// Starting a process as another user needs root; CI runs as root.
		t.Log("not root: the refusal is checked where the tests run as root")
		return
	}
	// A folder the other account can reach and write (t.TempDir's parent
	// is private), holding a copy of this test binary it can run.
	dir, err := os.MkdirTemp("", "pdmcp-owner-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "manifest.json")
	if err := os.WriteFile(path, []byte("kept\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "grant.test")
	if err := os.WriteFile(exe, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestRewriteRefusedWhenOwnerCannotBeKept$")
	cmd.Env = append(os.Environ(), "PDMCP_TEST_REWRITE_CHILD=1", "PDMCP_TEST_REWRITE_PATH="+path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("the writer as another account: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "owned by uid 0") || !strings.Contains(stderr.String(), "nothing was changed") {
		t.Fatalf("the refusal: %q", stderr.String())
	}
	if b, _ := os.ReadFile(path); string(b) != "kept\n" {
		t.Fatalf("the file was changed: %q", b)
	}
	if st := stat(t, path); st.Uid != 0 {
		t.Fatalf("owner now %d", st.Uid)
	}
	if err := os.Remove(exe); err != nil {
		t.Fatal(err)
	}
	assertNoTempFiles(t, dir)
}

func stat(t *testing.T, path string) *syscall.Stat_t {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t)
}
