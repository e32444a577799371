// Package audit writes the server's audit file: one JSON line per tool call,
// per HTTP request refused for its token, and per client at initialize.
//
// A line joins to the key server's own audit by acting principal, the
// object's hidden link (as a digest) and time. It never holds a token, a
// session handle, a proof, a key or document text. The line types are fixed
// structs with no free-form values, and Write drops any field whose value
// does not have the shape that field allows (a digest that is not 12 hex
// digits, a code that is not a code, anything that looks like a JWT) before
// the line reaches the file.
package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
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
// is safe for concurrent use; each line is one write(2) on a file opened for
// appending, so lines from goroutines (or processes) never interleave.
type Log struct {
	mu     sync.Mutex
	f      *os.File
	path   string
	closed bool
}

// Open opens path for appending, creating it with mode 0600. It refuses an
// existing file that group or others can access, one that is not a regular
// file, and (on Unix) a symbolic link, leaving the file as it was.
func Open(path string) (*Log, error) {
	if path == "" {
		return nil, errors.New("audit: no path given (use audit.Discard() to run without an audit file)")
	}
	f, err := openAppend(path)
	if err != nil {
		return nil, fmt.Errorf("audit: open %s: %w", path, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("audit: stat %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("audit: %s is not a regular file", path)
	}
	if err := checkPrivate(fi); err != nil {
		f.Close()
		return nil, fmt.Errorf("audit: %s: %w (mode %#o; run chmod 600 on it)", path, err, fi.Mode().Perm())
	}
	return &Log{f: f, path: path}, nil
}

// Discard returns a Log that writes nothing.
func Discard() *Log { return &Log{} }

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
// ErrRedacted.
func (l *Log) Write(line Line) error {
	if l == nil || line == nil {
		return nil
	}
	v, dropped := line.prepare(time.Now())
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf) // Encode ends the line with '\n'
	enc.SetEscapeHTML(false)
	// "event" comes first, ahead of the line's own members: it is written
	// here and the encoded object's opening brace is dropped. Every line has
	// a member that is never omitted, so the object is never empty.
	buf.WriteString(`{"event":"` + line.event() + `",`)
	start := buf.Len()
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("audit: encode %s line: %w", line.event(), err)
	}
	out := append(buf.Bytes()[:start], buf.Bytes()[start+1:]...)

	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return fmt.Errorf("audit: %w", ErrClosed)
	}
	if l.f == nil {
		return nil
	}
	if _, err := l.f.Write(out); err != nil {
		return fmt.Errorf("audit: write %s: %w", l.path, err)
	}
	if len(dropped) > 0 {
		return fmt.Errorf("audit: %s line: %w: %s", line.event(), ErrRedacted, strings.Join(dropped, ", "))
	}
	return nil
}

// Close flushes the file to disk and closes it. Safe to call more than
// once, and on a nil or discarding Log.
func (l *Log) Close() error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
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
