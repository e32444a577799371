package bench

import (
	"bytes"
	"fmt"
	"io"
	"strings"
)

// Missed is the figures of r whose goal was judged and not met, in the
// report's order.
func (r *Report) Missed() []Figure {
	var out []Figure
	for _, f := range r.Figures {
		if !f.Met {
			out = append(out, f)
		}
	}
	return out
}

// MissedSummary names the missed figures, each with its goal and ratio
// ("P1 <name> (goal <= 1.05 x (a+b), ratio 1.210); P4 ..."): the line a
// run that missed a goal ends with.
func MissedSummary(missed []Figure) string {
	parts := make([]string, len(missed))
	for i, f := range missed {
		parts[i] = fmt.Sprintf("%s %s (goal %s, ratio %.3f)", f.ID, f.Name, f.Goal, f.Ratio)
	}
	return strings.Join(parts, "; ")
}

// WriteTextNotJudged prints r as WriteText does, with each figure's
// verdict replaced by "not judged (why)": a run too small for its ratios
// to mean anything (bench --quick) says so instead of "MISSED".
func (r *Report) WriteTextNotJudged(w io.Writer, why string) error {
	var b bytes.Buffer
	r.WriteText(&b)
	text := b.String()
	for _, f := range r.Figures {
		verdict := "met"
		if !f.Met {
			verdict = "MISSED"
		}
		old := fmt.Sprintf("(goal %s: %s)", f.Goal, verdict)
		text = strings.Replace(text, old, fmt.Sprintf("(goal %s: not judged (%s))", f.Goal, why), 1)
	}
	_, err := io.WriteString(w, text)
	return err
}
