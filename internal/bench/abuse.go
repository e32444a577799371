package bench

// The abuse suite (issue 31, item 9): what any program on the machine can
// do to the HTTP transport, with or without a token, kept as bounded
// attacks that P7 and TestAbuseSuite run against a running server. Each attack goes to
// a loopback IP address only, holds at most the connections its sizes
// say, opens new ones at a bounded rate, stops by itself at MaxAttack at
// the latest, and closes everything it opened before it returns.
//
// The sixth scenario, a panicking tool, needs a panic injected
// into a tool, which only a test can add (there is no production switch
// for it, on purpose): server's TestPanicInAToolEndsThatCallOnly and
// internal/serve's TestHTTPPanicInAToolEndsThatCallOnly and
// TestStdioPanicInAToolEndsThatCallOnly cover it.

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Attack names one of the suite's attacks.
type Attack string

// The suite's attacks, by the letters.
const (
	// AttackStalledAnon (a): connections with no token, each sending TLS,
	// the headers of a POST /mcp announcing a body of AbuseBodyLength
	// bytes, and then nothing; up to and past the connection cap.
	AttackStalledAnon Attack = "stalled-unauthenticated-bodies"
	// AttackStalledHeaders (a'): connections with no token sending TLS and
	// the start of a request's headers, never their end. A server that
	// answers a stalled body without a token at once (401, connection
	// closed) cannot answer these before its header deadline: they are
	// what fills the connection cap, so they go past it too.
	AttackStalledHeaders Attack = "stalled-unauthenticated-headers"
	// AttackStalledAuthed (b): the same from a signed-in user who may read
	// nothing, with the first bytes of the body sent.
	AttackStalledAuthed Attack = "stalled-authenticated-bodies"
	// AttackListenFlood (c): 2026-07-28 subscriptions/listen streams from
	// one user, each on its own connection and held open.
	AttackListenFlood Attack = "listen-stream-flood"
	// AttackJunk (d): `this is not json` from a signed-in user, paced,
	// while the Gateway session pool is full (the caller fills it).
	AttackJunk Attack = "junk-at-full-pool"
	// AttackRefusalFlood (e): requests without a token on keep-alive
	// connections, paced.
	AttackRefusalFlood Attack = "unauthenticated-refusal-flood"
)

// Attacks are the suite's attacks in the order.
func Attacks() []Attack {
	return []Attack{AttackStalledAnon, AttackStalledHeaders, AttackStalledAuthed, AttackListenFlood, AttackJunk, AttackRefusalFlood}
}

// Bounds of every attack, whatever its sizes say.
const (
	// MaxAttack is the longest an attack runs: it stops by itself then.
	MaxAttack = 10 * time.Minute
	// maxHeld bounds the connections one attack holds at once.
	maxHeld = 4096
	// maxRate bounds requests and new connections per second.
	maxRate = 10000
	// AbuseBodyLength is the Content-Length the stalled bodies announce.
	AbuseBodyLength = 200000
)

// AbuseTarget is the server an attack goes to.
type AbuseTarget struct {
	// URL is the MCP endpoint, https://<loopback IP>:<port>/mcp.
	URL string
	// TLS trusts the server's certificate.
	TLS *tls.Config
	// Token is the signed-in user's, for (b), (c) and (d): one who may
	// read nothing (carol).
	Token string
}

// AbuseSizes size the attacks.
type AbuseSizes struct {
	StalledAnon   int     // (a) connections held at once
	StalledHeader int     // (a') connections held at once
	StalledAuthed int     // (b) connections held at once
	Listen        int     // (c) streams held at once
	JunkRate      float64 // (d) requests per second
	RefusalConns  int     // (e) keep-alive connections
	RefusalRate   float64 // (e) requests per second, over all its connections
	// OpenRate bounds the new connections per second of each holding
	// attack, (a) to (c): the first ones, and those opened again after
	// the server closed them.
	OpenRate float64
}

// AttackStats is what one attack did and what the server answered.
type AttackStats struct {
	Attack Attack `json:"attack"`
	// Opened is the connections opened (and, for (a) to (c), their
	// request sent); Failed those that could not be opened or written.
	Opened int64 `json:"opened"`
	Failed int64 `json:"failed"`
	// ServerClosed is the held connections the server closed (or reset)
	// while the attack held them.
	ServerClosed int64 `json:"serverClosed"`
	// Requests is the requests sent; Statuses counts the answers' HTTP
	// status codes (0: no answer before the connection ended).
	Requests int64         `json:"requests"`
	Statuses map[int]int64 `json:"statuses"`
	// MostHeld is the most connections held at once.
	MostHeld int64 `json:"mostHeld"`
}

func (s *AttackStats) String() string {
	var codes []string
	for _, c := range []int{0, 200, 202, 400, 401, 403, 404, 405, 406, 413, 415, 429, 500, 503} {
		if n := s.Statuses[c]; n > 0 {
			codes = append(codes, fmt.Sprintf("%d×%d", c, n))
		}
	}
	return fmt.Sprintf("%s: %d opened, %d failed, %d closed by the server, at most %d held, %d requests, answers [%s]",
		s.Attack, s.Opened, s.Failed, s.ServerClosed, s.MostHeld, s.Requests, strings.Join(codes, " "))
}

// attackRun counts one attack's outcomes; its counters are read while it
// runs.
type attackRun struct {
	kind                             Attack
	opened, failed, closed, requests atomic.Int64
	held, mostHeld                   atomic.Int64
	mu                               sync.Mutex
	statuses                         map[int]int64
}

func (r *attackRun) status(code int) {
	r.mu.Lock()
	r.statuses[code]++
	r.mu.Unlock()
}

func (r *attackRun) hold(d int64) {
	n := r.held.Add(d)
	for {
		m := r.mostHeld.Load()
		if n <= m || r.mostHeld.CompareAndSwap(m, n) {
			return
		}
	}
}

func (r *attackRun) stats() *AttackStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := &AttackStats{Attack: r.kind, Opened: r.opened.Load(), Failed: r.failed.Load(), ServerClosed: r.closed.Load(),
		Requests: r.requests.Load(), MostHeld: r.mostHeld.Load(), Statuses: make(map[int]int64, len(r.statuses))}
	for k, v := range r.statuses {
		s.Statuses[k] = v
	}
	return s
}

// RunningAttack is an attack in progress.
type RunningAttack struct {
	run    *attackRun
	cancel context.CancelFunc
	done   chan struct{}
}

// Stats is what the attack has done so far.
func (a *RunningAttack) Stats() *AttackStats { return a.run.stats() }

// Held is how many connections the attack holds now.
func (a *RunningAttack) Held() int64 { return a.run.held.Load() }

// Stop ends the attack, closes everything it opened and returns its
// stats.
func (a *RunningAttack) Stop() *AttackStats {
	a.cancel()
	<-a.done
	return a.run.stats()
}

// StartAttack starts kind against t, sized by n; it runs until Stop, ctx
// ends or MaxAttack has passed.
func StartAttack(ctx context.Context, t AbuseTarget, kind Attack, n AbuseSizes) (*RunningAttack, error) {
	u, err := url.Parse(t.URL)
	if err != nil || u.Scheme != "https" || u.Port() == "" {
		return nil, fmt.Errorf("abuse: target %q: want https://<loopback IP>:<port>/<path>", t.URL)
	}
	if ip := net.ParseIP(u.Hostname()); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("abuse: target %q: only a loopback IP address is attacked", t.URL)
	}
	if t.TLS == nil {
		return nil, errors.New("abuse: no TLS configuration for the target")
	}
	if (kind == AttackStalledAuthed || kind == AttackListenFlood || kind == AttackJunk) && t.Token == "" {
		return nil, fmt.Errorf("abuse: %s needs a signed-in user's token", kind)
	}
	ctx, cancel := context.WithTimeout(ctx, MaxAttack)
	a := &RunningAttack{run: &attackRun{kind: kind, statuses: map[int]int64{}}, cancel: cancel, done: make(chan struct{})}
	h := &holder{u: u, tls: t.TLS, run: a.run}
	var fn func(context.Context)
	switch kind {
	case AttackStalledAnon:
		fn = h.holdMany(bound(n.StalledAnon), n.OpenRate, h.stalledBody(""))
	case AttackStalledHeaders:
		fn = h.holdMany(bound(n.StalledHeader), n.OpenRate, h.stalledHeaders())
	case AttackStalledAuthed:
		fn = h.holdMany(bound(n.StalledAuthed), n.OpenRate, h.stalledBody(t.Token))
	case AttackListenFlood:
		fn = h.holdMany(bound(n.Listen), n.OpenRate, h.listen(t.Token))
	case AttackJunk:
		fn = h.flood(1, n.JunkRate, t.Token, "this is not json")
	case AttackRefusalFlood:
		fn = h.flood(bound(n.RefusalConns), n.RefusalRate, "",
			`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`)
	default:
		cancel()
		return nil, fmt.Errorf("abuse: unknown attack %q", kind)
	}
	go func() {
		defer close(a.done)
		defer cancel()
		fn(ctx)
	}()
	return a, nil
}

func bound(n int) int { return min(max(n, 1), maxHeld) }

// pacer hands out one tick per 1/rate seconds until ctx ends.
func pacer(ctx context.Context, rate float64) func() bool {
	rate = min(max(rate, 0.1), maxRate)
	interval := time.Duration(float64(time.Second) / rate)
	var mu sync.Mutex
	next := time.Now()
	return func() bool {
		mu.Lock()
		// A pacer that fell behind does not burst to catch up.
		if now := time.Now(); next.Before(now) {
			next = now
		}
		at := next
		next = next.Add(interval)
		mu.Unlock()
		if d := time.Until(at); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return false
			}
		}
		return ctx.Err() == nil
	}
}

// holder opens and holds connections.
type holder struct {
	u   *url.URL
	tls *tls.Config
	run *attackRun
}

// heldRequest is what one held connection sends after its handshake.
type heldRequest struct{ text string }

// stalledBody is a POST /mcp announcing AbuseBodyLength bytes; with a
// token its first bytes follow, then nothing.
func (h *holder) stalledBody(token string) heldRequest {
	auth, first := "", ""
	if token != "" {
		auth, first = "Authorization: Bearer "+token+"\r\n", `{"jsonrpc":"2.0",`
	}
	return heldRequest{text: fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\n%sContent-Type: application/json\r\n"+
		"Accept: application/json, text/event-stream\r\nMcp-Protocol-Version: %s\r\nContent-Length: %d\r\n\r\n%s",
		h.u.EscapedPath(), h.u.Host, auth, SessionProtocol, AbuseBodyLength, first)}
}

// stalledHeaders is the start of a POST /mcp's headers, never ended.
func (h *holder) stalledHeaders() heldRequest {
	return heldRequest{text: fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n",
		h.u.EscapedPath(), h.u.Host)}
}

// listenMeta is a 2026-07-28 request's _meta.
const listenMeta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",` +
	`"io.modelcontextprotocol/clientInfo":{"name":"pdmcp-bench-abuse","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}`

// listen is a 2026-07-28 subscriptions/listen request; when accepted its
// stream stays open as long as the connection does.
func (h *holder) listen(token string) heldRequest {
	body := `{"jsonrpc":"2.0","id":1,"method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true},` +
		listenMeta + `}}`
	return heldRequest{text: fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMcp-Protocol-Version: %s\r\n"+
		"Mcp-Method: subscriptions/listen\r\nContent-Length: %d\r\n\r\n%s",
		h.u.EscapedPath(), h.u.Host, token, StatelessProtocol, len(body), body)}
}

// holdMany keeps up to n connections open, each carrying req, opening
// them (and again those the server closes) at most rate a second.
func (h *holder) holdMany(n int, rate float64, req heldRequest) func(context.Context) {
	return func(ctx context.Context) {
		tick := pacer(ctx, rate)
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for tick() {
					h.holdOne(ctx, req)
				}
			}()
		}
		wg.Wait()
	}
}

// holdOne opens one connection, sends req and holds the connection until
// the server closes it or ctx ends.
func (h *holder) holdOne(ctx context.Context, req heldRequest) {
	cfg := h.tls.Clone()
	cfg.NextProtos = []string{"http/1.1"} // one request holds one connection
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 10 * time.Second}, Config: cfg}
	c, err := d.DialContext(ctx, "tcp", h.u.Host)
	if err != nil {
		if ctx.Err() == nil {
			h.run.failed.Add(1)
		}
		return
	}
	defer c.Close()
	// Closing the connection is what ends a read blocked on it.
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	if _, err := io.WriteString(c, req.text); err != nil {
		if ctx.Err() == nil {
			h.run.failed.Add(1)
		}
		return
	}
	h.run.opened.Add(1)
	h.run.requests.Add(1)
	h.run.hold(1)
	defer h.run.hold(-1)
	// The answer, if any comes (a listen stream's head; a 408, 413 or 429
	// for a stalled body), then whatever follows (a stream's events), until
	// the server ends the connection.
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		h.run.status(0)
		h.run.closed.Add(1)
		return
	}
	h.run.status(resp.StatusCode)
	_, _ = io.Copy(io.Discard, br)
	if ctx.Err() == nil {
		h.run.closed.Add(1)
	}
}

// flood sends body as POST /mcp (with token when set) at rate a second
// over conns keep-alive connections, reading every answer whole.
func (h *holder) flood(conns int, rate float64, token, body string) func(context.Context) {
	return func(ctx context.Context) {
		cfg := h.tls.Clone()
		cfg.NextProtos = []string{"http/1.1"}
		base := &net.Dialer{Timeout: 10 * time.Second}
		tr := &http.Transport{TLSClientConfig: cfg, MaxConnsPerHost: conns, MaxIdleConnsPerHost: conns,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				h.run.opened.Add(1)
				return base.DialContext(ctx, network, addr)
			}}
		defer tr.CloseIdleConnections()
		hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
		tick := pacer(ctx, rate)
		var wg sync.WaitGroup
		for range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for tick() {
					h.send(ctx, hc, token, body)
				}
			}()
		}
		wg.Wait()
	}
}

func (h *holder) send(ctx context.Context, hc *http.Client, token, body string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.u.String(), strings.NewReader(body))
	if err != nil {
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", SessionProtocol)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	h.run.requests.Add(1)
	resp, err := hc.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			h.run.failed.Add(1)
			h.run.status(0)
		}
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	h.run.status(resp.StatusCode)
}

// Suite is every attack of the suite running at once.
type Suite struct{ attacks []*RunningAttack }

// StartAll starts every attack of the suite at once.
func StartAll(ctx context.Context, t AbuseTarget, n AbuseSizes) (*Suite, error) {
	s := &Suite{}
	for _, k := range Attacks() {
		a, err := StartAttack(ctx, t, k, n)
		if err != nil {
			s.Stop()
			return nil, err
		}
		s.attacks = append(s.attacks, a)
	}
	return s, nil
}

// Stop ends every attack and returns their stats in the suite's order.
func (s *Suite) Stop() []*AttackStats {
	for _, a := range s.attacks {
		a.cancel()
	}
	out := make([]*AttackStats, len(s.attacks))
	for i, a := range s.attacks {
		out[i] = a.Stop()
	}
	return out
}

// UnderWay waits until every attack is under way (see
// RunningAttack.UnderWay), at most wait in all.
func (s *Suite) UnderWay(ctx context.Context, n AbuseSizes, wait time.Duration) bool {
	deadline := time.Now().Add(wait)
	for _, a := range s.attacks {
		if !a.UnderWay(ctx, n, time.Until(deadline)) {
			return false
		}
	}
	return true
}

// UnderWay waits, at most wait (a bound against a hang), until a holding
// attack has opened every connection its sizes ask for, or a flood has
// sent a few requests; it reports whether it did.
func (a *RunningAttack) UnderWay(ctx context.Context, n AbuseSizes, wait time.Duration) bool {
	want := map[Attack]int64{AttackStalledAnon: int64(bound(n.StalledAnon)), AttackStalledHeaders: int64(bound(n.StalledHeader)),
		AttackStalledAuthed: int64(bound(n.StalledAuthed)), AttackListenFlood: int64(bound(n.Listen))}
	deadline := time.Now().Add(wait)
	for {
		s := a.Stats()
		if w, held := want[s.Attack]; (held && s.Opened >= w) || (!held && s.Requests >= 5) {
			return true
		}
		if !time.Now().Before(deadline) || ctx.Err() != nil {
			return false
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
		}
	}
}
