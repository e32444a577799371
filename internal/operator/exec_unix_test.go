//go:build unix

package operator

import (
	"strings"
	"testing"
)

func TestLookPathUsesCleanPath(t *testing.T) {
	if _, err := lookPath("sh", []string{"PATH=/nonexistent"}); err == nil {
		t.Fatal("found sh on a PATH that does not hold it")
	}
	p, err := lookPath("sh", []string{"PATH=/nonexistent:/bin:/usr/bin"})
	if err != nil || !strings.HasSuffix(p, "/sh") {
		t.Fatalf("lookPath(sh) = %q, %v", p, err)
	}
}
