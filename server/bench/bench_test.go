package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// TestQuickRun runs every figure with small counts, so the command cannot
// rot: each figure is measured, with its baselines, a finite ratio and a
// goal; nothing here judges a time.
func TestQuickRun(t *testing.T) {
	o := Quick()
	o.Dir = t.TempDir()
	var progress bytes.Buffer
	o.Progress = &progress
	r, err := Run(context.Background(), o)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, progress.String())
	}
	seen := map[string]int{}
	for _, f := range r.Figures {
		seen[f.ID]++
		// A difference of two peaks may be zero; every other figure is a
		// measured quantity.
		positive := f.PDMCP > 0 || (strings.Contains(f.Name, "own share") && f.PDMCP == 0)
		if !positive || !(f.Baseline > 0) || math.IsInf(f.Ratio, 0) || math.IsNaN(f.Ratio) || f.Goal == "" {
			t.Errorf("%s %q: pdmcp %v baseline %v ratio %v goal %q", f.ID, f.Name, f.PDMCP, f.Baseline, f.Ratio, f.Goal)
		}
	}
	// P1: median, p99 and CPU in two modes; P2: time and memory; P3: heap,
	// live sessions, per session; P4, P5 and P6 one each.
	p1 := 4
	if cpuMeasured {
		p1 = 6
	}
	want := map[string]int{"P1": p1, "P2": 2, "P3": 3, "P4": 1, "P5": 1, "P6": 1}
	for id, n := range want {
		if seen[id] != n {
			t.Errorf("%s: %d figures, want %d", id, seen[id], n)
		}
	}
	if r.MaxLive < 1 {
		t.Errorf("no live Gateway session was ever seen (%d): the counters are not read", r.MaxLive)
	}
	var text bytes.Buffer
	r.WriteText(&text)
	for _, id := range []string{"P1", "P2", "P3", "P4", "P5", "P6"} {
		if !strings.Contains(text.String(), id+"  ") {
			t.Errorf("the text report has no %s line:\n%s", id, text.String())
		}
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil || len(back.Figures) != len(r.Figures) {
		t.Errorf("the JSON report does not read back: %v", err)
	}
	if !strings.Contains(progress.String(), "P5") {
		t.Errorf("no progress was written:\n%s", progress.String())
	}
}
