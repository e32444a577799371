package serve

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"
)

// pipeConn is one end of an in-memory connection; the other end tells
// whether the tracker closed it.
func pipeConn(t *testing.T) (server net.Conn, closedByServer func() bool) {
	t.Helper()
	s, c := net.Pipe()
	t.Cleanup(func() { s.Close(); c.Close() })
	return s, func() bool {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err := c.Read(make([]byte, 1))
		return errors.Is(err, io.EOF)
	}
}

// TestConnTracker walks the tracker through the cases of its rules:
// unauthenticated connections capped with the oldest closed first,
// signed-in ones out of reach of that and capped in all and per user,
// places given back exactly once.
func TestConnTracker(t *testing.T) {
	tr := newConnTracker(3, 2, 1)
	check := func(step string, anon, signed int, evicted int64) {
		t.Helper()
		a, s := tr.counts()
		if a != anon || s != signed || tr.evicted.Load() != evicted {
			t.Fatalf("%s: %d unauthenticated, %d signed in, %d evicted; want %d, %d, %d",
				step, a, s, tr.evicted.Load(), anon, signed, evicted)
		}
	}
	conns := map[string]*trackedConn{}
	closed := map[string]func() bool{}
	admit := func(name string) {
		c, cl := pipeConn(t)
		conns[name], closed[name] = tr.admit(c), cl
	}
	for _, n := range []string{"a", "b", "c"} {
		admit(n)
	}
	check("three admitted", 3, 0, 0)
	admit("d")
	check("a fourth at the cap", 3, 0, 1)
	if !closed["a"]() {
		t.Fatal("the oldest connection was not closed to admit the fourth")
	}
	tr.signIn(conns["b"], "alice")
	check("b signed in", 2, 1, 1)
	tr.signIn(conns["c"], "alice")
	check("alice at her per-user cap", 2, 1, 1)
	tr.signIn(conns["c"], "bob")
	check("c signed in as bob", 1, 2, 1)
	admit("e")
	admit("f")
	check("e and f admitted", 3, 2, 1)
	admit("g")
	check("g admitted at the cap", 3, 2, 2)
	if !closed["d"]() {
		t.Fatal("d, the oldest unauthenticated, was not closed: signed-in b and c are older")
	}
	tr.signIn(conns["e"], "carol")
	check("the signed-in reserve full", 3, 2, 2)
	tr.signIn(conns["a"], "carol")
	check("an evicted connection cannot sign in", 3, 2, 2)
	if err := conns["b"].Close(); err != nil {
		t.Fatal(err)
	}
	check("b closed", 3, 1, 2)
	tr.signIn(conns["e"], "alice")
	check("alice's place free again", 2, 2, 2)
	_ = conns["b"].Close()
	_ = conns["a"].Close()
	check("closing twice, and closing an evicted one, give nothing back", 2, 2, 2)
	for _, n := range []string{"c", "e", "f", "g"} {
		_ = conns[n].Close()
	}
	check("all closed", 0, 0, 2)
	if len(tr.perUser) != 0 {
		t.Errorf("per-user counts left: %v", tr.perUser)
	}
}

// boundedServer serves h behind boundRequests(l) on a loopback port and
// returns its address.
func boundedServer(t *testing.T, l requestLimits, h http.HandlerFunc) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: boundRequests(l, h), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// rawConn dials addr with every read and write bounded, so that a test
// that goes wrong fails instead of hanging.
func rawConn(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	return c, bufio.NewReader(c)
}

// outcome is what a handler saw, sent back to the test.
func outcome(ch chan<- error, err error) {
	select {
	case ch <- err:
	default:
	}
}

func waitOutcome(t *testing.T, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(60 * time.Second):
		t.Fatal("the handler never finished")
		return nil
	}
}

func TestBoundRequestsSlowBodyIsCutOff(t *testing.T) {
	got := make(chan error, 1)
	addr := boundedServer(t, requestLimits{body: time.Second, answer: time.Minute}, func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		outcome(got, err)
		if err != nil {
			http.Error(w, "too slow", http.StatusRequestTimeout)
		}
	})
	c, br := rawConn(t, addr)
	fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 200000\r\n\r\n%s", strings.Repeat("x", 1000))
	if err := waitOutcome(t, got); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("reading the stalled body: %v, want the deadline", err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout || !resp.Close {
		t.Errorf("answer %d (close %v), want 408 and the connection closed", resp.StatusCode, resp.Close)
	}
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("after the answer: %v, want the server to close", err)
	}
}

// A call that takes longer than the body deadline, once its body is in,
// is not cancelled by it: the deadline is lifted at the body's end.
func TestBoundRequestsBodyDeadlineEndsWithTheBody(t *testing.T) {
	const body = 300 * time.Millisecond
	addr := boundedServer(t, requestLimits{body: body, answer: time.Minute}, func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			t.Errorf("body: %v", err)
		}
		select {
		case <-r.Context().Done():
			http.Error(w, "cancelled", http.StatusServiceUnavailable)
		case <-time.After(4 * body):
			_, _ = io.WriteString(w, "done")
		}
	})
	resp, err := (&http.Client{Timeout: time.Minute}).Post("http://"+addr, "text/plain", strings.NewReader("hello"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(b) != "done" {
		t.Fatalf("%d %q: the call was cancelled by the body's deadline", resp.StatusCode, b)
	}
}

func TestBoundRequestsUnreadBody(t *testing.T) {
	refuse := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("WWW-Authenticate", "Bearer")
		http.Error(w, "no token", http.StatusUnauthorized)
	}
	addr := boundedServer(t, requestLimits{body: time.Minute, answer: time.Minute}, refuse)

	t.Run("announced and never sent: answered and closed", func(t *testing.T) {
		c, br := rawConn(t, addr)
		fmt.Fprint(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 200000\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("no answer: %v (the server waits for the body)", err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || !resp.Close {
			t.Errorf("answer %d (close %v), want 401 and the connection closed", resp.StatusCode, resp.Close)
		}
		if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
			t.Errorf("after the answer: %v, want the server to close", err)
		}
	})
	t.Run("sent in full: answered, and the connection kept", func(t *testing.T) {
		c, br := rawConn(t, addr)
		for i := range 2 {
			fmt.Fprint(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("request %d on the connection: %v", i+1, err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized || resp.Close {
				t.Errorf("request %d: %d (close %v), want 401 on a kept connection", i+1, resp.StatusCode, resp.Close)
			}
		}
	})
}

// An answer the client does not read is cut off by the answer deadline; an
// event stream outlives it while the client reads, and is cut off by the
// stream's write deadline once the client stops.
func TestBoundRequestsWriteDeadlines(t *testing.T) {
	const answer = 500 * time.Millisecond
	big := strings.Repeat("x", 1<<20)
	got := make(chan error, 1)
	addr := boundedServer(t, requestLimits{body: time.Minute, answer: answer, stream: answer}, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stream" {
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(200)
		}
		n := 64
		if r.URL.Query().Has("events") {
			n = 8
		}
		for i := range n {
			chunk := big
			if r.URL.Query().Has("events") {
				// Small events, spread over more than the answer deadline.
				time.Sleep(answer / 2)
				chunk = fmt.Sprintf("data: %d\n\n", i)
			}
			if _, err := io.WriteString(w, chunk); err != nil {
				outcome(got, err)
				return
			}
			_ = http.NewResponseController(w).Flush()
		}
		outcome(got, nil)
	})
	stall := func(path string) {
		t.Helper()
		c, _ := rawConn(t, addr)
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path)
		if err := waitOutcome(t, got); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("%s to a client that reads nothing: %v, want the write deadline", path, err)
		}
	}
	stall("/answer")
	stall("/stream")

	resp, err := (&http.Client{Timeout: time.Minute}).Get("http://" + addr + "/stream?events")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || strings.Count(string(b), "data: ") != 8 {
		t.Fatalf("stream read by its client: %v, %q; want all 8 events", err, b)
	}
	if err := waitOutcome(t, got); err != nil {
		t.Fatalf("stream: %v", err)
	}
}

// An event stream with nothing to say for longer than its write deadline
// stays open over HTTP/2 too, where a deadline is a timer that resets the
// stream when it fires, not a bound on the next write.
func TestBoundRequestsIdleStreamOverHTTP2(t *testing.T) {
	const stream = 300 * time.Millisecond
	srv := httptest.NewUnstartedServer(boundRequests(requestLimits{body: time.Minute, answer: stream, stream: stream},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(200)
			rc := http.NewResponseController(w)
			for i := range 2 {
				if i > 0 {
					time.Sleep(4 * stream) // idle, longer than either deadline
				}
				_, _ = fmt.Fprintf(w, "data: %d\n\n", i)
				_ = rc.Flush()
			}
		})))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	hc := srv.Client()
	hc.Timeout = time.Minute
	resp, err := hc.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.ProtoMajor != 2 {
		t.Fatalf("served over %s, want HTTP/2", resp.Proto)
	}
	if err != nil || strings.Count(string(b), "data: ") != 2 {
		t.Fatalf("idle stream: %v, %q; want both events", err, b)
	}
}

// deadlineRecorder is a ResponseWriter that records the read deadlines a
// ResponseController sets on it, as the server's writer would take them.
type deadlineRecorder struct {
	*httptest.ResponseRecorder
	reads []time.Time
}

func (d *deadlineRecorder) SetReadDeadline(t time.Time) error {
	d.reads = append(d.reads, t)
	return nil
}

// TestBoundRequestsReadDeadlinesPassThrough: every read deadline the
// handlers behind boundRequests set reaches the connection, but for
// lifting one the body's end already lifted (as the user limiter does
// after reading the body), which would change nothing.
func TestBoundRequestsReadDeadlinesPassThrough(t *testing.T) {
	later := time.Now().Add(time.Hour)
	h := boundRequests(requestLimits{body: time.Minute}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		if err := rc.SetReadDeadline(later); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadAll(r.Body); err != nil {
			t.Fatal(err)
		}
		for _, d := range []time.Time{{}, later, {}, {}} {
			if err := rc.SetReadDeadline(d); err != nil {
				t.Fatal(err)
			}
		}
	}))
	w := &deadlineRecorder{ResponseRecorder: httptest.NewRecorder()}
	h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(`{"a":1}`)))
	// The body's deadline, the handler's, the lift at the body's end
	// (the handler's own lift after it changes nothing), the handler's
	// later deadline, and its lift (the last one again changes nothing).
	if len(w.reads) != 5 || w.reads[0].IsZero() || !w.reads[1].Equal(later) || !w.reads[2].IsZero() ||
		!w.reads[3].Equal(later) || !w.reads[4].IsZero() {
		t.Errorf("read deadlines set: %v", w.reads)
	}
}
