// Package abuse is a hostile local client: it opens connections to an
// HTTPS server on a loopback address and holds them the ways any program
// on the same machine can, with or without a token, then reports what the
// server did with them. The HTTP transport's tests use it to show that
// such connections neither keep a signed-in user out nor stay open past
// the server's deadlines. (`pdmcp bench`'s abuse suite, internal/bench,
// has attacks of its own: they keep reopening what the server closes,
// where this package holds each connection once.)
//
// It is bounded: at most MaxCount connections, each held at most
// Config.Hold (MaxHold at the most), to loopback IP addresses only, and
// everything it opens is closed by Close.
package abuse

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Kind is how a connection is held.
type Kind int

const (
	// StalledBody shakes hands, sends the headers of a POST announcing a
	// body of Config.BodyLength bytes, and then nothing (issue 31,
	// scenario 1 without a token; scenario 2 with one).
	StalledBody Kind = iota
	// StalledHeaders shakes hands and sends the start of a request line,
	// never finishing the headers.
	StalledHeaders
	// StalledHandshake connects and sends nothing: no TLS handshake.
	StalledHandshake
)

func (k Kind) String() string {
	switch k {
	case StalledBody:
		return "stalled-body"
	case StalledHeaders:
		return "stalled-headers"
	case StalledHandshake:
		return "stalled-handshake"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// ParseKind reads a Kind by its name (String's).
func ParseKind(name string) (Kind, error) {
	for _, k := range []Kind{StalledBody, StalledHeaders, StalledHandshake} {
		if k.String() == name {
			return k, nil
		}
	}
	return 0, fmt.Errorf("abuse: no kind %q (stalled-body, stalled-headers, stalled-handshake)", name)
}

// Limits of one Start.
const (
	MaxCount          = 4096
	MaxHold           = 10 * time.Minute
	DefaultHold       = 2 * time.Minute
	DefaultBodyLength = 200000
)

// Config is one attack.
type Config struct {
	// URL is the endpoint, https://<loopback IP>:<port>/<path>.
	URL string
	// RootCAs verify the server (the handshake is a real one).
	RootCAs *x509.CertPool
	Kind    Kind
	// Count connections are opened, one after another (1 to MaxCount).
	Count int
	// Token, when set, is sent as a bearer token (StalledBody only).
	Token string
	// BodyLength is the Content-Length announced (DefaultBodyLength when 0).
	BodyLength int
	// Hold is how long each connection is held at the most before the
	// attack gives it up itself (DefaultHold when 0, at most MaxHold).
	Hold time.Duration
}

// openTimeout bounds opening one connection (connect, handshake, first
// write); after maxFailuresInARow connections in a row could not be
// opened, the server is taken to accept no more and the rest are not
// tried (they count as failed).
const (
	openTimeout       = 10 * time.Second
	maxFailuresInARow = 3
)

// Attack is the connections of one Start.
type Attack struct {
	kind     Kind
	conns    []*held
	failed   int // connections that could not be opened or written to
	closedBy atomic.Int64
	answered atomic.Int64
	done     chan struct{} // closed when every watcher has ended
}

type held struct{ c net.Conn }

// Start opens cfg.Count connections and holds them. A connection the
// server refuses or closes while it is being opened counts as failed, not
// as an error: only a bad Config or a first connection that cannot be
// made at all is an error.
func Start(ctx context.Context, cfg Config) (*Attack, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || u.Scheme != "https" {
		return nil, fmt.Errorf("abuse: URL %q: want https://<loopback IP>:<port>/<path>", cfg.URL)
	}
	if ip := net.ParseIP(u.Hostname()); ip == nil || !ip.IsLoopback() || u.Port() == "" {
		return nil, fmt.Errorf("abuse: URL %q: only a loopback IP address with a port is attacked", cfg.URL)
	}
	if cfg.Count < 1 || cfg.Count > MaxCount {
		return nil, fmt.Errorf("abuse: count %d: between 1 and %d", cfg.Count, MaxCount)
	}
	hold := cfg.Hold
	if hold <= 0 {
		hold = DefaultHold
	}
	hold = min(hold, MaxHold)
	bodyLen := cfg.BodyLength
	if bodyLen <= 0 {
		bodyLen = DefaultBodyLength
	}
	path := u.EscapedPath()
	if path == "" {
		path = "/"
	}
	a := &Attack{kind: cfg.Kind, done: make(chan struct{})}
	var request []byte
	switch cfg.Kind {
	case StalledBody:
		auth := ""
		if cfg.Token != "" {
			auth = "Authorization: Bearer " + cfg.Token + "\r\n"
		}
		request = fmt.Appendf(nil, "POST %s HTTP/1.1\r\nHost: %s\r\n%sContent-Type: application/json\r\n"+
			"Accept: application/json, text/event-stream\r\nMcp-Protocol-Version: 2025-11-25\r\nContent-Length: %d\r\n\r\n",
			path, u.Host, auth, bodyLen)
	case StalledHeaders:
		request = fmt.Appendf(nil, "POST %s HTTP/1.1\r\nHost: %s\r\n", path, u.Host)
	case StalledHandshake:
	default:
		return nil, fmt.Errorf("abuse: unknown kind %v", cfg.Kind)
	}
	var wg sync.WaitGroup
	d := &net.Dialer{Timeout: openTimeout}
	inARow := 0
	for i := range cfg.Count {
		if ctx.Err() != nil || inARow >= maxFailuresInARow {
			a.failed += cfg.Count - i
			break
		}
		c, err := a.open(ctx, d, u, cfg.RootCAs, request, hold)
		if err != nil {
			if i == 0 && isDialError(err) {
				a.Close()
				return nil, fmt.Errorf("abuse: %w", err)
			}
			a.failed++
			inARow++
			continue
		}
		inARow = 0
		h := &held{c: c}
		a.conns = append(a.conns, h)
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.watch(h)
		}()
	}
	go func() {
		wg.Wait()
		close(a.done)
	}()
	return a, nil
}

func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// open makes one connection and sends what its kind sends.
func (a *Attack) open(ctx context.Context, d *net.Dialer, u *url.URL, roots *x509.CertPool, request []byte, hold time.Duration) (net.Conn, error) {
	c, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return nil, err
	}
	if a.kind == StalledHandshake {
		// Every read and write ends by this deadline: nothing is held
		// longer.
		_ = c.SetDeadline(time.Now().Add(hold))
		return c, nil
	}
	_ = c.SetDeadline(time.Now().Add(min(openTimeout, hold)))
	tc := tls.Client(c, &tls.Config{RootCAs: roots, ServerName: u.Hostname(), MinVersion: tls.VersionTLS12})
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, err
	}
	if _, err := tc.Write(request); err != nil {
		tc.Close()
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(hold))
	return tc, nil
}

// watch reads what the server sends until it closes the connection (or
// the hold ends).
func (a *Attack) watch(h *held) {
	n, err := io.Copy(io.Discard, h.c)
	if n > 0 {
		a.answered.Add(1)
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, net.ErrClosed) {
		// EOF, a reset, or a TLS close: the server ended it.
		a.closedBy.Add(1)
	}
}

// Opened is how many connections were opened and held.
func (a *Attack) Opened() int { return len(a.conns) }

// Failed is how many could not be opened (refused, reset, closed by the
// server or timed out during the handshake or the first write, or not
// tried after maxFailuresInARow such failures).
func (a *Attack) Failed() int { return a.failed }

// ServerClosed is how many of the opened connections the server has
// closed so far.
func (a *Attack) ServerClosed() int { return int(a.closedBy.Load()) }

// Answered is how many of them got at least one byte from the server (an
// HTTP answer, say a 401, before the close).
func (a *Attack) Answered() int { return int(a.answered.Load()) }

// Wait waits until every opened connection has ended (closed by the
// server, or given up at the hold's end) or ctx ends, and reports whether
// the server closed them all.
func (a *Attack) Wait(ctx context.Context) bool {
	select {
	case <-a.done:
	case <-ctx.Done():
	}
	return a.ServerClosed() == a.Opened()
}

// StillOpen is how many opened connections the server has not closed.
func (a *Attack) StillOpen() int { return a.Opened() - a.ServerClosed() }

// Close closes every connection the attack holds and waits for its
// watchers.
func (a *Attack) Close() {
	for _, h := range a.conns {
		_ = h.c.Close()
	}
	if a.conns != nil {
		<-a.done
	}
}
