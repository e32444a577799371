package bench

import (
	"encoding/base64"
	"fmt"
	"io"
	"sort"
	"strings"
)

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
		fmt.Fprintf(w, "    pdmcp %s %s", num(f.PDMCP), f.Unit)
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
