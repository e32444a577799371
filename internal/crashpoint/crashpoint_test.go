package crashpoint

import (
	"regexp"
	"testing"

	"github.com/pdmcp/pdmcp/internal/testutil"
)

// TestAllListsEveryConstant parses this package's source: every Point
// constant is in All once, and has the "<operation>:<step>" form, so a
// point added here cannot escape the crash suite, which iterates All.
func TestAllListsEveryConstant(t *testing.T) {
	form := regexp.MustCompile(`^[a-z_]+:[a-z-]+$`)
	var declared []Point
	for _, s := range testutil.StringConsts(t, "crashpoint.go", "Point") {
		if !form.MatchString(s) {
			t.Errorf("%q: want <operation>:<step>", s)
		}
		declared = append(declared, Point(s))
	}
	all := All()
	if len(declared) < 16 || len(all) != len(declared) {
		t.Fatalf("%d constants declared, All has %d", len(declared), len(all))
	}
	for _, p := range declared {
		if n := count(all, p); n != 1 {
			t.Errorf("%q is in All %d times", p, n)
		}
	}
}

func count(all []Point, p Point) int {
	n := 0
	for i := range all {
		if all[i] == p {
			n++
		}
	}
	return n
}
