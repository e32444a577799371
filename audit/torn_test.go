package audit

import (
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/pdmcp/pdmcp/internal/testutil"
)

// splitLines splits a file into its lines, which must all end with a
// newline, and reports which parse as one JSON object.
func splitLines(t *testing.T, path string) (lines []string, valid []bool) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		t.Fatalf("the file ends in a partial line: %q", b)
	}
	for _, l := range strings.SplitAfter(string(b), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		lines = append(lines, l)
		valid = append(valid, json.Unmarshal([]byte(l), &m) == nil)
	}
	return lines, valid
}

// TestOpenFencesATornTail: a file whose last line was torn (a full disk,
// a crash) gets a newline at open, so the fragment stands alone and the
// next line is whole; complete lines and the fragment itself are kept, and
// a warning says how many bytes were fenced off.
func TestOpenFencesATornTail(t *testing.T) {
	whole := `{"event":"startup","runId":"r1","transport":"stdio","ts":"2026-10-24T12:00:00Z"}` + "\n"
	torn := `{"event":"tool","runId":"r1","tool":"read_prot`
	tests := []struct {
		name, before string
		fenced       int // bytes the warning names; 0: no warning
		wantLines    []bool
	}{
		{"torn after a whole line", whole + torn, len(torn), []bool{true, false, true}},
		{"only a fragment", torn, len(torn), []bool{false, true}},
		{"whole lines", whole, 0, []bool{true, true}},
		{"empty", "", 0, []bool{true}},
		{"a fragment longer than a read", whole + strings.Repeat("x", 10000), 10000, []bool{true, false, true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "audit.jsonl")
			if err := os.WriteFile(path, []byte(tc.before), 0o600); err != nil {
				t.Fatal(err)
			}
			logs := &testutil.LogBuffer{}
			l, err := OpenWith(path, Options{Logger: slog.New(slog.NewJSONHandler(logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Write(Startup{RunID: "r2", Transport: "stdio"}); err != nil {
				t.Fatal(err)
			}
			l.Close()
			b, _ := os.ReadFile(path)
			if !strings.HasPrefix(string(b), tc.before) {
				t.Errorf("what was there is not kept as it was:\n%s", b)
			}
			lines, valid := splitLines(t, path)
			if len(valid) != len(tc.wantLines) {
				t.Fatalf("%d lines %q, want %d", len(lines), lines, len(tc.wantLines))
			}
			for i := range valid {
				if valid[i] != tc.wantLines[i] {
					t.Errorf("line %d %q parses: %v, want %v", i+1, lines[i], valid[i], tc.wantLines[i])
				}
			}
			if !strings.Contains(lines[len(lines)-1], `"runId":"r2"`) {
				t.Errorf("last line %q, want the new line whole", lines[len(lines)-1])
			}
			warned := strings.Contains(logs.String(), "torn line")
			if warned != (tc.fenced > 0) {
				t.Errorf("warning given: %v, want %v:\n%s", warned, tc.fenced > 0, logs)
			}
			if tc.fenced > 0 {
				var m map[string]any
				if err := json.Unmarshal([]byte(logs.String()), &m); err != nil || m["bytes"] != float64(tc.fenced) || m["level"] != "WARN" {
					t.Errorf("warning %s, want WARN with bytes %d", logs, tc.fenced)
				}
				if strings.Contains(logs.String(), "read_prot") {
					t.Errorf("the warning repeats the fragment")
				}
			}
		})
	}
}

// faultyFile writes only the first `keep` bytes of a write and then fails
// as a full disk does; truncate, when set, makes taking them back fail too.
type faultyFile struct {
	*os.File
	keep        int
	failWrites  int // writes still to fail
	failTrunc   bool
	truncations int
}

func (f *faultyFile) Write(p []byte) (int, error) {
	if f.failWrites == 0 {
		return f.File.Write(p)
	}
	f.failWrites--
	n, err := f.File.Write(p[:min(f.keep, len(p))])
	if err != nil {
		return n, err
	}
	return n, &os.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
}

func (f *faultyFile) Truncate(size int64) error {
	f.truncations++
	if f.failTrunc {
		return &os.PathError{Op: "truncate", Path: f.Name(), Err: syscall.EIO}
	}
	return f.File.Truncate(size)
}

// TestAFailedWriteLeavesNoPartialLine: a write that fails part-way (a full
// disk) is taken back, so the file holds only whole lines and the next
// write is whole; when it cannot be taken back, the next line starts on a
// line of its own, so no line ever joins a fragment.
func TestAFailedWriteLeavesNoPartialLine(t *testing.T) {
	for _, tc := range []struct {
		name      string
		failTrunc bool
		want      []bool // which lines parse
	}{
		{"taken back", false, []bool{true, true}},
		{"cannot be taken back", true, []bool{true, false, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, path := openTemp(t)
			if err := l.Write(Startup{RunID: "before", Transport: "stdio"}); err != nil {
				t.Fatal(err)
			}
			ff := &faultyFile{File: l.f.(*os.File), keep: 20, failWrites: 1, failTrunc: tc.failTrunc}
			l.f = ff
			err := l.Write(ToolCall{RunID: "lost", Tool: "read_protected_document", Outcome: OutcomeOK})
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("Write on a full disk: err = %v, want ENOSPC", err)
			}
			if ff.truncations != 1 {
				t.Errorf("%d truncations, want 1", ff.truncations)
			}
			if b, _ := os.ReadFile(path); tc.failTrunc == (b[len(b)-1] == '\n') {
				t.Errorf("after the failed write the file ends %q", b[max(0, len(b)-30):])
			}
			if err := l.Write(Shutdown{RunID: "after", Reason: "signal"}); err != nil {
				t.Fatal(err)
			}
			lines, valid := splitLines(t, path)
			if len(valid) != len(tc.want) {
				t.Fatalf("lines %q, want %d", lines, len(tc.want))
			}
			for i := range valid {
				if valid[i] != tc.want[i] {
					t.Errorf("line %d %q parses: %v, want %v", i+1, lines[i], valid[i], tc.want[i])
				}
			}
			if !strings.Contains(lines[0], `"before"`) || !strings.Contains(lines[len(lines)-1], `"after"`) {
				t.Errorf("lines %q", lines)
			}
			// The fence is one newline, once: the line after is plain.
			if err := l.Write(Shutdown{RunID: "later"}); err != nil {
				t.Fatal(err)
			}
			if lines2, _ := splitLines(t, path); len(lines2) != len(lines)+1 {
				t.Errorf("one more write gave %d lines, want %d", len(lines2), len(lines)+1)
			}
		})
	}
}

// TestTakeBackLeavesAnotherWritersLine: when the file no longer ends in
// the failed write's bytes (another process appended after them), nothing
// is truncated and the next line is fenced instead.
func TestTakeBackLeavesAnotherWritersLine(t *testing.T) {
	l, path := openTemp(t)
	if err := l.Write(Startup{RunID: "before", Transport: "stdio"}); err != nil {
		t.Fatal(err)
	}
	other := `{"event":"shutdown","runId":"other"}` + "\n"
	if _, err := l.f.Write([]byte(`{"event":"tool"` + other)); err != nil {
		t.Fatal(err)
	}
	if what := l.takeBack([]byte(`{"event":"tool"`)); !strings.Contains(what, "could not be removed") {
		t.Errorf("takeBack: %s", what)
	}
	if err := l.Write(Shutdown{RunID: "after"}); err != nil {
		t.Fatal(err)
	}
	lines, valid := splitLines(t, path)
	// before, the fragment the other line joined (that cannot be
	// helped), the fence, after.
	if len(lines) != 4 || !strings.Contains(lines[1], `"runId":"other"`) || lines[2] != "\n" ||
		!valid[3] || !strings.Contains(lines[3], `"after"`) {
		t.Errorf("lines %q", lines)
	}
}
