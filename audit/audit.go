// Package audit writes the server's audit file: one JSON line per tool call
// and per client at initialize, and for HTTP requests refused for their
// token one line per kind a second with the rest counted (Log.Refused).
//
// A line joins to the key server's own audit by acting principal, the
// object's hidden link (as a digest) and time. It never holds a token, a
// session handle, a proof, a key or document text. The line types are fixed
// structs with no free-form values, and Write drops any field whose value
// does not have the shape that field allows (a digest that is not 12 hex
// digits, a code that is not a code, anything that looks like a JWT) before
// the line reaches the file. Each line is written whole or not at all, and a
// torn last line left by a crash is fenced off when the file is opened.
//
// Each line ends with the hash of the line before it (chain.go), so that
// Verify finds any line edited, inserted, removed or moved, and with a key
// the chain's head is signed now and then (heads.go). A line written
// within a trace span names the span (Trace).
package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/pdmcp/pdmcp/internal/safefile"
)

// Errors callers match with errors.Is.
var (
	// ErrUnsafeMode: the file exists and group or others can access it.
	ErrUnsafeMode = errors.New("audit file is accessible to group or others")
	// ErrRedacted: a line was written without fields whose values had the
	// wrong shape; the error names the fields, never the values.
	ErrRedacted = errors.New("audit line written without fields of the wrong shape")
	// ErrClosed: Write after Close.
	ErrClosed = errors.New("audit log is closed")
)

// Log is an open audit file. A nil *Log, and the one Discard returns,
// accept every call and write nothing, so callers need no nil checks. A Log
// is safe for concurrent use; each line is one write(2) of the whole line,
// its newline included, on a file opened for appending, so lines from
// goroutines (or processes) never interleave.
type Log struct {
	mu     sync.Mutex
	f      appendFile
	path   string
	closed bool
	// torn: a write failed part-way and its bytes could not be taken back,
	// so the file ends in a fragment; the next line starts with a newline
	// to fence it off rather than join it.
	torn bool
	// chain is the hash chain's state (see chain.go).
	chain chainState
	// headKey signs heads (heads.go); sinceHead counts the lines since
	// the last signed head, written at headAt.
	headKey   *HeadKey
	sinceHead int
	headAt    time.Time

	logger *slog.Logger
	now    func() time.Time
	// refusals aggregates refused-request lines (see Refused).
	refusals refusalTally
}

// appendFile is what a Log needs of its file; *os.File in use, a file
// that fails part-way in tests.
type appendFile interface {
	io.Writer
	io.ReaderAt
	io.Seeker
	Stat() (os.FileInfo, error)
	Truncate(size int64) error
	Sync() error
	Close() error
}

// Options configure OpenWith.
type Options struct {
	// Logger gets the warnings the Log writes of its own (a torn line
	// fenced off at open, refusal summaries); slog.Default() when nil.
	Logger *slog.Logger
	// Now times the refusal windows; time.Now when nil.
	Now func() time.Time
	// HeadKey, when it holds a private key, signs the chain's head now and
	// then in an "audit-head" line (see heads.go); nil writes none.
	HeadKey *HeadKey
}

// Open is OpenWith with the default Options.
func Open(path string) (*Log, error) { return OpenWith(path, Options{}) }

// OpenWith opens path for appending, creating it with mode 0600. It
// refuses an existing file that group or others can access, one that is
// not a regular file, and (on Unix) a symbolic link, leaving the file as it
// was. A file whose last line was torn (a full disk, a crash) has the
// fragment fenced off (see fenceTornTail).
func OpenWith(path string, o Options) (*Log, error) {
	if path == "" {
		return nil, errors.New("audit: no path given (use audit.Discard() to run without an audit file)")
	}
	f, fi, err := openChecked(path)
	if err != nil {
		return nil, err
	}
	l := newLog(o)
	l.f, l.path = f, path
	l.fenceTornTail(fi.Size())
	if err := l.seedChain(); err != nil {
		// Tried again before the first line.
		l.slogger().Warn("audit file's last line could not be read to chain from; trying again at the next line",
			"path", l.path, "err", err)
	}
	return l, nil
}

// openChecked opens path for appending and checks it is a private
// regular file, closing it when it is not.
func openChecked(path string) (*os.File, os.FileInfo, error) {
	f, err := openAppend(path)
	if err != nil {
		return nil, nil, fmt.Errorf("audit: open %s: %w", path, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("audit: stat %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("audit: %s is not a regular file", path)
	}
	if err := checkPrivate(fi); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("audit: %w", modeError{&safefile.ModeError{Path: path, Mode: fi.Mode(), Secret: true}})
	}
	return f, fi, nil
}

func newLog(o Options) *Log {
	l := &Log{logger: o.Logger, now: o.Now}
	if o.HeadKey.CanSign() {
		l.headKey = o.HeadKey
		l.headAt = l.clock()
	}
	return l
}

// clock is the Log's time; time.Now for a Log not made by Open or Discard.
func (l *Log) clock() time.Time {
	if l.now == nil {
		return time.Now()
	}
	return l.now()
}

// maxFenceScan bounds how far back fenceTornTail looks for the last
// newline to report the fragment's length.
const maxFenceScan = 1 << 20

// fenceTornTail ends a file that does not end in a newline with one, so
// the torn fragment stands alone as a line no JSON reader accepts and the
// next line is whole. The fragment is kept, not truncated: the audit file
// only ever grows (it may be append-only to the system), and the fragment
// is the evidence of what was being written when the disk filled or the
// process died. A WARN line says how many bytes were fenced off. If even
// the newline cannot be written, the first Write starts with one.
func (l *Log) fenceTornTail(size int64) {
	if size == 0 {
		return
	}
	last := make([]byte, 1)
	if _, err := l.f.ReadAt(last, size-1); err != nil {
		// Cannot tell: fence anyway; an empty line costs one byte and
		// every reader skips it.
		l.torn = true
		l.slogger().Warn("audit file's last byte could not be read; the next line starts on a line of its own",
			"path", l.path, "err", err)
		return
	}
	if last[0] == '\n' {
		return
	}
	n, atLeast := l.fragmentLen(size)
	attrs := []any{"path", l.path, "bytes", n}
	if atLeast {
		attrs = append(attrs, "atLeast", true)
	}
	if _, err := l.f.Write([]byte{'\n'}); err != nil {
		l.torn = true
		l.slogger().Warn("audit file ends in a torn line that could not be fenced off yet; the next line starts on a line of its own",
			append(attrs, "err", err)...)
		return
	}
	l.slogger().Warn("audit file ended in a torn line (a full disk or a crash); fenced it off with a newline", attrs...)
}

// fragmentLen counts the bytes after the file's last newline, looking
// back at most maxFenceScan bytes (atLeast when it found none there).
func (l *Log) fragmentLen(size int64) (n int64, atLeast bool) {
	buf := make([]byte, 4096)
	for off := size; off > 0; {
		if size-off >= maxFenceScan {
			return size - off, true
		}
		chunk := int64(len(buf))
		if off < chunk {
			chunk = off
		}
		off -= chunk
		b := buf[:chunk]
		if _, err := l.f.ReadAt(b, off); err != nil {
			return size - off - chunk, true
		}
		if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
			return size - (off + int64(i) + 1), false
		}
	}
	return size, false
}

// Discard returns a Log that writes nothing.
func Discard() *Log { return newLog(Options{}) }

// Enabled reports whether lines go to a file.
func (l *Log) Enabled() bool {
	if l == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f != nil
}

// Write appends one line. A zero timestamp is set to now. If a field had
// to be dropped, the rest of the line is still written and the error wraps
// ErrRedacted. A Shutdown line first writes the summaries of refusals still
// being counted, so they come ahead of it.
func (l *Log) Write(line Line) error {
	if l == nil || line == nil {
		return nil
	}
	if _, ok := line.(Shutdown); ok {
		l.flushRefusals(true)
	}
	return l.write(line)
}

// WriteToolCall is Write of a tool call's line, the line written per call:
// it takes the line as it is, not as an interface value, which would copy
// it to the heap.
func (l *Log) WriteToolCall(c ToolCall) error {
	if l == nil {
		return nil
	}
	return l.writeToolCall(&c)
}

// write is Write without the Shutdown rule.
func (l *Log) write(line Line) error {
	if tc, ok := line.(ToolCall); ok {
		return l.writeToolCall(&tc)
	}
	v, dropped := line.prepare(l.clock())
	out, err := encodeLine(line.event(), v)
	if err != nil {
		return err
	}
	return l.commit(line.event(), out, dropped)
}

// writeToolCall writes a tool call's line, encoded without reflection
// (appendToolCall) unless it holds what only encoding/json writes.
func (l *Log) writeToolCall(c *ToolCall) error {
	tc, dropped := c.sanitized(l.clock())
	// Room for the chain's member too, so that chaining does not copy it.
	out, ok := appendToolCall(append(make([]byte, 0, 512+memberRoom), "\n{\"event\":\""+EventTool+"\","...), tc)
	if !ok {
		var err error
		if out, err = encodeLine(EventTool, tc); err != nil {
			return err
		}
	}
	return l.commit(EventTool, out, dropped)
}

// encodeLine is a prepared line v of event as the file has it, but for its
// chain member (see appendLocked): a newline (written only after a torn
// write), then "event" ahead of the line's own members, and a newline.
// Every line has a member that is never omitted, so the object is never
// empty.
func encodeLine(event string, v any) ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteString("\n{\"event\":\"" + event + "\",")
	enc := json.NewEncoder(&buf) // Encode ends the line with '\n'
	enc.SetEscapeHTML(false)
	// The encoded object's opening brace is dropped.
	start := buf.Len()
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("audit: encode %s line: %w", event, err)
	}
	return append(buf.Bytes()[:start], buf.Bytes()[start+1:]...), nil
}

// commit appends an encoded line of event to the file, chained, then a
// signed head when one is due; dropped names the fields prepare cleared.
func (l *Log) commit(event string, out []byte, dropped []string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return fmt.Errorf("audit: %w", ErrClosed)
	}
	if l.f == nil {
		return nil
	}
	if err := l.appendLocked(event, func(string) []byte { return out }); err != nil {
		return err
	}
	if l.headDue() {
		l.signHeadLocked()
	}
	if len(dropped) > 0 {
		return fmt.Errorf("audit: %s line: %w: %s", event, ErrRedacted, strings.Join(dropped, ", "))
	}
	return nil
}

// appendLocked writes one line to the file, chained: body returns the line
// given the head it will name, as a newline, the JSON object and a newline,
// in a buffer of its own that appendLocked may append to. Called with l.mu
// held and a file open.
func (l *Log) appendLocked(event string, body func(head string) []byte) error {
	f := l.f
	defer unlockFile(f, lockFile(f))
	if err := l.syncChain(); err != nil {
		// The line is written all the same, chained from the last line
		// this Log knows of; Verify reports the break if there is one.
		l.slogger().Warn("audit file's last line could not be read to chain from", "path", l.path, "err", err)
		if l.chain.head == "" {
			l.chain.head, l.chain.fileStart = ZeroHash, true
		}
	}
	out := body(l.chain.head)
	// The line ends with the member naming the line before it, in place
	// of the encoded object's closing brace.
	out = append(l.chain.appendMember(out[:len(out)-2]), '\n')
	if !l.torn {
		out = out[1:]
	}
	// One call with the whole line: O_APPEND places it at the end in one
	// piece. A write that fails part-way (ENOSPC) is taken back, so the
	// next line does not join the fragment.
	n, err := l.f.Write(out)
	if err != nil {
		what := "nothing was written"
		if n > 0 {
			what = l.takeBack(out[:n])
		}
		// Whatever is left, the next line reads the file's end again.
		l.chain.known = false
		return fmt.Errorf("audit: write %s line to %s (%s): %w", event, l.path, what, err)
	}
	written := out
	if l.torn {
		written = out[1:]
	}
	l.chain.head, l.chain.fileStart = lineHash(written[:len(written)-1]), false
	l.chain.end += int64(n)
	l.torn = false
	l.sinceHead++
	return nil
}

// takeBack removes the part of a line a failed write left at the end of
// the file, if the file still ends in exactly those bytes (another process
// appending to the same file may have written after them); otherwise it
// marks the file torn, so the next line starts with a newline. It says
// which it did, for the error.
func (l *Log) takeBack(partial []byte) string {
	n := int64(len(partial))
	if fi, err := l.f.Stat(); err == nil && fi.Size() >= n {
		end := make([]byte, n)
		if _, err := l.f.ReadAt(end, fi.Size()-n); err == nil && bytes.Equal(end, partial) {
			if err := l.f.Truncate(fi.Size() - n); err == nil {
				return fmt.Sprintf("the %d bytes written were removed", n)
			}
		}
	}
	l.torn = true
	return fmt.Sprintf("%d bytes were written and could not be removed; the next line starts on a line of its own", n)
}

// Close writes the summaries of refusals still being counted and, with a
// head key, a signed head over the last line; then flushes the file to disk
// and closes it. Safe to call more than once, and on a nil or
// discarding Log.
func (l *Log) Close() error {
	if l == nil {
		return nil
	}
	l.stopRefusals()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	if l.headKey != nil && l.sinceHead > 0 {
		l.signHeadLocked()
	}
	f := l.f
	l.f, l.closed = nil, true
	syncErr := f.Sync()
	if err := f.Close(); err != nil {
		return fmt.Errorf("audit: close %s: %w", l.path, err)
	}
	if syncErr != nil {
		return fmt.Errorf("audit: sync %s: %w", l.path, syncErr)
	}
	return nil
}

// Digest12 is the first 12 hex digits of s's sha256: the form in which a
// session handle or a key's hidden link may appear in a line.
func Digest12(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:6])
}

// modeError is an audit file or head key group or others may access, in
// the wording of every operator file's mode (internal/safefile); it
// matches ErrUnsafeMode.
type modeError struct{ *safefile.ModeError }

func (e modeError) Is(target error) bool { return target == ErrUnsafeMode }
func (e modeError) Unwrap() error        { return e.ModeError }
