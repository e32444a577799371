package reference

import (
	"context"
	"maps"
	"net/http"
	"sync"
	"time"

	"github.com/pdmcp/pdmcp/gateway/api"
)

// Faults are failures injected at run time, for tests of a client's
// behaviour when the Gateway is slow, failing, or out of step. SetFaults
// replaces them all; the zero value injects nothing. The JSON form is the
// body of POST /api/v1/admin/test/faults (durations in nanoseconds, as
// time.Duration marshals).
type Faults struct {
	// Delay is waited before answering every request. Changing the faults
	// (or closing the Gateway) ends the waits under way; a test should
	// lift a long Delay before closing an httptest.Server, whose Close
	// waits for the requests it holds.
	Delay time.Duration `json:"delay,omitempty"`
	// DelayActingAs, when set, narrows Delay to the encrypts and decrypts
	// of scoped sessions acting as this principal, waited after the
	// session is authenticated; every other request is answered at once.
	DelayActingAs string `json:"delayActingAs,omitempty"`
	// FailNext makes the next N requests to a route (its path) fail with
	// Status and code INJECTED_FAULT, before any check.
	FailNext map[string]int `json:"failNext,omitempty"`
	// Status is the 5xx status of FailNext's failures; 0 (or anything
	// outside 500-599) means 503.
	Status int `json:"status,omitempty"`
	// LoseEncryptAnswer makes the next N successful encrypts do all their
	// work (a minted key, audit rows) and then drop the connection without
	// an answer.
	LoseEncryptAnswer int `json:"loseEncryptAnswer,omitempty"`
	// FailEncryptAfterWork makes the next N successful encrypts do all
	// their work (a minted key, audit rows) and then answer Status with
	// code INJECTED_FAULT, as a Gateway whose key server answered too late
	// (a 504 after the key was made).
	FailEncryptAfterWork int `json:"failEncryptAfterWork,omitempty"`
	// ClockSkew moves the Gateway's clock: its Date header, session
	// expiry and proof window all use now+ClockSkew.
	ClockSkew time.Duration `json:"clockSkew,omitempty"`
	// IdPUnavailable, while > 0, makes every subject-token mint answer 503
	// IDP_UNAVAILABLE with this Retry-After.
	IdPUnavailable time.Duration `json:"idpUnavailable,omitempty"`
	// MintAsPrincipal, when set, makes every scoped mint that would
	// succeed act as this principal (any service's) instead of the one
	// asked for or mapped: a Gateway answering another principal.
	MintAsPrincipal string `json:"mintAsPrincipal,omitempty"`
	// SessionGoneNext makes the next N requests to a route (its path) be
	// answered 401 SESSION_MISSING before any check, as if the Gateway had
	// forgotten the caller's session.
	SessionGoneNext map[string]int `json:"sessionGoneNext,omitempty"`
	// HoldRoute, when set, holds every request to this route (its path),
	// counted on arrival, until the faults change or the Gateway closes:
	// a barrier that lets a test see a request arrive and decide when it
	// is answered.
	HoldRoute string `json:"holdRoute,omitempty"`
}

// faultState is the current Faults, shared by every request.
type faultState struct {
	mu sync.Mutex
	f  Faults
	// changed is closed (and replaced) whenever the faults change, and
	// for good when the Gateway closes, so that requests held by a Delay
	// are let go then rather than holding a test's server open.
	changed chan struct{}
	closed  bool
}

func newFaultState() *faultState { return &faultState{changed: make(chan struct{})} }

func (s *faultState) set(f Faults) {
	f.FailNext = maps.Clone(f.FailNext)
	f.SessionGoneNext = maps.Clone(f.SessionGoneNext)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.f = f
	if !s.closed {
		close(s.changed)
		s.changed = make(chan struct{})
	}
}

// close lets every held request go, now and later.
func (s *faultState) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		close(s.changed)
	}
}

func (s *faultState) get() Faults {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.f
	f.FailNext = maps.Clone(f.FailNext)
	f.SessionGoneNext = maps.Clone(f.SessionGoneNext)
	return f
}

func (s *faultState) clockSkew() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.f.ClockSkew
}

func (s *faultState) idpUnavailable() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.f.IdPUnavailable
}

func (s *faultState) mintAsPrincipal() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.f.MintAsPrincipal
}

// wait sleeps the injected delay, or until the request is abandoned, the
// faults change or the Gateway closes. A delay narrowed to one principal
// is waited by waitActingAs instead.
func (s *faultState) wait(ctx context.Context, route string) error {
	s.mu.Lock()
	d, changed, closed := s.f.Delay, s.changed, s.closed
	if s.f.DelayActingAs != "" {
		d = 0
	}
	hold := s.f.HoldRoute != "" && s.f.HoldRoute == route && !closed
	s.mu.Unlock()
	if hold {
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	}
	return sleep(ctx, d, changed)
}

// waitActingAs sleeps the delay narrowed to principal, if it is this one.
func (s *faultState) waitActingAs(ctx context.Context, principal string) error {
	s.mu.Lock()
	d, changed := s.f.Delay, s.changed
	if s.f.DelayActingAs == "" || s.f.DelayActingAs != principal {
		d = 0
	}
	s.mu.Unlock()
	return sleep(ctx, d, changed)
}

func sleep(ctx context.Context, d time.Duration, changed <-chan struct{}) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-changed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// takeFailure spends one injected failure of route, if any.
func (s *faultState) takeFailure(route string) (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f.FailNext[route] <= 0 {
		return 0, false
	}
	s.f.FailNext[route]--
	if s.f.FailNext[route] == 0 {
		delete(s.f.FailNext, route)
	}
	status := s.f.Status
	if status < 500 || status > 599 {
		status = http.StatusServiceUnavailable
	}
	return status, true
}

// takeSessionGone spends one injected SESSION_MISSING of route, if any.
func (s *faultState) takeSessionGone(route string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f.SessionGoneNext[route] <= 0 {
		return false
	}
	s.f.SessionGoneNext[route]--
	if s.f.SessionGoneNext[route] == 0 {
		delete(s.f.SessionGoneNext, route)
	}
	return true
}

func (s *faultState) takeLoseEncrypt() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f.LoseEncryptAnswer <= 0 {
		return false
	}
	s.f.LoseEncryptAnswer--
	return true
}

// takeFailEncryptAfterWork spends one injected after-work failure, if
// any, and returns its status.
func (s *faultState) takeFailEncryptAfterWork() (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f.FailEncryptAfterWork <= 0 {
		return 0, false
	}
	s.f.FailEncryptAfterWork--
	status := s.f.Status
	if status < 500 || status > 599 {
		status = http.StatusServiceUnavailable
	}
	return status, true
}

// SetFaults replaces the injected faults. Safe for concurrent use.
func (g *Gateway) SetFaults(f Faults) { g.faults.set(f) }

// CurrentFaults are the faults still in force (FailNext,
// LoseEncryptAnswer and FailEncryptAfterWork count down as they are spent).
func (g *Gateway) CurrentFaults() Faults { return g.faults.get() }

// DropServiceSessions forgets every service session: the next use of one
// is 401 SERVICE_SESSION_EXPIRED. Scoped sessions are not touched.
func (g *Gateway) DropServiceSessions() { g.sessions.dropServiceSessions() }

// counter counts requests per route path, on arrival.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func newCounter() *counter { return &counter{n: map[string]int{}} }

func (c *counter) add(route string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[route]++
}

// Counts is how many requests each route (by path) received since the
// Gateway opened or ResetCounts, counted on arrival before any check. The
// test-control routes are not counted.
func (g *Gateway) Counts() map[string]int {
	g.counts.mu.Lock()
	defer g.counts.mu.Unlock()
	return maps.Clone(g.counts.n)
}

// Count is Counts()[route].
func (g *Gateway) Count(route string) int {
	g.counts.mu.Lock()
	defer g.counts.mu.Unlock()
	return g.counts.n[route]
}

// ResetCounts sets every count to zero, and the peak of live scoped
// sessions to those live now.
func (g *Gateway) ResetCounts() {
	g.counts.mu.Lock()
	defer g.counts.mu.Unlock()
	clear(g.counts.n)
	g.sessions.resetPeak(g.now())
}

// LiveScopedSessions is how many scoped sessions are live (neither revoked
// nor expired) now, and the most that were live at once since the Gateway
// opened or ResetCounts.
func (g *Gateway) LiveScopedSessions() (live, peak int) { return g.sessions.live(g.now()) }

// The same controls over HTTP, for a Gateway run as another process.

// CountsRequest is the body of POST /api/v1/admin/test/counts: Reset
// zeroes the counts after reading them.
type CountsRequest struct {
	Reset bool `json:"reset,omitempty"`
}

// CountsResponse answers POST /api/v1/admin/test/counts.
type CountsResponse struct {
	Counts map[string]int `json:"counts"`
	// LiveScoped and PeakLiveScoped are LiveScopedSessions, read before
	// any reset.
	LiveScoped     int `json:"liveScoped"`
	PeakLiveScoped int `json:"peakLiveScoped"`
}

func (g *Gateway) controlFaults(_ context.Context, c *call) (any, error) {
	var f Faults
	if err := c.decode(&f); err != nil {
		return nil, err
	}
	if f.Status != 0 && (f.Status < 500 || f.Status > 599) {
		return nil, badRequest("status must be a 5xx code, or 0 for 503; fix it")
	}
	if f.Delay < 0 || f.LoseEncryptAnswer < 0 || f.FailEncryptAfterWork < 0 || f.IdPUnavailable < 0 {
		return nil, badRequest("delay, loseEncryptAnswer, failEncryptAfterWork and idpUnavailable may not be negative; fix them")
	}
	for _, n := range f.FailNext {
		if n < 0 {
			return nil, badRequest("failNext counts may not be negative; fix them")
		}
	}
	for _, n := range f.SessionGoneNext {
		if n < 0 {
			return nil, badRequest("sessionGoneNext counts may not be negative; fix them")
		}
	}
	g.SetFaults(f)
	g.log.Info("faults set over HTTP")
	return g.CurrentFaults(), nil
}

func (g *Gateway) controlCounts(_ context.Context, c *call) (any, error) {
	var req CountsRequest
	if err := c.decode(&req); err != nil {
		return nil, err
	}
	g.counts.mu.Lock()
	defer g.counts.mu.Unlock()
	ans := CountsResponse{Counts: maps.Clone(g.counts.n)}
	ans.LiveScoped, ans.PeakLiveScoped = g.sessions.live(g.now())
	if req.Reset {
		clear(g.counts.n)
		g.sessions.resetPeak(g.now())
	}
	return ans, nil
}

func (g *Gateway) controlDrop(_ context.Context, c *call) (any, error) {
	var req struct{}
	if err := c.decode(&req); err != nil {
		return nil, err
	}
	g.DropServiceSessions()
	return api.OKResponse{OK: true}, nil
}
