package server

import (
	"regexp"
	"strings"
	"testing"

	"github.com/pdmcp/pdmcp/internal/testutil"
)

// passedOn are the refuseCode arguments that are not a constant: the code
// a catalogue refusal (files.Error) already carries as a refusal.Code.
var passedOn = map[string]bool{"fe.Code": true}

var (
	refuseCallRE = regexp.MustCompile(`\brefuseCode\(([^,]+),`)
	constantRE   = regexp.MustCompile(`^refusal\.[A-Z][A-Za-z]*$`)
)

// TestRefusalsNameCatalogueConstants: refuseCode takes a refusal.Code,
// and every call in this package's source names one of the catalogue's
// constants (each of which has an entry: refusal's
// TestCatalogueHasEveryCode) or passes on a code already typed: no string
// is turned into a code here, so no refusal falls back to Status's 500.
func TestRefusalsNameCatalogueConstants(t *testing.T) {
	constants := 0
	for _, f := range testutil.GoSources(t, ".") {
		for i, line := range strings.Split(f.Text, "\n") {
			if strings.HasPrefix(line, "func refuseCode(") {
				continue
			}
			for _, m := range refuseCallRE.FindAllStringSubmatch(line, -1) {
				switch arg := strings.TrimSpace(m[1]); {
				case constantRE.MatchString(arg):
					constants++
				case !passedOn[arg]:
					t.Errorf("%s:%d refuses with %s: name a constant of package refusal", f.Path, i+1, arg)
				}
			}
		}
	}
	if constants < 40 {
		t.Fatalf("found %d refusals naming a constant, expected at least 40: has the pattern changed?", constants)
	}
}
