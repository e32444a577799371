package audit

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/internal/testutil"
)

// openClocked is an audit file on a clock the test moves by hand, with its
// warnings captured.
func openClocked(t *testing.T) (*Log, string, *testutil.Clock, *testutil.LogBuffer) {
	t.Helper()
	clock := testutil.NewClock(fixed())
	logs := &testutil.LogBuffer{}
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l, err := OpenWith(path, Options{Now: clock.Now, Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, path, clock, logs
}

func noToken() AuthRefused {
	return AuthRefused{Class: "no-token", Reason: "NO_TOKEN", Status: 401, Method: "POST", Path: "/mcp"}
}

func expired() AuthRefused {
	return AuthRefused{Class: "expired", Reason: "TOKEN_EXPIRED", Status: 401, Method: "POST", Path: "/mcp"}
}

// refuse records n refusals of line, a millisecond apart, and returns how
// many were written as their own line.
func refuse(t *testing.T, l *Log, clock *testutil.Clock, line AuthRefused, n int) int {
	t.Helper()
	own := 0
	for range n {
		o, err := l.Refused(line)
		if err != nil {
			t.Fatal(err)
		}
		if o {
			own++
		}
		clock.Advance(time.Millisecond)
	}
	return own
}

// tallyOf sums, per class, the refusals the file accounts for: one per
// auth-refused line plus each summary's count; and counts the lines.
func tallyOf(lines []map[string]any) (total map[string]int, own, summaries int) {
	total = map[string]int{}
	for _, m := range lines {
		class, _ := m["class"].(string)
		switch m["event"] {
		case EventAuthRefused:
			total[class]++
			own++
		case EventRefusalSummary:
			c, _ := m["count"].(float64)
			total[class] += int(c)
			summaries++
		}
	}
	return total, own, summaries
}

// TestRefusalsInOneWindowAreOneLineAndOneSummary: N refusals of a kind in
// one window are its first line and one summary counting the other N-1,
// written when the window has ended and something happens (here the next
// refusal); the summary names when the counted ones came.
func TestRefusalsInOneWindowAreOneLineAndOneSummary(t *testing.T) {
	l, path, clock, logs := openClocked(t)
	const n = 500 // 500 ms of refusals, one window
	if own := refuse(t, l, clock, noToken(), n); own != 1 {
		t.Fatalf("%d of %d refusals written as their own line, want 1", own, n)
	}
	if lines := readLines(t, path); len(lines) != 1 || lines[0]["event"] != EventAuthRefused {
		t.Fatalf("during the window: %v, want the first refusal's line alone", lines)
	}
	clock.Advance(RefusalWindow)
	if own := refuse(t, l, clock, expired(), 1); own != 1 {
		t.Fatal("a refusal of another kind was not its own line")
	}
	lines := readLines(t, path)
	if len(lines) != 3 {
		t.Fatalf("%d lines, want the first, the summary, the next kind's first: %v", len(lines), lines)
	}
	s := lines[1]
	want := map[string]any{"event": EventRefusalSummary, "class": "no-token", "reason": "NO_TOKEN", "status": float64(401),
		"count": float64(n - 1), "first": "2026-10-24T12:00:00.001Z", "last": "2026-10-24T12:00:00.499Z"}
	for k, v := range want {
		if s[k] != v {
			t.Errorf("summary %s = %v, want %v", k, s[k], v)
		}
	}
	if _, ok := s["method"]; ok {
		t.Errorf("a summary names a method: %v", s)
	}
	if lines[2]["class"] != "expired" {
		t.Errorf("third line %v, want expired's own line", lines[2])
	}
	// One warning for the summary: the first refusal's own warning is
	// its caller's to write (the middleware).
	if got := strings.Count(logs.String(), `"msg":"requests refused (summary)"`); got != 1 ||
		!strings.Contains(logs.String(), fmt.Sprintf(`"count":%d`, n-1)) {
		t.Errorf("log has %d summary warnings, want 1 with the count:\n%s", got, logs)
	}
}

// TestRefusalKindsAreCountedApart: interleaved kinds (class, reason,
// status, caller) each get their own first line and their own summary, and
// every refusal is accounted for exactly once.
func TestRefusalKindsAreCountedApart(t *testing.T) {
	l, path, clock, _ := openClocked(t)
	malformedQuery := AuthRefused{Class: "malformed", Reason: "TOKEN_IN_QUERY", Status: 400, Method: "GET", Path: "/mcp"}
	malformedHeader := AuthRefused{Class: "malformed", Reason: "BAD_AUTH_HEADER", Status: 401, Method: "GET", Path: "/mcp"}
	mismatchBob := AuthRefused{Class: "session-user-mismatch", Reason: "SESSION_USER_MISMATCH", Status: 403,
		Caller: Digest12("bob"), Method: "POST", Path: "/mcp"}
	mismatchCarol := mismatchBob
	mismatchCarol.Caller = Digest12("carol")
	kinds := []AuthRefused{noToken(), expired(), malformedQuery, malformedHeader, mismatchBob, mismatchCarol}
	const rounds = 100
	own := 0
	for range rounds {
		for _, k := range kinds {
			own += refuse(t, l, clock, k, 1)
		}
	}
	if own != len(kinds) {
		t.Fatalf("%d own lines, want one per kind (%d)", own, len(kinds))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	lines := readLines(t, path)
	total, ownLines, summaries := tallyOf(lines)
	if ownLines != len(kinds) || summaries != len(kinds) {
		t.Fatalf("%d own lines and %d summaries, want %d of each:\n%v", ownLines, summaries, len(kinds), lines)
	}
	for class, want := range map[string]int{"no-token": rounds, "expired": rounds, "malformed": 2 * rounds,
		"session-user-mismatch": 2 * rounds} {
		if total[class] != want {
			t.Errorf("class %s accounts for %d refusals, want %d", class, total[class], want)
		}
	}
	callers := map[string]float64{}
	for _, m := range lines {
		if m["event"] == EventRefusalSummary && m["class"] == "session-user-mismatch" {
			callers[fmt.Sprint(m["caller"])] = m["count"].(float64)
		}
	}
	if callers[Digest12("bob")] != rounds-1 || callers[Digest12("carol")] != rounds-1 {
		t.Errorf("mismatch summaries by caller %v, want %d each for bob and carol", callers, rounds-1)
	}
}

// TestRefusalWindowsFollowEachOther: a steady flood writes one line and
// one summary per window, the summary of a window before the next window's
// first line.
func TestRefusalWindowsFollowEachOther(t *testing.T) {
	l, path, clock, _ := openClocked(t)
	const windows, perWindow = 5, 100
	step := RefusalWindow / perWindow
	own := 0
	for range windows * perWindow {
		o, err := l.Refused(noToken())
		if err != nil {
			t.Fatal(err)
		}
		if o {
			own++
		}
		clock.Advance(step)
	}
	if own != windows {
		t.Errorf("%d own lines in %d windows, want one each", own, windows)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	lines := readLines(t, path)
	if len(lines) != 2*windows {
		t.Fatalf("%d lines, want %d", len(lines), 2*windows)
	}
	for i, m := range lines {
		want := EventAuthRefused
		if i%2 == 1 {
			want = EventRefusalSummary
		}
		if m["event"] != want {
			t.Errorf("line %d is %v, want %s", i+1, m["event"], want)
		}
	}
	if total, _, _ := tallyOf(lines); total["no-token"] != windows*perWindow {
		t.Errorf("the file accounts for %d refusals, want %d", total["no-token"], windows*perWindow)
	}
}

// TestRefusalSummariesAreFlushed: a window that ends with nothing after
// it is written by the timer, at the Shutdown line (ahead of it), and at
// Close; a window that counted nothing writes no summary.
func TestRefusalSummariesAreFlushed(t *testing.T) {
	t.Run("by the timer", func(t *testing.T) {
		l, path, clock, _ := openClocked(t)
		refuse(t, l, clock, noToken(), 3)
		l.refusals.mu.Lock()
		armed := l.refusals.timer != nil
		l.refusals.mu.Unlock()
		if !armed {
			t.Fatal("no timer armed for the open window")
		}
		l.refusalTimerFired() // early: the window has not ended
		if n := len(readLines(t, path)); n != 1 {
			t.Fatalf("%d lines before the window ended, want 1", n)
		}
		clock.Advance(RefusalWindow)
		l.refusalTimerFired()
		lines := readLines(t, path)
		if len(lines) != 2 || lines[1]["event"] != EventRefusalSummary || lines[1]["count"] != float64(2) {
			t.Fatalf("after the window: %v", lines)
		}
	})
	t.Run("at the shutdown line", func(t *testing.T) {
		l, path, clock, _ := openClocked(t)
		refuse(t, l, clock, noToken(), 3)
		if err := l.Write(Shutdown{RunID: "r", Reason: "signal"}); err != nil {
			t.Fatal(err)
		}
		lines := readLines(t, path)
		if len(lines) != 3 || lines[1]["event"] != EventRefusalSummary || lines[2]["event"] != EventShutdown {
			t.Fatalf("lines %v, want first, summary, shutdown", lines)
		}
	})
	t.Run("at close", func(t *testing.T) {
		l, path, clock, _ := openClocked(t)
		refuse(t, l, clock, noToken(), 3)
		refuse(t, l, clock, expired(), 1) // counted nothing: no summary
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		lines := readLines(t, path)
		if len(lines) != 3 || lines[2]["event"] != EventRefusalSummary || lines[2]["class"] != "no-token" {
			t.Fatalf("lines %v, want two first lines and no-token's summary", lines)
		}
		// After Close a refusal is its own (and the file is closed).
		if own, err := l.Refused(noToken()); !own || err == nil {
			t.Errorf("Refused after Close: own %v, err %v; want own and ErrClosed", own, err)
		}
	})
}

// TestRefusalKindsAreBounded: past maxRefusalKinds open kinds, a new
// caller's refusals are counted without the caller, so the state and the
// file stay bounded however many users are refused.
func TestRefusalKindsAreBounded(t *testing.T) {
	l, path, _, _ := openClocked(t)
	line := AuthRefused{Class: "session-user-mismatch", Reason: "SESSION_USER_MISMATCH", Status: 403, Method: "POST", Path: "/mcp"}
	const users = maxRefusalKinds + 50
	for i := range users {
		line.Caller = Digest12(fmt.Sprint("user-", i))
		for range 2 {
			if _, err := l.Refused(line); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := len(l.refusals.open); n > maxRefusalKinds+1 {
		t.Errorf("%d kinds open, want at most %d", n, maxRefusalKinds+1)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	total, own, _ := tallyOf(readLines(t, path))
	if total["session-user-mismatch"] != 2*users {
		t.Errorf("the file accounts for %d refusals, want %d", total["session-user-mismatch"], 2*users)
	}
	if own > maxRefusalKinds+1 {
		t.Errorf("%d own lines, want at most %d", own, maxRefusalKinds+1)
	}
}

// TestRefusalLinesWriteNothingAsSent: the method and path a refused
// sender chose are not written as sent: a method that is not a standard
// one is OTHER, a path that is not a route's shape is left out.
func TestRefusalLinesWriteNothingAsSent(t *testing.T) {
	tests := []struct {
		name, method, path string
		wantMethod         string
		wantPath           string // "": left out
	}{
		{"standard", "DELETE", "/mcp", "DELETE", "/mcp"},
		{"invented method", "EXFILTRATE", "/mcp", "OTHER", "/mcp"},
		{"long method", strings.Repeat("A", 4000), "/mcp", "OTHER", "/mcp"},
		{"lower-case method", "post", "/mcp", "OTHER", "/mcp"},
		{"text as a path", "POST", "/mcp/Patient has X", "POST", ""},
		{"JSON in a path", "POST", `/"},{"event":"tool"`, "POST", ""},
		{"long path", "POST", "/" + strings.Repeat("a", 300), "POST", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, path, _, _ := openClocked(t)
			_, _ = l.Refused(AuthRefused{Class: "no-token", Reason: "NO_TOKEN", Status: 401, Method: tc.method, Path: tc.path})
			m := readLines(t, path)[0]
			if m["method"] != tc.wantMethod {
				t.Errorf("method %v, want %s", m["method"], tc.wantMethod)
			}
			if m["path"] != tc.wantPath {
				t.Errorf("path %v, want %v", m["path"], tc.wantPath)
			}
			b, _ := os.ReadFile(path)
			if len(b) > 512 {
				t.Errorf("the line is %d bytes", len(b))
			}
		})
	}
}

// TestDiscardCountsRefusalsToo: with no audit file, refusals are still
// counted, so a caller that logs only its own refusals is bounded too.
func TestDiscardCountsRefusalsToo(t *testing.T) {
	l := Discard()
	defer l.Close()
	own := 0
	for range 1000 {
		if o, err := l.Refused(noToken()); err != nil {
			t.Fatal(err)
		} else if o {
			own++
		}
	}
	if own != 1 {
		t.Errorf("%d of 1000 refusals their own, want 1", own)
	}
	var nilLog *Log
	if own, err := nilLog.Refused(noToken()); !own || err != nil {
		t.Errorf("nil Log: own %v, err %v", own, err)
	}
}
