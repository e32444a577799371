//go:build unix

package operator

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestProtectLockExcludesASecondRun: while one protect holds the lock, a
// second is refused with a clear reason; once released, the next one runs.
func TestProtectLockExcludesASecondRun(t *testing.T) {
	p := filepath.Join(t.TempDir(), ProtectJournalName+".lock")
	unlock, err := lockProtect(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lockProtect(p); err == nil || !strings.Contains(err.Error(), "another pdmcp protect") {
		t.Fatalf("second lock: %v", err)
	}
	unlock()
	again, err := lockProtect(p)
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	again()
}
