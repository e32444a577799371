package refusal

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/internal/testutil"
)

// TestCatalogueHasEveryCode parses this package's source: every Code
// constant has exactly one entry, with a 4xx or 5xx status, a one-line
// hint and a page under docs/, so no code decided anywhere falls back to
// Status's 500.
func TestCatalogueHasEveryCode(t *testing.T) {
	var declared []Code
	for _, s := range testutil.StringConsts(t, "refusal.go", "Code") {
		declared = append(declared, Code(s))
	}
	cat := Catalogue()
	if len(declared) < 50 || len(cat) != len(declared) {
		t.Fatalf("%d codes declared, %d in the catalogue", len(declared), len(cat))
	}
	seen := map[Code]bool{}
	for _, e := range cat {
		if seen[e.Code] {
			t.Errorf("%s is in the catalogue twice", e.Code)
		}
		seen[e.Code] = true
		if e.Status < 400 || e.Status > 599 || e.Hint == "" || strings.Contains(e.Hint, "\n") || e.Doc == "" {
			t.Errorf("%s: status %d, hint %q, doc %q", e.Code, e.Status, e.Hint, e.Doc)
		}
	}
	for _, c := range declared {
		if !seen[c] {
			t.Errorf("%s is declared but not in the catalogue", c)
		}
	}
}

// TestStatusAndHint reads one code of each family, and the fallback for a
// code the catalogue lacks.
func TestStatusAndHint(t *testing.T) {
	for _, tc := range []struct {
		code   Code
		status int
	}{
		{OutsideRoot, 403}, {NotFound, 404}, {FileChanged, 409}, {FileTooLarge, 413}, {PathEmpty, 400},
		{ConfirmationUnavailable, 412}, {HandOffNotVerified, 502}, {RecipientHasEntry, 409}, {UnknownStep, 404},
		{"NO_SUCH_CODE", 500},
	} {
		if got := tc.code.Status(); got != tc.status {
			t.Errorf("%s.Status() = %d, want %d", tc.code, got, tc.status)
		}
		if r := New(tc.code, "x %d", 1); r.Status() != tc.status || r.Error() != string(tc.code)+": x 1" {
			t.Errorf("New(%s) = %v, status %d", tc.code, r, r.Status())
		}
	}
	if OutsideRoot.Hint() == "" || Code("NO_SUCH_CODE").Hint() != "" {
		t.Error("hints: a known code has none, or an unknown one has one")
	}
}

// TestConstructors: the shared refusals carry their code (so their
// status) and the sentence each site gave before they were shared.
func TestConstructors(t *testing.T) {
	at := time.Date(2026, 7, 1, 12, 0, 0, 0, time.FixedZone("x", 3600))
	for _, tc := range []struct {
		r      *Refusal
		code   Code
		status int
		detail string
	}{
		{GrantEnded(at, true), GrantExpired, 403,
			"this task's grant ended at 2026-07-01T11:00:00Z; nothing was sent; ask the operator for a new grant"},
		{GrantEnded(at, false), GrantExpired, 403, "this task's grant ended at 2026-07-01T11:00:00Z; ask the operator for a new grant"},
		{GrantEnded(time.Time{}, true), GrantExpired, 403, "this task's grant has ended; nothing was sent; ask the operator for a new grant"},
		{NoVerifiedCaller(), Internal, 500, "no verified caller on this request"},
	} {
		if tc.r.Code != tc.code || tc.r.Status() != tc.status || tc.r.Detail != tc.detail {
			t.Errorf("%+v (status %d), want %s %d %q", tc.r, tc.r.Status(), tc.code, tc.status, tc.detail)
		}
	}
}

// tableCode is a code in a row of a Markdown table.
var tableCode = regexp.MustCompile("`([A-Z][A-Z0-9_]+)`")

// docTables returns, for a page under docs/, the codes in its table rows,
// each with the row's cells.
func docTables(t *testing.T, page string) map[Code][]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", page))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[Code][]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "|") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		// The code is in the first cell, or the second of a numbered
		// table (docs/files.md's path checks).
		cell := cells[0]
		if _, err := strconv.Atoi(cell); err == nil && len(cells) > 1 {
			cell = cells[1]
		}
		for _, m := range tableCode.FindAllStringSubmatch(cell, -1) {
			rows[Code(m[1])] = cells
		}
	}
	return rows
}

// TestDocsTablesMatchTheCatalogue: every catalogued code has a row in the
// code table of its page, docs/operating.md's statuses are the
// catalogue's, and every adapter-layer row of docs/handoff.md's table names
// a catalogued code, so the docs and the code cannot drift.
func TestDocsTablesMatchTheCatalogue(t *testing.T) {
	pages := map[string]map[Code][]string{}
	for _, e := range Catalogue() {
		if pages[e.Doc] == nil {
			pages[e.Doc] = docTables(t, e.Doc)
		}
		if _, ok := pages[e.Doc][e.Code]; !ok {
			t.Errorf("%s has no row in a code table of docs/%s", e.Code, e.Doc)
		}
	}
	// docs/operating.md's table gives each code's status: it is the
	// catalogue's.
	for code, cells := range pages["operating.md"] {
		e, ok := Lookup(code)
		if !ok || e.Doc != "operating.md" || len(cells) < 2 {
			continue
		}
		if cells[1] != strconv.Itoa(e.Status) {
			t.Errorf("docs/operating.md gives %s status %s; the catalogue %d", code, cells[1], e.Status)
		}
	}
	adapter := 0
	for code, cells := range docTables(t, "handoff.md") {
		if len(cells) < 2 || cells[1] != "adapter" {
			continue
		}
		adapter++
		if e, ok := Lookup(code); !ok || e.Doc != "handoff.md" {
			t.Errorf("docs/handoff.md lists the adapter code %s; the catalogue does not have it as a hand-off code", code)
		}
	}
	if adapter < 10 {
		t.Fatalf("docs/handoff.md: %d adapter codes found; has its table changed shape?", adapter)
	}
}
