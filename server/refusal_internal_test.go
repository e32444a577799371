package server

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/testutil"
	"github.com/pdmcp/pdmcp/server/refusal"
)

// serverCodes is every code constant this package refuses with, by name,
// for the source checks below.
func serverCodes() map[string]string {
	return map[string]string{
		"CodeToolNotInGrant": CodeToolNotInGrant, "CodeUnexpectedArgument": CodeUnexpectedArgument,
		"CodeMissingArgument": CodeMissingArgument, "CodeInvalidArgument": CodeInvalidArgument,
		"CodeDocumentNotInGrant": CodeDocumentNotInGrant, "CodeUnknownDocument": CodeUnknownDocument,
		"CodeDocumentNotApproved": CodeDocumentNotApproved, "CodeDestinationNotGrant": CodeDestinationNotGrant,
		"CodeUnknownDestination": CodeUnknownDestination, "CodeDestinationHasNoKey": CodeDestinationHasNoKey,
		"CodeGrantExpired": CodeGrantExpired, "CodeResultTooLarge": CodeResultTooLarge, "CodeNotText": CodeNotText,
		"CodeIdempotencyConflict": CodeIdempotencyConflict, "CodeIntegrityMismatch": CodeIntegrityMismatch,
		"CodeCiphertextMissing": CodeCiphertextMissing, "CodeInternal": CodeInternal, "CodeAnswerLost": CodeAnswerLost,
		"CodeNotCompound": CodeNotCompound, "CodeUnknownFragment": CodeUnknownFragment,
		"CodeInvalidFragmentText": CodeInvalidFragmentText, "grant.CodeGrantTooWide": grant.CodeGrantTooWide,
	}
}

// TestServerCodesAreCatalogued: every code this package refuses with has
// a catalogue entry (refuseCode's status comes from it), and every code
// passed to refuseCode in the source is one of them.
func TestServerCodesAreCatalogued(t *testing.T) {
	codes := serverCodes()
	for name, code := range codes {
		if _, ok := refusal.Lookup(refusal.Code(code)); !ok {
			t.Errorf("%s (%s) is not in the refusal catalogue", name, code)
		}
	}
	for _, c := range refuseCalls(t) {
		if _, ok := codes[c.name]; !ok {
			t.Errorf("%s refuses with %s: add it to serverCodes and the catalogue", c.at, c.name)
		}
	}
}

type refuseCall struct {
	at, name string
}

var refuseCallRE = regexp.MustCompile(`\brefuseCode\(((?:grant\.)?Code[A-Za-z]+),`)

// refuseCalls finds every refuseCode call with a constant code
// in this package's source.
func refuseCalls(t *testing.T) []refuseCall {
	t.Helper()
	var out []refuseCall
	for _, f := range testutil.GoSources(t, ".") {
		for i, line := range strings.Split(f.Text, "\n") {
			for _, m := range refuseCallRE.FindAllStringSubmatch(line, -1) {
				out = append(out, refuseCall{at: f.Path + ":" + strconv.Itoa(i+1), name: m[1]})
			}
		}
	}
	if len(out) < 40 {
		t.Fatalf("found %d refuseCode calls, expected at least 40: has the pattern changed?", len(out))
	}
	return out
}
