package main

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/pdmcp/pdmcp/internal/bench"
)

func benchFixture(missed bool) *bench.Report {
	return &bench.Report{GoVer: "go1.26", CPUs: 2, OS: "linux/amd64", Figures: []bench.Figure{
		{ID: "P1", Name: "read", Unit: "ms", PDMCP: 2, Baseline: 1, Ratio: 2, Goal: "<= 1.05 x (a+b)", Met: !missed, Rounds: 1},
		{ID: "P6", Name: "history", Unit: "ms", PDMCP: 1, Baseline: 1, Ratio: 1, Goal: "<= 1.1 x", Met: true, Rounds: 1},
	}}
}

// TestBenchOutcome: a judged goal missed exits 3 naming the figure, unless
// --allow-missed; --quick judges none and exits 0, its text and JSON
// saying so; a run that measured nothing fails.
func TestBenchOutcome(t *testing.T) {
	for _, tc := range []struct {
		name               string
		r                  *bench.Report
		quick, allowMissed bool
		code               int
		stderr             string
	}{
		{"every goal met", benchFixture(false), false, false, exitOK, ""},
		{"a goal missed", benchFixture(true), false, false, exitRefused, "pdmcp bench: 1 goal(s) missed: P1 read (goal <= 1.05 x (a+b), ratio 2.000)"},
		{"missed, allowed", benchFixture(true), false, true, exitOK, ""},
		{"missed, quick", benchFixture(true), true, false, exitOK, ""},
		{"nothing measured", &bench.Report{}, false, false, exitFailure, "no figure was measured"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := benchOutcome(tc.r, tc.quick, tc.allowMissed)
			if code := exitCode(err, true); code != tc.code {
				t.Fatalf("exit %d (%v), want %d", code, err, tc.code)
			}
			if tc.stderr != "" && !strings.Contains(errorLine(err), tc.stderr) {
				t.Fatalf("%q does not say %q", errorLine(err), tc.stderr)
			}
		})
	}
}

// TestBenchOutput: the text and JSON of a judged run and a quick one.
func TestBenchOutput(t *testing.T) {
	var b bytes.Buffer
	if err := writeBench(&b, benchFixture(true), false, false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "(goal <= 1.05 x (a+b): MISSED)") || !strings.Contains(b.String(), "(goal <= 1.1 x: met)") {
		t.Fatalf("judged text:\n%s", b.String())
	}
	b.Reset()
	if err := writeBench(&b, benchFixture(true), true, false); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "MISSED") || strings.Count(b.String(), "not judged (--quick)") != 2 {
		t.Fatalf("quick text:\n%s", b.String())
	}
	for _, tc := range []struct {
		quick  bool
		goals  string
		missed []string
	}{
		{false, "judged", []string{"P1"}},
		{true, "not judged (--quick)", []string{}},
	} {
		b.Reset()
		if err := writeBench(&b, benchFixture(true), tc.quick, true); err != nil {
			t.Fatal(err)
		}
		var got struct {
			Goals   string   `json:"goals"`
			Missed  []string `json:"missed"`
			Figures []struct {
				ID string `json:"id"`
			} `json:"figures"`
			CPUs int `json:"cpus"`
		}
		if err := json.Unmarshal(b.Bytes(), &got); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, b.String())
		}
		if got.Goals != tc.goals || !slices.Equal(got.Missed, tc.missed) || len(got.Figures) != 2 || got.CPUs != 2 {
			t.Fatalf("quick %v: %+v\n%s", tc.quick, got, b.String())
		}
		if tc.quick && !strings.Contains(b.String(), `"missed": []`) {
			t.Fatalf("missed is not an empty list:\n%s", b.String())
		}
	}
}

// TestBenchRefusesAnUnknownFigure: --only names P1 to P7, before anything
// starts.
func TestBenchRefusesAnUnknownFigure(t *testing.T) {
	code, _, stderr := runCLI(t, "bench", "--only", "P1,P9")
	if code != exitUsage || !strings.Contains(stderr, `pdmcp bench: --only "P9": the figures are P1 to P7`) {
		t.Fatalf("exit %d: %s", code, stderr)
	}
}
