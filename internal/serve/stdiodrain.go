package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// stdinDrainWait bounds how long, after the end of input, the requests
// already read get to be answered: a tool call's Gateway requests are
// bounded at 30 s each (gateway.DefaultTimeout), and a call may make a
// second one after replacing its session.
const stdinDrainWait = 60 * time.Second

// maxTrackedLine is the longest input line whose request is tracked: the
// SDK's own frame bound (mcp.DefaultMaxLineLength); a longer line is
// refused by the SDK anyway.
const maxTrackedLine = mcp.DefaultMaxLineLength

// drainingStdio is the SDK's stdio transport with one change: when the
// input ends, the requests already read are answered before the SDK sees
// the end. The SDK's connection stops writing and cancels every request in
// flight as soon as its reader reports io.EOF, so `printf
// '<initialize>\n<tools/list>\n' | pdmcp serve` answered nothing. Here the
// reader holds back io.EOF until every request read has had its response
// written (matched by JSON-RPC id), for at most wait; a signal (the
// connection closed) ends the wait at once. The SDK still parses and
// bounds every frame; this only watches the bytes go by.
type drainingStdio struct {
	in     io.ReadCloser
	out    io.Writer
	wait   time.Duration
	logger *slog.Logger
}

func (t *drainingStdio) Connect(ctx context.Context) (mcp.Connection, error) {
	p := &pendingCalls{ids: map[string]struct{}{}, changed: make(chan struct{}), closed: make(chan struct{})}
	r := &drainReader{in: t.in, p: p, wait: t.wait, logger: t.logger, lines: lineSplitter{onLine: p.readLine}}
	w := &trackWriter{out: t.out, lines: lineSplitter{onLine: p.wroteLine}}
	return (&mcp.IOTransport{Reader: r, Writer: w}).Connect(ctx)
}

// pendingCalls is the ids of the requests read and not yet answered.
type pendingCalls struct {
	mu      sync.Mutex
	ids     map[string]struct{}
	changed chan struct{} // closed and replaced whenever an id is answered
	closed  chan struct{}
	once    sync.Once
}

// message is what a line says about its JSON-RPC messages.
type message struct {
	ID     json.RawMessage `json:"id"`
	Method *string         `json:"method"`
}

// messages parses a line as one message or a batch; nil when it is neither.
func messages(line []byte) []message {
	line = bytes.TrimSpace(line)
	if len(line) > 0 && line[0] == '[' {
		var batch []message
		if json.Unmarshal(line, &batch) != nil {
			return nil
		}
		return batch
	}
	var m message
	if json.Unmarshal(line, &m) != nil {
		return nil
	}
	return []message{m}
}

// idKey is a JSON-RPC id as a map key: 1 and 1.0 are one id, "1" another.
func idKey(raw json.RawMessage) (string, bool) {
	var v any
	if len(raw) == 0 || json.Unmarshal(raw, &v) != nil || v == nil {
		return "", false
	}
	return fmt.Sprintf("%T:%v", v, v), true
}

func (p *pendingCalls) readLine(line []byte) {
	for _, m := range messages(line) {
		if k, ok := idKey(m.ID); ok && m.Method != nil {
			p.mu.Lock()
			p.ids[k] = struct{}{}
			p.mu.Unlock()
		}
	}
}

func (p *pendingCalls) wroteLine(line []byte) {
	for _, m := range messages(line) {
		if k, ok := idKey(m.ID); ok && m.Method == nil {
			p.mu.Lock()
			if _, found := p.ids[k]; found {
				delete(p.ids, k)
				close(p.changed)
				p.changed = make(chan struct{})
			}
			p.mu.Unlock()
		}
	}
}

// waitAnswered waits until every request read is answered, the wait is
// over or the connection is closed; it returns how many are unanswered.
func (p *pendingCalls) waitAnswered(wait time.Duration) int {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		p.mu.Lock()
		n, changed := len(p.ids), p.changed
		p.mu.Unlock()
		if n == 0 {
			return 0
		}
		select {
		case <-changed:
		case <-deadline.C:
			return n
		case <-p.closed:
			return n
		}
	}
}

// drainReader is stdin, holding back its end until the requests read are
// answered.
type drainReader struct {
	in     io.ReadCloser
	p      *pendingCalls
	wait   time.Duration
	logger *slog.Logger
	lines  lineSplitter
}

func (r *drainReader) Read(b []byte) (int, error) {
	n, err := r.in.Read(b)
	r.lines.write(b[:n])
	if err == io.EOF {
		r.lines.flush()
		if left := r.p.waitAnswered(r.wait); left > 0 {
			r.logger.Warn("input ended; requests already read were left unanswered", "unanswered", left,
				"waited", r.wait.String())
		}
	}
	return n, err
}

// Close ends a wait under way (the connection is closing: a signal, or
// the session ended) and closes stdin, as the SDK's stdio transport does.
func (r *drainReader) Close() error {
	r.p.once.Do(func() { close(r.p.closed) })
	return r.in.Close()
}

// trackWriter is stdout, noting each response written.
type trackWriter struct {
	out   io.Writer
	lines lineSplitter
}

func (w *trackWriter) Write(b []byte) (int, error) {
	n, err := w.out.Write(b)
	w.lines.write(b[:n])
	return n, err
}

// Close leaves stdout open: the process writes nothing more to it, and
// closing it is the process's exit's job.
func (w *trackWriter) Close() error { return nil }

// lineSplitter calls onLine with each complete line written to it; a line
// longer than maxTrackedLine is skipped up to its newline.
type lineSplitter struct {
	buf    []byte
	skip   bool
	onLine func([]byte)
}

func (s *lineSplitter) write(b []byte) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			if !s.skip {
				s.buf = append(s.buf, b...)
				if len(s.buf) > maxTrackedLine {
					s.buf, s.skip = nil, true
				}
			}
			return
		}
		if !s.skip {
			s.onLine(append(s.buf, b[:i]...))
		}
		s.buf, s.skip = s.buf[:0], false
		b = b[i+1:]
	}
}

// flush passes on a last line without a newline (the SDK reads it too).
func (s *lineSplitter) flush() {
	if len(s.buf) > 0 && !s.skip {
		s.onLine(s.buf)
	}
	s.buf, s.skip = nil, false
}
