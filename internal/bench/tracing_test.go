package bench

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestStackTracingExportsToTheSink: a stack started with Tracing exports
// a read's spans over OTLP/HTTP to its sink by the time it is closed; one
// without exports nothing.
func TestStackTracingExportsToTheSink(t *testing.T) {
	for _, tracing := range []bool{true, false} {
		ctx := context.Background()
		st, err := StartStack(ctx, StackOptions{Dir: t.TempDir(), Users: 1, MaxCallers: 2, Tracing: tracing})
		if err != nil {
			t.Fatal(err)
		}
		cs, err := st.ConnectUser(ctx, 0, "")
		if err != nil {
			st.Close()
			t.Fatal(err)
		}
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "read_protected_document", Arguments: map[string]any{"documentId": DocumentID}})
		if err != nil || res.IsError {
			st.Close()
			t.Fatalf("read: %v %+v", err, res)
		}
		cs.Close()
		st.Close()
		if got := st.TraceBytes.Load(); (got > 0) != tracing {
			t.Errorf("tracing %v: the sink read %d bytes", tracing, got)
		}
	}
}

// TestTracedTwin: a stack started with TracedTwin serves two pdmcps on
// the same files: reads through the first export nothing and leave no
// trace id in its audit file; reads through the twin export spans and
// carry trace ids in the twin's own audit file.
func TestTracedTwin(t *testing.T) {
	ctx := context.Background()
	st, err := StartStack(ctx, StackOptions{Dir: t.TempDir(), Users: 1, MaxCallers: 2, TracedTwin: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if st.TracedURL == "" || st.TracedURL == st.MCPURL {
		t.Fatalf("twin at %q beside %q", st.TracedURL, st.MCPURL)
	}
	tok, err := st.Token(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	read := func(url string) {
		t.Helper()
		cs, err := st.Connect(ctx, url, tok, "")
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		if err := callOK(ctx, cs, "read_protected_document", readArgs()); err != nil {
			t.Fatal(err)
		}
		if err := st.twinTracing.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The twin exports spans of its own start.
	if err := st.twinTracing.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	start := st.TraceBytes.Load()
	read(st.MCPURL)
	if n := st.TraceBytes.Load() - start; n != 0 {
		t.Errorf("a read through the untraced pdmcp exported %d bytes", n)
	}
	read(st.TracedURL)
	if n := st.TraceBytes.Load() - start; n == 0 {
		t.Error("a read through the traced twin exported nothing")
	}
	audits := map[string]string{"untraced": st.stack.AuditPath,
		"traced": filepath.Join(filepath.Dir(st.stack.AuditPath), "audit-traced.jsonl")}
	for which, path := range audits {
		lines := readLines(t, path)
		var reads, traced int
		for _, l := range lines {
			var line struct {
				Tool, TraceID string
			}
			if json.Unmarshal([]byte(l), &line) != nil || line.Tool != "read_protected_document" {
				continue
			}
			reads++
			if line.TraceID != "" {
				traced++
			}
		}
		want := 0
		if which == "traced" {
			want = 1
		}
		if reads != 1 || traced != want {
			t.Errorf("%s audit %s: %d reads, %d with a trace id; want 1 and %d", which, path, reads, traced, want)
		}
	}
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// TestTracedFigures: the traced reads are judged against the untraced
// ones of the same rounds, median and CPU, and nothing is added for a run
// without the twin.
func TestTracedFigures(t *testing.T) {
	ms := func(v float64) Latencies { return Latencies{time.Duration(v * float64(time.Millisecond))} }
	m := &readMeasures{lat: map[string]Latencies{}, cpu: map[string]time.Duration{},
		roundLat: map[string][]Latencies{}, roundCPU: map[string][]time.Duration{}}
	b := &run{o: Options{Rounds: 2, Users: 1, Calls: 1}, r: &Report{}}
	b.tracedFigures(m, "x", "with sessions (x)")
	if len(b.r.Figures) != 0 {
		t.Fatalf("figures without a traced twin: %+v", b.r.Figures)
	}
	// Windows: round 1 1.04 / 1, round 2 2.2 / 2 = 1.1; the medians over
	// both rounds (nearest rank, lower) are 1.04 and 1. Calls in turn:
	// 1.06 / 1 and 2.1 / 2.
	for name, rounds := range map[string][]float64{"pdmcp x": {1, 2}, "pdmcp-traced x": {1.04, 2.2},
		"tracing-turn pdmcp x": {1, 2}, "tracing-turn pdmcp-traced x": {1.06, 2.1}} {
		for _, v := range rounds {
			m.lat[name] = append(m.lat[name], ms(v)...)
			m.roundLat[name] = append(m.roundLat[name], ms(v))
			c := time.Duration(v * float64(time.Millisecond))
			m.cpu[name] += c
			m.roundCPU[name] = append(m.roundCPU[name], c)
		}
	}
	b.tracedFigures(m, "x", "with sessions (x)")
	want := 2
	if cpuMeasured {
		want = 3
	}
	if len(b.r.Figures) != want {
		t.Fatalf("%d figures, want %d: %+v", len(b.r.Figures), want, b.r.Figures)
	}
	// The calls in turn are judged (1.06: missed); the windows reported.
	turn, win := b.r.Figures[0], b.r.Figures[1]
	if math.Abs(turn.Ratio-1.06) > 1e-9 || math.Abs(turn.RatioMin-1.05) > 1e-9 || math.Abs(turn.RatioMax-1.06) > 1e-9 ||
		turn.Met || turn.Goal != "<= 1.05 x tracing off" || turn.Measured != "tracing on" || !strings.Contains(turn.Name, "calls in turn") {
		t.Errorf("calls-in-turn figure %+v", turn)
	}
	if math.Abs(win.Ratio-1.04) > 1e-9 || math.Abs(win.RatioMin-1.04) > 1e-9 || math.Abs(win.RatioMax-1.1) > 1e-9 ||
		!win.Met || win.Goal != "reported" || !strings.Contains(win.Name, "windows side by side") {
		t.Errorf("windows figure %+v", win)
	}
	if cpuMeasured {
		// CPU: (1.04 + 2.2) / (1 + 2) = 1.08, reported.
		c := b.r.Figures[2]
		if math.Abs(c.Ratio-1.08) > 1e-9 || !c.Met || c.Goal != "reported" || math.Abs(c.RatioMax-1.1) > 1e-9 {
			t.Errorf("CPU figure %+v", c)
		}
	}
}

// TestReadRoundsAlternateOrder: the measured rounds run the targets
// forward and backward in turn, so neither side of a pair always goes
// first; each target's window is settled once per round, warm-up included.
func TestReadRoundsAlternateOrder(t *testing.T) {
	var order []string
	settled := map[string]int{}
	target := func(name string) readTarget {
		return readTarget{name: name,
			call:   func(context.Context, int) error { order = append(order, name); return nil },
			settle: func(context.Context) error { settled[name]++; return nil }}
	}
	b := &run{o: Options{Rounds: 3, Users: 1, Calls: 1, Rate: 1000, Progress: io.Discard}, r: &Report{}}
	m, err := b.readRounds(context.Background(), []readTarget{target("A"), target("B"), target("C")})
	if err != nil {
		t.Fatal(err)
	}
	// The warm-up (round 0) is backward, then forward, backward, forward.
	want := "CBA" + "ABC" + "CBA" + "ABC"
	if got := strings.Join(order, ""); got != want {
		t.Errorf("calls in the order %s, want %s", got, want)
	}
	for _, name := range []string{"A", "B", "C"} {
		if settled[name] != 4 || len(m.roundLat[name]) != 3 {
			t.Errorf("%s: settled %d times, %d measured rounds; want 4 and 3", name, settled[name], len(m.roundLat[name]))
		}
	}
}

// TestInTurn: each user's calls rotate among the sides, the users
// starting on different sides; each side's latencies come out under the
// prefix and its name, once.
func TestInTurn(t *testing.T) {
	var mu sync.Mutex
	calls := map[int]string{}
	side := func(name string) readTarget {
		return readTarget{name: name, call: func(_ context.Context, u int) error {
			mu.Lock()
			calls[u] += name
			mu.Unlock()
			return nil
		}}
	}
	turn := inTurn("turn", "p ", []readTarget{side("0"), side("1"), side("2")}, 2)
	if _, err := paced(context.Background(), 2, 6, 1000, turn.call); err != nil {
		t.Fatal(err)
	}
	if calls[0] != "012012" || calls[1] != "120120" {
		t.Errorf("user 0 called %s, user 1 %s; want 012012 and 120120", calls[0], calls[1])
	}
	got := turn.split()
	if len(got) != 3 || len(got["p 0"]) != 4 || len(got["p 1"]) != 4 || len(got["p 2"]) != 4 {
		t.Errorf("split: %v", got)
	}
	if again := turn.split(); len(again) != 0 {
		t.Errorf("a second split: %v", again)
	}
}

// TestFloorInTurnFigure: pdmcp's read over (a)+(b') from the window whose
// calls rotate among the three is judged (<= 1.05) beside the windows'
// figure, which is reported.
func TestFloorInTurnFigure(t *testing.T) {
	for _, tc := range []struct {
		turn          []float64 // pdmcp's calls in turn, a round each
		ratio, spread float64   // the median's ratio, and the greatest round's
		met           bool
	}{
		// 2.1 / (1 + 1) = 1.05 in one round, 2.4 / 2 = 1.2 in the next.
		{turn: []float64{2.1, 2.4}, ratio: 1.05, spread: 1.2, met: true},
		{turn: []float64{2.2, 2.4}, ratio: 1.1, spread: 1.2, met: false},
	} {
		f := floorInTurn(t, tc.turn)
		if math.Abs(f.Ratio-tc.ratio) > 1e-9 || math.Abs(f.RatioMax-tc.spread) > 1e-9 || f.Goal != "<= 1.05 x (a+b')" || f.Met != tc.met {
			t.Errorf("in turn %v: figure %+v; want ratio %v, met %v", tc.turn, f, tc.ratio, tc.met)
		}
	}
}

// floorInTurn is readFigures' in-turn floor figure for a run whose
// in-turn pdmcp reads took turn (ms, a round each) against (a) and (b')
// of 1 ms each.
func floorInTurn(t *testing.T, turn []float64) Figure {
	t.Helper()
	m := &readMeasures{lat: map[string]Latencies{}, cpu: map[string]time.Duration{},
		roundLat: map[string][]Latencies{}, roundCPU: map[string][]time.Duration{}}
	for name, rounds := range map[string][]float64{"pdmcp x": {3, 3}, "direct": {1, 1}, "bare x": {0.5, 0.5},
		"bare-result x": {1, 1}, "floor-turn pdmcp x": turn, "floor-turn direct x": {1, 1},
		"floor-turn bare-result x": {1, 1}} {
		for _, v := range rounds {
			d := time.Duration(v * float64(time.Millisecond))
			m.lat[name] = append(m.lat[name], d)
			m.roundLat[name] = append(m.roundLat[name], Latencies{d})
			m.cpu[name] += d
			m.roundCPU[name] = append(m.roundCPU[name], d)
		}
	}
	b := &run{o: Options{Rounds: 2, Users: 1, Calls: 1}, r: &Report{}}
	b.readFigures(m, "x")
	var found []Figure
	for _, f := range b.r.Figures {
		if strings.HasSuffix(f.Name, "against a bare call carrying the same result, calls in turn") {
			found = append(found, f)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d in-turn floor figures: %+v", len(found), b.r.Figures)
	}
	for _, f := range b.r.Figures {
		if strings.HasSuffix(f.Name, "against a bare call carrying the same result") && f.Goal != "reported" {
			t.Errorf("the windows' floor figure is judged: %+v", f)
		}
	}
	return found[0]
}
