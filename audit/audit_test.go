package audit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/internal/testutil"
)

func openTemp(t *testing.T) (*Log, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l, err := Open(path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l, path
}

// readLines parses every line of the file as one JSON object.
func readLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		t.Fatalf("file does not end with a newline")
	}
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %d is not one JSON object: %v: %q", len(out)+1, err, sc.Text())
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// fixed is the time every golden line carries.
func fixed() time.Time { return time.Date(2026, 10, 24, 12, 0, 0, 0, time.UTC) }

func sampleLines() []Line {
	return []Line{
		Startup{RunID: "run-1", ProgramVersion: "0.1.0", Transport: "stdio", GrantID: "grant-1", TS: fixed()},
		Client{RunID: "run-1", Name: "claude-code", Version: "2.1.283", Elicitation: true, ProtocolVersion: "2025-11-25", TS: fixed()},
		ToolCall{
			RunID: "run-1", GrantID: "grant-1", ActingAs: "svc.agent", JKT: "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs",
			HandleDigest: Digest12("session-handle"), Tool: "read_protected_document", DocumentID: "ccd-0001", Version: 3,
			Outcome: OutcomeRefused, Layer: LayerKeyServer, Code: "ACL_DENIED", Status: 403,
			StartedAt: fixed().Add(1500 * time.Microsecond), LatencyMs: 42,
			GatewayRequests: []Request{
				{Route: "/api/v1/auth/scoped", Status: 200, LatencyMs: 12},
				{Route: "/api/v1/crypto/decrypt", Status: 403, Code: "ACL_DENIED", LatencyMs: 20},
			},
			ServiceRelogin: true,
			Sections: []Section{
				{ID: "problems", Outcome: OutcomeOK, StartedAt: fixed().Add(2 * time.Millisecond), LatencyMs: 9},
				{ID: "results", Outcome: OutcomeRefused, Layer: LayerKeyServer, Code: "ACL_DENIED",
					StartedAt: fixed().Add(11*time.Millisecond + 700*time.Microsecond), LatencyMs: 11},
				// No time of its own: the call's.
				{ID: "vitals", Outcome: OutcomeOK},
			},
		},
		ToolCall{
			RunID: "run-1", GrantID: "grant-1", Caller: "alice", Tool: "encrypt_file", Outcome: OutcomeOK,
			StartedAt: fixed(), LatencyMs: 7, Path: "notes/report.docx",
			PlaintextSHA256: "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
			Minted:          true, KeyLink: Digest12("hidden-link"),
			TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", SpanID: "00f067aa0ba902b7",
		},
		AuthRefused{Class: "expired", Reason: "TOKEN_EXPIRED", Status: 401, Method: "POST", Path: "/mcp", TS: fixed()},
		RefusalSummary{Class: "expired", Reason: "TOKEN_EXPIRED", Status: 401, Count: 41,
			First: fixed().Add(3 * time.Millisecond), Last: fixed().Add(998 * time.Millisecond)},
		Shutdown{RunID: "run-1", Reason: "SIGTERM", TS: fixed()},
	}
}

func TestGolden(t *testing.T) {
	l, path := openTemp(t)
	for _, line := range sampleLines() {
		if err := l.Write(line); err != nil {
			t.Fatalf("Write(%T): %v", line, err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Golden(t, filepath.Join("testdata", "lines.golden.jsonl"), got)
	events := []string{EventStartup, EventClient, EventTool, EventTool, EventAuthRefused, EventRefusalSummary, EventShutdown}
	lines := readLines(t, path)
	if len(lines) != len(events) {
		t.Fatalf("%d lines, want %d", len(lines), len(events))
	}
	for i, m := range lines {
		if m["event"] != events[i] {
			t.Errorf("line %d: event %v, want %s", i+1, m["event"], events[i])
		}
	}
}

func TestConcurrentWritersWriteWholeLines(t *testing.T) {
	l, path := openTemp(t)
	const writers, each = 50, 20
	// Long enough lines that an interleaved write would show.
	sections := make([]Section, 30)
	for i := range sections {
		sections[i] = Section{ID: fmt.Sprintf("section-%02d", i), Outcome: OutcomeOK, LatencyMs: int64(i)}
	}
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				errs <- l.Write(ToolCall{RunID: fmt.Sprint("w", w), Tool: "read_protected_document",
					Outcome: OutcomeOK, StartedAt: fixed(), LatencyMs: int64(i), Sections: sections})
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	lines := readLines(t, path)
	if len(lines) != writers*each {
		t.Fatalf("%d lines, want %d", len(lines), writers*each)
	}
	seen := map[string]int{}
	for _, m := range lines {
		if secs, _ := m["sections"].([]any); len(secs) != len(sections) {
			t.Fatalf("a line has %d sections, want %d", len(secs), len(sections))
		}
		seen[fmt.Sprint(m["runId"], "/", m["latencyMs"])]++
	}
	for w := range writers {
		for i := range each {
			if k := fmt.Sprint("w", w, "/", i); seen[k] != 1 {
				t.Errorf("line %s written %d times", k, seen[k])
			}
		}
	}
}

func TestOpenCreatesPrivateFileAndAppends(t *testing.T) {
	l, path := openTemp(t)
	if err := l.Write(Shutdown{RunID: "first"}); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if runtime.GOOS != "windows" {
		testutil.WantMode(t, path, 0o600)
	}
	l2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := l2.Write(Shutdown{RunID: "second"}); err != nil {
		t.Fatal(err)
	}
	l2.Close()
	lines := readLines(t, path)
	if len(lines) != 2 || lines[0]["runId"] != "first" || lines[1]["runId"] != "second" {
		t.Fatalf("lines after reopening: %v", lines)
	}
	// A zero timestamp is filled in.
	ts, err := time.Parse(time.RFC3339Nano, fmt.Sprint(lines[0]["ts"]))
	if err != nil || ts.Year() < 2000 {
		t.Errorf("ts = %v (%v), want the time of writing", lines[0]["ts"], err)
	}
}

func TestOpenRefusals(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Log("permission bits and O_NOFOLLOW are Unix checks")
		return
	}
	dir := t.TempDir()
	shared := filepath.Join(dir, "shared.jsonl")
	if err := os.WriteFile(shared, []byte("kept\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o644); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(dir, "target.jsonl")
	if err := os.WriteFile(target, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.jsonl")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name, path, want string
		is               error
	}{
		{"0644 file", shared, "audit: " + shared + " has mode 0644: group and others must have no access (chmod 600)", ErrUnsafeMode},
		{"symbolic link", link, "symbolic link", nil},
		{"directory", dir, dir, nil},
		{"no path", "", "Discard", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, err := Open(tc.path)
			if err == nil {
				l.Close()
				t.Fatal("Open succeeded")
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("err = %v, want %v", err, tc.is)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %q, want it to mention %q", err, tc.want)
			}
		})
	}
	if b, _ := os.ReadFile(shared); string(b) != "kept\n" {
		t.Errorf("refused file changed: %q", b)
	}
	if fi, _ := os.Stat(shared); fi.Mode().Perm() != 0o644 {
		t.Errorf("refused file's mode changed to %#o", fi.Mode().Perm())
	}
	if fi, _ := os.Stat(target); fi.Size() != 0 {
		t.Errorf("the link's target was written")
	}
}

func TestNilAndDiscard(t *testing.T) {
	for name, l := range map[string]*Log{"nil": nil, "discard": Discard()} {
		if l.Enabled() {
			t.Errorf("%s: Enabled", name)
		}
		if err := l.Write(Shutdown{RunID: "r"}); err != nil {
			t.Errorf("%s: Write: %v", name, err)
		}
		if err := l.Close(); err != nil {
			t.Errorf("%s: Close: %v", name, err)
		}
	}
}

func TestWriteAfterClose(t *testing.T) {
	l, path := openTemp(t)
	if !l.Enabled() {
		t.Fatal("an open Log is not Enabled")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := l.Write(Shutdown{RunID: "late"}); !errors.Is(err, ErrClosed) {
		t.Errorf("Write after Close: err = %v, want ErrClosed", err)
	}
	if lines := readLines(t, path); len(lines) != 0 {
		t.Errorf("lines after close: %v", lines)
	}
}

// TestIllShapedFieldsAreDropped: a value in the wrong field never reaches the
// file; the rest of the line does, and the error names the field.
func TestIllShapedFieldsAreDropped(t *testing.T) {
	const handle = "sess_4f2a9c1be77d0a5e9d3c"
	const jwt = "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJl"
	tests := []struct {
		name    string
		line    Line
		secret  string
		dropped string // "" when nothing is dropped
		check   func(map[string]any) error
	}{
		{"raw handle as handle digest", ToolCall{Tool: "read_protected_document", Outcome: OutcomeOK, HandleDigest: handle},
			handle, "handleDigest", nil},
		{"token as document id", ToolCall{Tool: "read_protected_document", Outcome: OutcomeOK, DocumentID: "x " + jwt},
			jwt, "documentId", nil},
		{"token as jkt", ToolCall{Tool: "save_protected_result", Outcome: OutcomeOK, JKT: jwt}, jwt, "jkt", nil},
		{"detail as code", ToolCall{Tool: "t", Outcome: OutcomeRefused, Code: "the text was: secret"}, "secret", "code", nil},
		{"link as key link", ToolCall{Tool: "encrypt_file", Outcome: OutcomeOK, KeyLink: "link-7f3e1d"}, "link-7f3e1d", "keyLink", nil},
		{"text in a section code", ToolCall{Tool: "t", Outcome: OutcomeOK, Sections: []Section{{ID: "s", Outcome: OutcomeOK, Code: "Patient has X"}}},
			"Patient has X", "sections.code", nil},
		{"query on a refused path", AuthRefused{Class: "no-token", Reason: "NO_TOKEN", Status: 401, Method: "GET", Path: "/mcp?access_token=" + handle},
			handle, "", func(m map[string]any) error {
				if m["path"] != "/mcp" {
					return fmt.Errorf("path = %v, want /mcp", m["path"])
				}
				return nil
			}},
		{"long client name", Client{Name: strings.Repeat("é", 400), Version: "1"}, strings.Repeat("é", 200), "",
			func(m map[string]any) error {
				if n := len(fmt.Sprint(m["name"])); n > maxClientField {
					return fmt.Errorf("name is %d bytes", n)
				}
				return nil
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, path := openTemp(t)
			err := l.Write(tc.line)
			if tc.dropped == "" && err != nil {
				t.Fatalf("Write: %v", err)
			}
			if tc.dropped != "" {
				if !errors.Is(err, ErrRedacted) || !strings.Contains(err.Error(), tc.dropped) {
					t.Fatalf("Write: err = %v, want ErrRedacted naming %s", err, tc.dropped)
				}
				if strings.Contains(err.Error(), tc.secret) {
					t.Errorf("the error repeats the value")
				}
			}
			b, _ := os.ReadFile(path)
			if bytes.Contains(b, []byte(tc.secret)) {
				t.Errorf("the value reached the file: %s", b)
			}
			lines := readLines(t, path)
			if len(lines) != 1 {
				t.Fatalf("%d lines, want the rest of the line written", len(lines))
			}
			if tc.check != nil {
				if err := tc.check(lines[0]); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

func TestWellShapedFieldsAreKept(t *testing.T) {
	l, path := openTemp(t)
	line := sampleLines()[2].(ToolCall)
	if err := l.Write(line); err != nil {
		t.Fatal(err)
	}
	m := readLines(t, path)[0]
	for k, want := range map[string]any{"jkt": line.JKT, "handleDigest": line.HandleDigest, "code": "ACL_DENIED",
		"layer": "keyserver", "tool": line.Tool, "status": float64(403)} {
		if m[k] != want {
			t.Errorf("%s = %v, want %v", k, m[k], want)
		}
	}
}

func TestDigest12(t *testing.T) {
	tests := []struct{ in, want string }{
		{"abc", "ba7816bf8f01"},
		{"", "e3b0c44298fc"},
	}
	for _, tc := range tests {
		if got := Digest12(tc.in); got != tc.want {
			t.Errorf("Digest12(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
