package serve

import (
	"cmp"
	"container/list"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pdmcp/pdmcp/auth"
)

// MaxHeaderBytes bounds one request's header block. A bearer token from a
// real provider is a few KiB and the MCP headers of 2026-07-28 (Mcp-Name,
// Mcp-Param-…) are short; 32 KiB leaves room and no more. Go's own
// default is 1 MiB, which anyone on the machine could make the server
// hold once per connection.
const MaxHeaderBytes = 32 << 10

// streamWriteTimeout bounds each write of an event stream: a client that
// keeps a stream open but stops reading it is cut off this long after the
// write that found its buffers full, while one that reads keeps its stream
// for as long as it likes (the stream's count is bounded elsewhere).
const streamWriteTimeout = 30 * time.Second

// connTracker admits and counts the connections of one listener in two
// classes, so that connections nobody has signed in on cannot keep out
// the ones somebody has:
//
//   - every connection starts unauthenticated; at most maxAnon are open,
//     and when one more arrives the oldest of them is closed to make room.
//     Refusing the newcomer instead would let whoever holds the places
//     (anyone on the machine, with no token) keep everybody else out; with
//     oldest-first a stalled connection lives only until maxAnon newer
//     ones have arrived, and a legitimate client's fresh connection, the
//     newest, is the last one closed;
//   - a connection that has carried a request with a valid token becomes
//     signed in, out of reach of that eviction, while fewer than maxSigned
//     are and its user holds fewer than maxPerUser. Otherwise it stays
//     unauthenticated (and is served as such), so one user cannot take the
//     whole reserve.
//
// Both classes together never exceed maxAnon + maxSigned, which is what
// the descriptor limit must allow for. Signed-in connections end as any
// connection does: the idle timeout and each request's deadlines.
type connTracker struct {
	maxAnon, maxSigned, maxPerUser int

	mu       sync.Mutex
	anon     list.List // of *trackedConn, oldest first
	signedIn int
	perUser  map[string]int

	evicted atomic.Int64
}

func newConnTracker(maxAnon, maxSigned, maxPerUser int) *connTracker {
	return &connTracker{maxAnon: max(maxAnon, 1), maxSigned: maxSigned, maxPerUser: maxPerUser, perUser: map[string]int{}}
}

// trackedConn is an accepted connection as the tracker knows it. elem and
// user are guarded by the tracker's mu: elem is set while it counts as
// unauthenticated, user once it counts as signed in, neither once it is
// closed or evicted.
type trackedConn struct {
	net.Conn
	t     *connTracker
	elem  *list.Element
	user  string
	close sync.Once
}

// Close closes the connection and gives its place back.
func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.close.Do(func() { c.t.release(c) })
	return err
}

// listener wraps ln so that each connection it accepts is admitted here.
func (t *connTracker) listener(ln net.Listener) net.Listener {
	return &trackedListener{Listener: ln, t: t}
}

type trackedListener struct {
	net.Listener
	t *connTracker
}

func (l *trackedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return l.t.admit(c), nil
}

// admit counts c as unauthenticated, first closing the oldest
// unauthenticated connection when they are at their cap.
func (t *connTracker) admit(c net.Conn) *trackedConn {
	tc := &trackedConn{Conn: c, t: t}
	var victim *trackedConn
	t.mu.Lock()
	if t.anon.Len() >= t.maxAnon {
		victim = t.anon.Remove(t.anon.Front()).(*trackedConn)
		victim.elem = nil
	}
	tc.elem = t.anon.PushBack(tc)
	t.mu.Unlock()
	if victim != nil {
		t.evicted.Add(1)
		// The server's own Close follows when its read fails; the place
		// is already given to tc.
		_ = victim.Conn.Close()
	}
	return tc
}

func (t *connTracker) release(c *trackedConn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case c.elem != nil:
		t.anon.Remove(c.elem)
		c.elem = nil
	case c.user != "":
		t.signedIn--
		if t.perUser[c.user]--; t.perUser[c.user] <= 0 {
			delete(t.perUser, c.user)
		}
		c.user = ""
	}
}

// signIn moves c to the signed-in class for user when there is room for
// it and for user; otherwise c stays as it is.
func (t *connTracker) signIn(c *trackedConn, user string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c.elem == nil || t.signedIn >= t.maxSigned || t.perUser[user] >= t.maxPerUser {
		// Already signed in, closed or evicted; or no room.
		return
	}
	t.anon.Remove(c.elem)
	c.elem, c.user = nil, user
	t.signedIn++
	t.perUser[user]++
}

// anonymous reports whether c is still counted as unauthenticated.
func (t *connTracker) anonymous(c *trackedConn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return c.elem != nil
}

// counts reports the open connections of each class.
func (t *connTracker) counts() (anon, signedIn int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.anon.Len(), t.signedIn
}

type connKey struct{}

// connContext is the http.Server's ConnContext: it puts the tracked
// connection under c (a *tls.Conn over it, for the MCP listener) in the
// connection's context, where markSignedIn finds it.
func (t *connTracker) connContext(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if tc, ok := c.(*trackedConn); ok && tc.t == t {
		return context.WithValue(ctx, connKey{}, tc)
	}
	return ctx
}

// markSignedIn, behind the token check, signs the request's connection in
// for the verified caller.
func markSignedIn(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tc, ok := r.Context().Value(connKey{}).(*trackedConn)
		caller, verified := auth.CallerFromContext(r.Context())
		// Only a connection not yet signed in needs the caller's id made.
		if ok && verified && tc.t.anonymous(tc) {
			tc.t.signIn(tc, caller.ID())
		}
		next.ServeHTTP(w, r)
	})
}

// Connections reports t's counts on /metrics.
func (m *Metrics) Connections(t *connTracker) {
	if m == nil {
		return
	}
	_ = m.reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "pdmcp_http_connections",
		Help:        "Open connections of the HTTP transport by state: unauthenticated (no request with a valid token yet) or signed-in.",
		ConstLabels: prometheus.Labels{"state": "unauthenticated"},
	}, func() float64 { a, _ := t.counts(); return float64(a) }))
	_ = m.reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "pdmcp_http_connections",
		Help:        "Open connections of the HTTP transport by state: unauthenticated (no request with a valid token yet) or signed-in.",
		ConstLabels: prometheus.Labels{"state": "signed-in"},
	}, func() float64 { _, s := t.counts(); return float64(s) }))
	_ = m.reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "pdmcp_http_connections_evicted_total",
		Help: "Unauthenticated connections closed to admit a newer one while they were at their cap.",
	}, func() float64 { return float64(t.evicted.Load()) }))
}

// requestLimits are the deadlines boundRequests puts on each request.
type requestLimits struct {
	body   time.Duration // reading the body, from the end of the headers
	answer time.Duration // writing a single answer, from its first byte
	stream time.Duration // each write of an event stream (streamWriteTimeout when 0)
}

// limitsOf takes the answer deadline from mcp-http.json's connections and
// the body deadline from the per-user limits' (bodyTimeoutSeconds): one
// number for an operator to set. Here it runs from the end of the headers,
// for whatever reads a body; the per-user limiter gives a signed-in
// user's body the same time again after the token check.
func limitsOf(c auth.ConnectionsConfig, body time.Duration) requestLimits {
	return requestLimits{body: body, answer: c.AnswerTimeout(), stream: streamWriteTimeout}
}

// unreadBodyGrace is how long an answer waits for the rest of a body its
// handler did not read (a refusal before the body: no token, a Host not
// this server's). A client that sent its body has it all in flight and is
// drained at once, keeping its connection; one that announced a body and
// sent none has its connection closed after this.
const unreadBodyGrace = time.Second

// boundRequests bounds each request in time, whatever the handlers behind
// it do:
//
//   - its body must arrive within l.body of the headers: a client that
//     announces a body and sends it slowly, or not at all, is cut off
//     rather than waited for (the read deadline is lifted at the body's
//     end, so a long call is not cancelled by it);
//   - its answer must be handled and written within l.answer; an event
//     stream's writes are instead bounded one by one (streamWriteTimeout);
//   - an answer to a request whose body was not read to its end waits at
//     most unreadBodyGrace for the rest. Go's HTTP/1 server reads up to
//     256 KiB of such a body before it answers, with no deadline of its
//     own, so a client that announced 200,000 bytes and sent none held the
//     connection (and got no answer) for as long as it liked. Now the read
//     fails by the deadline, and the server answers with Connection: close
//     and closes. The body is still read if it is there, rather than the
//     connection closed at once: closing with unread data resets the
//     connection, which can destroy the answer before the client reads it
//     (a host's first request without a token must get its 401 challenge).
//     A body of 256 KiB or more is never read: Go closes at once then.
//
// With zero limits (a handler built without a config) it only does the
// last.
func boundRequests(l requestLimits, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The writer, the body and the controller, made in one allocation.
		br := &boundedRequest{rc: *http.NewResponseController(w)}
		rc := &br.rc
		now := time.Now()
		bw := &br.w
		*bw = boundedWriter{ResponseWriter: w, rc: rc, answer: l.answer, streamWrite: cmp.Or(l.stream, streamWriteTimeout)}
		if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
			bb := &br.b
			bb.ReadCloser, bb.rc = r.Body, rc
			if l.body > 0 {
				bb.deadline, bb.lift = now.Add(l.body), true
				_ = bb.setReadDeadline(bb.deadline)
			}
			bw.body, r.Body = bb, bb
		}
		next.ServeHTTP(bw, r)
		if bw.stream {
			// The server's last flush after the handler returns.
			_ = rc.SetWriteDeadline(time.Now().Add(bw.streamWrite))
		}
	})
}

// boundedRequest is what boundRequests makes for a request.
type boundedRequest struct {
	w  boundedWriter
	b  boundedBody
	rc http.ResponseController
}

// boundedBody notes when the body has been read to its end, and then
// lifts the read deadline boundRequests set on it.
type boundedBody struct {
	io.ReadCloser
	rc       *http.ResponseController
	lift     bool
	deadline time.Time // the body's read deadline; zero: none
	done     atomic.Bool

	// lifted says the last read deadline set through setReadDeadline was
	// none, and took: lifting it again (the user limiter does, after the
	// body's end lifted it here) would change nothing. Nothing else sets
	// the connection's read deadline while the handler runs.
	mu     sync.Mutex
	lifted bool
}

// setReadDeadline sets the connection's read deadline, unless it is none
// and already lifted.
func (b *boundedBody) setReadDeadline(t time.Time) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if t.IsZero() && b.lifted {
		return nil
	}
	err := b.rc.SetReadDeadline(t)
	b.lifted = err == nil && t.IsZero()
	return err
}

// earliest is the earlier of two deadlines, zero meaning none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

func (b *boundedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.done.Swap(true) && b.lift {
		// The server reads on in the background to notice a client
		// gone; a deadline left here would cancel the request then.
		_ = b.setReadDeadline(time.Time{})
	}
	return n, err
}

// boundedWriter applies boundRequests' rules to the answer.
type boundedWriter struct {
	http.ResponseWriter
	rc          *http.ResponseController
	body        *boundedBody // nil: the request had none
	answer      time.Duration
	streamWrite time.Duration
	wroteHeader bool
	stream      bool
}

func (w *boundedWriter) WriteHeader(code int) {
	if !w.wroteHeader && code >= 200 {
		w.wroteHeader = true
		if w.body != nil && !w.body.done.Load() {
			_ = w.body.setReadDeadline(earliest(w.body.deadline, time.Now().Add(unreadBodyGrace)))
		}
		switch ct := w.Header().Get("Content-Type"); {
		case strings.HasPrefix(strings.ToLower(ct), "text/event-stream"):
			// A stream lasts as long as its client reads it: no deadline
			// between writes (HTTP/2 would reset an idle stream at one).
			w.stream = true
			_ = w.rc.SetWriteDeadline(time.Time{})
		case w.answer > 0:
			// From the first byte, not from the request's start: over
			// HTTP/2 a deadline is a timer that resets the stream, and a
			// handler may decide late that its answer is a stream.
			_ = w.rc.SetWriteDeadline(time.Now().Add(w.answer))
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *boundedWriter) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.stream {
		return w.ResponseWriter.Write(p)
	}
	_ = w.rc.SetWriteDeadline(time.Now().Add(w.streamWrite))
	defer w.rc.SetWriteDeadline(time.Time{})
	return w.ResponseWriter.Write(p)
}

// Flush is here for handlers that assert http.Flusher rather than use a
// ResponseController.
func (w *boundedWriter) Flush() {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.stream {
		_ = w.rc.SetWriteDeadline(time.Now().Add(w.streamWrite))
		defer w.rc.SetWriteDeadline(time.Time{})
	}
	_ = w.rc.Flush()
}

// SetReadDeadline is where a ResponseController of the handlers behind
// boundRequests sets the read deadline: through the body's record of it,
// when the request has a body.
func (w *boundedWriter) SetReadDeadline(t time.Time) error {
	if w.body == nil {
		return w.rc.SetReadDeadline(t)
	}
	return w.body.setReadDeadline(t)
}

// Unwrap lets a ResponseController reach the server's writer.
func (w *boundedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
