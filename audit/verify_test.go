package audit

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// writeChained writes n tool lines (after the sample lines) to a new file
// through the package's own Log and returns the file's path.
func writeChained(t *testing.T, n int, o Options) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l, err := OpenWith(path, o)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range sampleLines() {
		if err := l.Write(line); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		if err := l.Write(ToolCall{RunID: "run-1", Tool: "read_protected_document", Outcome: OutcomeOK,
			StartedAt: fixed(), LatencyMs: int64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// fileLines is a file's lines, each with its newline.
func fileLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(b), "\n")
	return lines[:len(lines)-1]
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

func verify(t *testing.T, o VerifyOptions, paths ...string) *Report {
	t.Helper()
	rep, err := Verify(context.Background(), paths, o)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	return rep
}

// wantBreak checks that the first break is kind at file:line.
func wantBreak(t *testing.T, rep *Report, file string, line int, kind string) {
	t.Helper()
	if rep.Whole || len(rep.Breaks) == 0 {
		t.Fatalf("Verify found the file whole: %+v", rep)
	}
	b := rep.Breaks[0]
	if b.File != file || b.Line != line || b.Kind != kind {
		t.Fatalf("first break %+v, want %s at %s:%d (all: %+v)", b, kind, filepath.Base(file), line, rep.Breaks)
	}
	if b.Detail == "" {
		t.Errorf("the break says nothing of what broke")
	}
}

func wantWhole(t *testing.T, rep *Report) {
	t.Helper()
	if !rep.Whole || rep.BreakCount != 0 {
		t.Fatalf("Verify: not whole: %+v", rep.Breaks)
	}
}

// TestVerifyFindsEachTampering: a file the Log wrote verifies whole, and
// each edit, insertion, removal, reordering and cut tail is found at the
// first line that breaks.
func TestVerifyFindsEachTampering(t *testing.T) {
	const n = 6 // 7 sample lines and 6 more: 13 lines
	orig := fileLines(t, writeChained(t, n, Options{}))
	if len(orig) != 13 {
		t.Fatalf("%d lines written, want 13", len(orig))
	}
	handMade := `{"event":"tool","runId":"run-1","tool":"read_protected_document","outcome":"ok","startedAt":"2026-10-24T12:00:00Z","latencyMs":1}` + "\n"
	tests := []struct {
		name string
		edit func(l []string) []string
		line int // the first line that breaks; 0: whole
		kind string
	}{
		{"untouched", func(l []string) []string { return l }, 0, ""},
		{"a value edited", func(l []string) []string {
			l[2] = strings.Replace(l[2], `"latencyMs":42`, `"latencyMs":4`, 1)
			return l
		}, 4, BreakPrev},
		{"an outcome edited", func(l []string) []string {
			l[9] = strings.Replace(l[9], `"outcome":"ok"`, `"outcome":"refused"`, 1)
			return l
		}, 11, BreakPrev},
		{"a line removed", func(l []string) []string { return del(l, 4) }, 5, BreakPrev},
		{"the first line removed", func(l []string) []string { return del(l, 0) }, 1, BreakFileStart},
		{"a line copied in", func(l []string) []string { return ins(l, 6, l[3]) }, 7, BreakPrev},
		{"a hand-made line inserted", func(l []string) []string { return ins(l, 6, handMade) }, 7, BreakUnchained},
		{"a hand-made line appended", func(l []string) []string { return append(l, handMade) }, 14, BreakUnchained},
		{"two lines swapped", func(l []string) []string {
			l[7], l[8] = l[8], l[7]
			return l
		}, 8, BreakPrev},
		{"the first line moved down", func(l []string) []string { return ins(del(l, 0), 3, l[0]) }, 1, BreakFileStart},
		{"the tail cut inside a line", func(l []string) []string {
			l[12] = l[12][:40]
			return l
		}, 13, BreakTornTail},
		{"the newline cut off the end", func(l []string) []string {
			l[12] = strings.TrimSuffix(l[12], "\n")
			return l
		}, 13, BreakTornTail},
		{"a prev rewritten", func(l []string) []string {
			l[5] = l[5][:len(l[5])-67] + strings.Repeat("a", 64) + "\"}\n"
			return l
		}, 6, BreakPrev},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "audit.jsonl")
			writeFile(t, path, strings.Join(tc.edit(append([]string(nil), orig...)), ""))
			rep := verify(t, VerifyOptions{}, path)
			if tc.line == 0 {
				wantWhole(t, rep)
				if rep.Files[0].Lines != 13 || rep.Head != lineHash([]byte(strings.TrimSuffix(orig[12], "\n"))) {
					t.Errorf("report %+v, want 13 lines and the last line's hash as head", rep)
				}
				return
			}
			wantBreak(t, rep, path, tc.line, tc.kind)
		})
	}
}

func del(l []string, i int) []string { return append(l[:i:i], l[i+1:]...) }
func ins(l []string, i int, s string) []string {
	return append(append(l[:i:i], s), l[i:]...)
}

// TestChainIsWhatTheDocsSay checks the file against the definition in
// chain.go with nothing of the package: each JSON line's prev is the
// SHA-256 of the bytes of the line before it, without its newline, and the
// first line names ZeroHash as prevFile.
func TestChainIsWhatTheDocsSay(t *testing.T) {
	lines := fileLines(t, writeChained(t, 3, Options{}))
	var prev string
	for i, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		want := strings.Repeat("0", 64)
		if want != ZeroHash {
			t.Fatalf("ZeroHash is not 64 zeros")
		}
		name := "prevFile"
		if i > 0 {
			want, name = prev, "prev"
		}
		if m[name] != want || len(m) < 3 {
			t.Fatalf("line %d: %s = %v, want %s", i+1, name, m[name], want)
		}
		sum := sha256.Sum256([]byte(strings.TrimSuffix(l, "\n")))
		prev = hex.EncodeToString(sum[:])
	}
}

// TestChainAcrossRestartsAndSharedWriters: a Log that opens a file with
// lines in it chains from its last line, and two Logs on one file (two
// servers sharing it) keep one chain between them.
func TestChainAcrossRestartsAndSharedWriters(t *testing.T) {
	path := writeChained(t, 2, Options{})
	a, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		l := a
		if i%3 == 0 {
			l = b
		}
		if err := l.Write(Shutdown{RunID: fmt.Sprint("w", i), TS: fixed()}); err != nil {
			t.Fatal(err)
		}
	}
	a.Close()
	b.Close()
	rep := verify(t, VerifyOptions{}, path)
	wantWhole(t, rep)
	if rep.Files[0].Lines != 19 {
		t.Fatalf("%d lines, want 19", rep.Files[0].Lines)
	}
}

// TestChainAcrossAFencedFragment: a torn line left by a crash, fenced at
// the next open, is reported but is not part of the chain; nor is what a
// write that failed part-way left, whether or not it could be taken back.
func TestChainAcrossAFencedFragment(t *testing.T) {
	path := writeChained(t, 1, Options{})
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"event":"tool","runId":"run-1","tool":"read_prot`)
	f.Close()
	l, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Write(Startup{RunID: "run-2", Transport: "stdio"}); err != nil {
		t.Fatal(err)
	}
	// Cut 20 bytes into the line, and cut only its newline: a whole line
	// left unended, which the fence ahead of the next line ends.
	for _, cut := range []func(int) int{func(int) int { return 20 }, func(n int) int { return n - 1 }} {
		cf := &cutFile{File: l.f.(*os.File), keep: cut}
		l.f = cf
		if err := l.Write(ToolCall{RunID: "lost", Tool: "read_protected_document", Outcome: OutcomeOK}); !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("the failing write: %v", err)
		}
		l.f = cf.File
		if err := l.Write(Shutdown{RunID: "run-2", Reason: "after", TS: fixed()}); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	rep := verify(t, VerifyOptions{}, path)
	wantWhole(t, rep)
	// 8 lines, the fenced fragment, the startup line, the cut line, the
	// shutdown, the line whole but its newline, the shutdown.
	if rep.NoteCount != 2 || rep.Notes[0].Kind != NoteFragment || rep.Notes[0].Line != 9 || rep.Notes[1].Line != 11 {
		t.Fatalf("notes %+v, want the two fragments at lines 9 and 11", rep.Notes)
	}
	if rep.Files[0].Lines != 12 {
		t.Fatalf("%d whole lines, want 12", rep.Files[0].Lines)
	}
	b, _ := os.ReadFile(path)
	if !bytes.Contains(b, []byte(`"runId":"lost"`)) {
		t.Fatalf("the write left whole but its newline is not in the file")
	}
}

// TestChainAcrossFiles: a file the server opened empty at start-up, after
// the one before was renamed away, starts a chain of its own: each file
// verifies whole alone, the two together break where the join is not
// proved.
func TestChainAcrossFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.jsonl")
	rotate := func(i int) string {
		old := fmt.Sprintf("%s.%d", path, i)
		if err := os.Rename(path, old); err != nil {
			t.Fatal(err)
		}
		return old
	}
	l, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	write := func(run string) {
		for i := range 3 {
			if err := l.Write(Shutdown{RunID: run, Reason: fmt.Sprint("r", i), TS: fixed()}); err != nil {
				t.Fatal(err)
			}
		}
	}
	write("a")
	// Renamed under the open Log, which writes on to it until reopened;
	// the new file at path is opened at the next start.
	f1 := rotate(1)
	write("b")
	l.Close()
	if l, err = Open(path); err != nil {
		t.Fatal(err)
	}
	write("c")
	l.Close()

	wantBreak(t, verify(t, VerifyOptions{}, f1, path), path, 1, BreakNewChain)
	for _, p := range []string{f1, path} {
		rep := verify(t, VerifyOptions{}, p)
		wantWhole(t, rep)
		if rep.NoteCount != 0 {
			t.Errorf("%s, a file that starts a chain, given alone: notes %+v", p, rep.Notes)
		}
	}
}

// TestVerifySignedHeads: with a key, the Log signs the head every
// HeadEvery lines and at Close; Verify with the public key holds them, and
// finds a file rewritten with a new chain by someone without the key, a
// head changed, and the wrong key.
func TestVerifySignedHeads(t *testing.T) {
	key, pub := testHeadKey(t)
	path := writeChained(t, 2*HeadEvery, Options{HeadKey: key})
	lines := fileLines(t, path)
	heads := 0
	for _, l := range lines {
		if strings.HasPrefix(l, `{"event":"audit-head"`) {
			heads++
		}
	}
	// 7 + 128 lines: heads after 64, after 128 (and its head), and at Close.
	if heads != 3 {
		t.Fatalf("%d heads, want 3", heads)
	}
	rep := verify(t, VerifyOptions{Key: pub}, path)
	wantWhole(t, rep)
	if rep.SignedHeads != 3 || rep.NoteCount != 0 {
		t.Fatalf("report %+v, want 3 signed heads and no unsigned tail", rep)
	}
	if !verify(t, VerifyOptions{}, path).Whole {
		t.Fatal("without a key the signed file is not whole")
	}

	// Rewritten by someone without the key: the chain holds, the heads do not.
	forged := rechain(t, lines, func(l string) string {
		return strings.Replace(l, `"outcome":"refused"`, `"outcome":"ok"`, 1)
	})
	fp := filepath.Join(t.TempDir(), "forged.jsonl")
	writeFile(t, fp, forged)
	wantWhole(t, verify(t, VerifyOptions{}, fp))
	wantBreak(t, verify(t, VerifyOptions{Key: pub}, fp), fp, 1+HeadEvery, BreakSignature)
	// The same with the heads dropped.
	var noHeads []string
	for _, l := range lines {
		if !strings.Contains(l, `"audit-head"`) {
			noHeads = append(noHeads, l)
		}
	}
	writeFile(t, fp, rechain(t, noHeads, func(l string) string { return l }))
	wantBreak(t, verify(t, VerifyOptions{Key: pub}, fp), fp, 0, BreakSignature)

	_, other := testHeadKey(t)
	wantBreak(t, verify(t, VerifyOptions{Key: other}, path), path, 1+HeadEvery, BreakSignature)
}

// rechain edits each line and computes the chain anew, as anyone who can
// write the file can.
func rechain(t *testing.T, lines []string, edit func(string) string) string {
	t.Helper()
	var out strings.Builder
	prev := ZeroHash
	for i, l := range lines {
		l = edit(strings.TrimSuffix(l, "\n"))
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		cut := strings.LastIndex(l, `,"prev`)
		name := "prev"
		if i == 0 {
			name = "prevFile"
		}
		l = l[:cut] + `,"` + name + `":"` + prev + `"}`
		out.WriteString(l + "\n")
		prev = lineHash([]byte(l))
	}
	return out.String()
}

// TestSignedHeadAfterAnInterval: a head follows the first line written
// HeadInterval after the last one, however few lines came between.
func TestSignedHeadAfterAnInterval(t *testing.T) {
	key, pub := testHeadKey(t)
	l, path, clock, _ := openClocked(t)
	l.headKey, l.headAt = key, clock.Now()
	for i := range 3 {
		if err := l.Write(Shutdown{RunID: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
		clock.Advance(HeadInterval / 2)
	}
	// Not closed: only the interval wrote a head.
	lines := fileLines(t, path)
	if len(lines) != 4 || !strings.Contains(lines[3], EventHead) {
		t.Fatalf("lines %q, want a head after the third", lines)
	}
	rep := verify(t, VerifyOptions{Key: pub}, path)
	wantWhole(t, rep)
	if rep.SignedHeads != 1 {
		t.Fatalf("%d signed heads, want 1", rep.SignedHeads)
	}
	if err := l.Write(Shutdown{RunID: "later"}); err != nil {
		t.Fatal(err)
	}
	rep = verify(t, VerifyOptions{Key: pub}, path)
	if !rep.Whole || rep.NoteCount != 1 || rep.Notes[0].Kind != NoteUnsigned {
		t.Fatalf("report %+v, want whole with an unsigned tail noted", rep)
	}
}

// TestVerifyReportsAnUnreadableFile: a file that cannot be read is an
// error, not a finding.
func TestVerifyReportsAnUnreadableFile(t *testing.T) {
	_, err := Verify(context.Background(), []string{filepath.Join(t.TempDir(), "missing.jsonl")}, VerifyOptions{})
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("err = %v, want the file missing", err)
	}
	if _, err := Verify(context.Background(), nil, VerifyOptions{}); err == nil {
		t.Fatal("no files: no error")
	}
}

// cutFile writes only keep(len) bytes of the next write, then fails as a
// full disk does, and cannot take them back.
type cutFile struct {
	*os.File
	keep func(n int) int
	done bool
}

func (f *cutFile) Write(p []byte) (int, error) {
	if f.done {
		return f.File.Write(p)
	}
	f.done = true
	n, err := f.File.Write(p[:f.keep(len(p))])
	if err != nil {
		return n, err
	}
	return n, &os.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
}

func (f *cutFile) Truncate(int64) error {
	return &os.PathError{Op: "truncate", Path: f.Name(), Err: syscall.EIO}
}

// testHeadKey is a new Ed25519 key, to sign with, and its public half.
func testHeadKey(t *testing.T) (priv, pub *HeadKey) {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	priv = NewHeadKey(k)
	return priv, PublicHeadKey(k.Public().(ed25519.PublicKey))
}

// TestVerifyKeptHead: a head kept from an earlier verify is found while
// the file only grows, and missing once lines up to it are cut off the
// end, which the chain alone cannot show.
func TestVerifyKeptHead(t *testing.T) {
	path := writeChained(t, 4, Options{})
	kept := verify(t, VerifyOptions{}, path).Head
	l, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Write(Shutdown{RunID: "later"}); err != nil {
		t.Fatal(err)
	}
	l.Close()
	wantWhole(t, verify(t, VerifyOptions{Heads: []string{kept}}, path))

	lines := fileLines(t, path)
	cut := filepath.Join(t.TempDir(), "cut.jsonl")
	writeFile(t, cut, strings.Join(lines[:len(lines)-2], ""))
	wantWhole(t, verify(t, VerifyOptions{}, cut))
	wantBreak(t, verify(t, VerifyOptions{Heads: []string{kept}}, cut), cut, 0, BreakHeadMissing)

	if _, err := Verify(context.Background(), []string{path}, VerifyOptions{Heads: []string{"nothex"}}); err == nil {
		t.Fatal("a head that is no hash was taken")
	}
}

// TestChainAcrossCopyTruncate: rotation by copying the file and cutting
// it to nothing under the open Log (logrotate's copytruncate): the next
// line is the file's first and names the copy's last line, so the copies
// and the file verify whole together, oldest first. Out of order, with a
// file left out, or with an earlier file's end cut, they break at the
// first line of the file after the gap.
func TestChainAcrossCopyTruncate(t *testing.T) {
	l, path := openTemp(t)
	write := func(run string) {
		for i := range 3 {
			if err := l.Write(Shutdown{RunID: run, Reason: fmt.Sprint("r", i), TS: fixed()}); err != nil {
				t.Fatal(err)
			}
		}
	}
	copyTruncate := func(to string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, to, string(b))
		if err := os.Truncate(path, 0); err != nil {
			t.Fatal(err)
		}
		return to
	}
	write("a")
	f2 := copyTruncate(path + ".2")
	write("b")
	f1 := copyTruncate(path + ".1")
	write("c")
	l.Close()
	first := fileLines(t, f1)[0]
	if last := fileLines(t, f2)[2]; !strings.Contains(first, `"prevFile":"`+lineHash([]byte(strings.TrimSuffix(last, "\n")))+`"`) {
		t.Fatalf("the first line after the cut %q does not name the copy's last line", first)
	}
	rep := verify(t, VerifyOptions{}, f2, f1, path)
	wantWhole(t, rep)
	if rep.NoteCount != 0 || len(rep.Files) != 3 || rep.Files[0].Lines != 3 {
		t.Fatalf("report %+v, want three files of three lines that join", rep)
	}
	wantBreak(t, verify(t, VerifyOptions{}, f2, path), path, 1, BreakFileJoin)
	wantBreak(t, verify(t, VerifyOptions{}, f1, f2, path), f2, 1, BreakNewChain)
	cutEnd := filepath.Join(t.TempDir(), "audit.jsonl.1")
	writeFile(t, cutEnd, strings.Join(fileLines(t, f1)[:2], ""))
	wantBreak(t, verify(t, VerifyOptions{}, f2, cutEnd, path), path, 1, BreakFileJoin)
	// Given alone, a file that continues another says so.
	rep = verify(t, VerifyOptions{}, path)
	if !rep.Whole || rep.NoteCount != 1 || rep.Notes[0].Kind != NoteContinues {
		t.Fatalf("the newest file alone: %+v, want whole with a note that it continues another", rep)
	}
}

// TestChainAcrossReopen: after a rename and a Reopen (SIGHUP rotation) the
// new file's first line names the rotated file's last line, so the two
// verify whole together; with a key, the rotated file ends with a signed
// head. A Reopen with no rename goes on in the same file.
func TestChainAcrossReopen(t *testing.T) {
	key, pub := testHeadKey(t)
	for _, keyed := range []bool{false, true} {
		t.Run(fmt.Sprint("keyed=", keyed), func(t *testing.T) {
			o := Options{}
			vo := VerifyOptions{}
			if keyed {
				o.HeadKey, vo.Key = key, pub
			}
			path := filepath.Join(t.TempDir(), "audit.jsonl")
			l, err := OpenWith(path, o)
			if err != nil {
				t.Fatal(err)
			}
			write := func(run string) {
				for i := range 3 {
					if err := l.Write(Shutdown{RunID: run, Reason: fmt.Sprint("r", i), TS: fixed()}); err != nil {
						t.Fatal(err)
					}
				}
			}
			write("a")
			// No rename: the same file goes on.
			if err := l.Reopen(); err != nil {
				t.Fatal(err)
			}
			write("b")
			rotated := path + ".1"
			if err := os.Rename(path, rotated); err != nil {
				t.Fatal(err)
			}
			if err := l.Reopen(); err != nil {
				t.Fatal(err)
			}
			write("c")
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			old := fileLines(t, rotated)
			last := strings.TrimSuffix(old[len(old)-1], "\n")
			if keyed != strings.Contains(last, `"event":"audit-head"`) {
				t.Fatalf("the rotated file ends %q; a signed head there: %v", last, keyed)
			}
			if first := fileLines(t, path)[0]; !strings.Contains(first, `"prevFile":"`+lineHash([]byte(last))+`"`) {
				t.Fatalf("the new file's first line %q does not name the rotated file's last", first)
			}
			rep := verify(t, vo, rotated, path)
			wantWhole(t, rep)
			if rep.NoteCount != 0 {
				t.Fatalf("notes %+v, want none", rep.Notes)
			}
			if keyed && rep.SignedHeads < 2 {
				t.Fatalf("%d signed heads, want the rotation's and the close's", rep.SignedHeads)
			}
		})
	}
}
