package bench

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func goalsFixture() *Report {
	return &Report{Started: time.Date(2026, 12, 5, 4, 0, 0, 0, time.UTC), GoVer: "go1.26", CPUs: 2, OS: "linux/amd64",
		Figures: []Figure{
			{ID: FigureRead, Name: "read", Unit: "ms", PDMCP: 2, Baseline: 1, Ratio: 2, Goal: "<= 1.05 x (a+b)", Met: false, Rounds: 1},
			{ID: FigureRead, Name: "read, against b'", Unit: "ms", PDMCP: 2, Baseline: 2, Ratio: 1, Goal: "reported", Met: true, Rounds: 1},
			{ID: FigureDurableSave, Name: "save", Unit: "ms", PDMCP: 3, Baseline: 2, Ratio: 1.5, Goal: "<= 1.1 x", Met: false, Rounds: 1},
			{ID: FigureSaveHistory, Name: "history", Unit: "ms", PDMCP: 1, Baseline: 1, Ratio: 1, Goal: "<= 1.1 x", Met: true, Rounds: 1},
		}}
}

// TestMissed: the figures whose goal was missed, in order, named with
// their goal and ratio.
func TestMissed(t *testing.T) {
	r := goalsFixture()
	var ids []string
	for _, f := range r.Missed() {
		ids = append(ids, f.ID)
	}
	if !slices.Equal(ids, []string{FigureRead, FigureDurableSave}) {
		t.Fatalf("Missed = %v", ids)
	}
	got := MissedSummary(r.Missed())
	if want := "P1 read (goal <= 1.05 x (a+b), ratio 2.000); P4 save (goal <= 1.1 x, ratio 1.500)"; got != want {
		t.Fatalf("MissedSummary = %q, want %q", got, want)
	}
	if len((&Report{}).Missed()) != 0 {
		t.Fatal("an empty report missed a goal")
	}
}

// TestWriteTextNotJudged: every verdict, met or missed, reads "not
// judged"; the rest of the text is WriteText's.
func TestWriteTextNotJudged(t *testing.T) {
	r := goalsFixture()
	var judged, not strings.Builder
	r.WriteText(&judged)
	if err := r.WriteTextNotJudged(&not, "--quick"); err != nil {
		t.Fatal(err)
	}
	text := not.String()
	if strings.Contains(text, "MISSED") || strings.Contains(text, ": met)") {
		t.Fatalf("a verdict is left:\n%s", text)
	}
	if n := strings.Count(text, ": not judged (--quick))"); n != len(r.Figures) {
		t.Fatalf("%d figures say not judged, want %d:\n%s", n, len(r.Figures), text)
	}
	strip := func(s string) string {
		for _, v := range []string{": not judged (--quick))", ": MISSED)", ": met)"} {
			s = strings.ReplaceAll(s, v, ")")
		}
		return s
	}
	if strip(text) != strip(judged.String()) {
		t.Fatalf("the text differs beyond the verdicts:\n%s\n---\n%s", text, judged.String())
	}
}
