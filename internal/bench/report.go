package bench

import (
	"encoding/base64"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// The figures' ids, which reports, options (--only) and the docs name, by
// what each measures.
const (
	// FigureRead: read_protected_document of 4 KiB against a direct
	// decrypt plus a bare no-op, paced, in both session modes.
	FigureRead = "P1"
	// FigureFileEncrypt: encrypt_file of a big file against posting it to
	// the Gateway directly, and the heap each takes.
	FigureFileEncrypt = "P2"
	// FigureSessionMemory: what the server holds as distinct users churn
	// through maxCallers, and the most live Gateway sessions.
	FigureSessionMemory = "P3"
	// FigureDurableSave: a durable save against one without fsync.
	FigureDurableSave = "P4"
	// FigureFirstRead: a new user's first read against the same exchange,
	// mint and decrypt made directly.
	FigureFirstRead = "P5"
	// FigureSaveHistory: a save to a destination with a long history in
	// the record against one with none.
	FigureSaveHistory = "P6"
	// FigureAbuse: a signed-in user's read p99 while the abuse suite runs
	// against one with none, and the server process's memory and
	// descriptors meanwhile.
	FigureAbuse = "P7"
)

// Figure is one measured comparison.
type Figure struct {
	ID    string  `json:"id"`
	Name  string  `json:"name"`
	Unit  string  `json:"unit"`
	PDMCP float64 `json:"pdmcp"`
	// Measured names what PDMCP holds when it is not pdmcp's own
	// figure (a diagnostic built from baselines); empty for pdmcp's.
	Measured  string             `json:"measured,omitempty"`
	Baselines map[string]float64 `json:"baselines,omitempty"`
	Baseline  float64            `json:"baseline"` // what the ratio divides by
	Ratio     float64            `json:"ratio"`
	Goal      string             `json:"goal"`
	Met       bool               `json:"met"`
	Note      string             `json:"note,omitempty"`
	// Spread: the ratio's least and greatest over the rounds it was
	// measured in (the same ratio computed round by round), and how many.
	// A figure measured once has its ratio as both.
	RatioMin float64 `json:"ratioMin"`
	RatioMax float64 `json:"ratioMax"`
	Rounds   int     `json:"rounds"`
}

// Report is a run's result.
type Report struct {
	Started time.Time `json:"started"`
	Seconds float64   `json:"seconds"`
	GoVer   string    `json:"go"`
	CPUs    int       `json:"cpus"`
	OS      string    `json:"os"`
	Options Options   `json:"options"`
	Figures []Figure  `json:"figures"`
	MaxLive int       `json:"maxLiveGatewaySessions"`
	// Trace is where a read's time goes, when Options.Trace is set.
	Trace    []Breakdown `json:"trace,omitempty"`
	Problems []string    `json:"problems,omitempty"`
}

func decodeB64(s string) ([]byte, error) { return base64.StdEncoding.DecodeString(s) }

// WriteText prints the report as a table: per figure, pdmcp's number, the
// baselines and the ratio against the goal.
func (r *Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "pdmcp bench: %s, %s, %d CPUs, %.0f s, started %s\n\n", r.GoVer, r.OS, r.CPUs, r.Seconds,
		r.Started.Format("2006-01-02 15:04 UTC"))
	for _, f := range r.Figures {
		met := "met"
		if !f.Met {
			met = "MISSED"
		}
		fmt.Fprintf(w, "%s  %s\n", f.ID, f.Name)
		subject := "pdmcp"
		if f.Measured != "" {
			subject = f.Measured
		}
		fmt.Fprintf(w, "    %s %s %s", subject, num(f.PDMCP), f.Unit)
		names := make([]string, 0, len(f.Baselines))
		for k := range f.Baselines {
			names = append(names, k)
		}
		sort.Strings(names)
		var parts []string
		for _, k := range names {
			parts = append(parts, fmt.Sprintf("%s %s", k, num(f.Baselines[k])))
		}
		if len(parts) > 0 {
			fmt.Fprintf(w, "; %s", strings.Join(parts, "; "))
		}
		fmt.Fprintf(w, "\n    ratio %.3f, min %.3f, max %.3f over %d round(s) (goal %s: %s)\n", f.Ratio, f.RatioMin, f.RatioMax,
			f.Rounds, f.Goal, met)
		if f.Note != "" {
			fmt.Fprintf(w, "    note: %s\n", f.Note)
		}
	}
	for _, b := range r.Trace {
		fmt.Fprintf(w, "\nWhere a read's time goes in the server, %s (runtime/trace of %d reads; client's median %.3f ms):\n",
			b.Mode, b.Reads, b.ClientMedian)
		for _, p := range b.Phases {
			fmt.Fprintf(w, "    %-100s median %7.3f ms, mean %7.3f ms\n", p.Name, p.Median, p.Mean)
		}
		fmt.Fprintf(w, "  waits within the request (overlapping the parts above):\n")
		for _, p := range b.Waits {
			fmt.Fprintf(w, "    %-100s median %7.3f ms, mean %7.3f ms\n", p.Name, p.Median, p.Mean)
		}
	}
	for _, p := range r.Problems {
		fmt.Fprintf(w, "problem: %s\n", p)
	}
}

func num(v float64) string {
	switch {
	case v >= 1000:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}

// spread records the ratio as computed in each round alone.
func (f *Figure) spread(perRound []float64) {
	f.Rounds = len(perRound)
	for i, v := range perRound {
		if i == 0 || v < f.RatioMin {
			f.RatioMin = v
		}
		if i == 0 || v > f.RatioMax {
			f.RatioMax = v
		}
	}
}

// settleSpread gives a figure that recorded no rounds its one measurement
// as its spread, so every figure carries one.
func (f *Figure) settleSpread() {
	if f.Rounds == 0 {
		f.spread([]float64{f.Ratio})
	}
}
