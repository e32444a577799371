package serve

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/pdmcp/pdmcp/grant"
)

// Defaults of the grant watch.
const (
	// grantCheckInterval is how often the grant file is looked at (and the
	// Gateway's reachability checked) between calls: a renewal is in force
	// at the next call anyway; this is for the logs, the metric and
	// /healthz of a server nobody calls.
	grantCheckInterval = 30 * time.Second
	// reachTimeout bounds one reachability check.
	reachTimeout = 5 * time.Second
)

// grantWarnings are how long before its end a grant is logged at WARN
// (once each per grant); its end is logged too.
var grantWarnings = [...]time.Duration{24 * time.Hour, time.Hour}

// grantFollower is the server: it reads grant.json again when it changed
// and returns the grant in force (server.Server.FollowGrant).
type grantFollower interface {
	FollowGrant(ctx context.Context) *grant.Grant
}

// opsState is what the operations endpoints and the grant metric report:
// the grant in force and the last reachability checks, all cached, so a
// health request never waits on the network.
type opsState struct {
	now func() time.Time

	mu       sync.Mutex
	grant    *grant.Grant
	gateway  reach
	provider reach
	// warned are the warnings logged, by grant id, end and threshold.
	warned map[string]bool
}

// reach is the outcome of the last reachability check.
type reach struct {
	checked   bool
	ok        bool
	err       string
	checkedAt time.Time
}

func newOpsState(g *grant.Grant, now func() time.Time) *opsState {
	return &opsState{now: now, grant: g, warned: map[string]bool{}}
}

func (st *opsState) setGrant(g *grant.Grant) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.grant = g
}

// secondsLeft is how long the grant in force has left, 0 once it ended.
func (st *opsState) secondsLeft() float64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	return max(0, st.grant.NotAfter.Sub(st.now()).Seconds())
}

// warnExpiry logs the grant's coming end at each threshold it has passed,
// and its end, once per grant.
func (st *opsState) warnExpiry(log *slog.Logger) {
	st.mu.Lock()
	defer st.mu.Unlock()
	g := st.grant
	left := g.NotAfter.Sub(st.now())
	key := func(what string) string { return g.ID + "|" + g.NotAfter.String() + "|" + what }
	attrs := []any{"grant", g.ID, "notAfter", g.NotAfter.UTC().Format(time.RFC3339)}
	if left <= 0 {
		if !st.warned[key("ended")] {
			st.warned[key("ended")] = true
			log.Warn("the grant has ended: every tool call is refused GRANT_EXPIRED until a new grant is written "+
				"over the served one (pdmcp grant ... --out)", attrs...)
		}
		return
	}
	for _, before := range grantWarnings {
		k := key(before.String())
		if left <= before && !st.warned[k] {
			// The nearer thresholds already passed are marked too: one
			// line says how long is left.
			for _, b := range grantWarnings {
				if left <= b {
					st.warned[key(b.String())] = true
				}
			}
			log.Warn("the grant ends soon; write a renewed one over the served file (pdmcp grant ... --out)",
				append(attrs, "secondsLeft", int64(left.Seconds()))...)
			return
		}
	}
}

// pinger is the Gateway client: one unauthenticated request that
// proves the Gateway answers (gateway.Client.Reachable).
type pinger interface {
	Reachable(ctx context.Context) error
}

// checkReach asks p once, bounded by reachTimeout, and records the
// outcome in *into.
func (st *opsState) checkReach(ctx context.Context, p pinger, into *reach) {
	ctx, cancel := context.WithTimeout(ctx, reachTimeout)
	defer cancel()
	err := p.Reachable(ctx)
	r := reach{checked: true, ok: err == nil, checkedAt: st.now()}
	if err != nil {
		r.err = err.Error()
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	*into = r
}

// health is /healthz's answer: ok says whether anything can be served
// (the grant in force has not ended, and the Gateway answered the last
// check). The provider's reachability is reported but does not make it
// fail: tokens are still verified under the keys held, for
// provider.jwksGraceSeconds.
func (st *opsState) health() (body map[string]any, ok bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	now := st.now()
	g := st.grant
	left := int64(max(0, g.NotAfter.Sub(now).Seconds()))
	ok = now.Before(g.NotAfter)
	body = map[string]any{"grant": map[string]any{"id": g.ID, "notAfter": g.NotAfter.UTC().Format(time.RFC3339),
		"secondsLeft": left, "expired": !ok}}
	body["gateway"] = st.gateway.report()
	if st.gateway.checked && !st.gateway.ok {
		ok = false
	}
	if st.provider.checked {
		body["provider"] = st.provider.report()
	}
	return body, ok
}

// report is a reach as /healthz shows it.
func (r reach) report() map[string]any {
	out := map[string]any{"checked": r.checked}
	if r.checked {
		out["reachable"] = r.ok
		out["checkedAt"] = r.checkedAt.UTC().Format(time.RFC3339)
		if !r.ok {
			out["error"] = r.err
		}
	}
	return out
}

// probeProvider tries the provider's discovery once at start, bounded: a
// provider that cannot be reached is logged at WARN with the reason, and
// the server serves anyway (requests are answered 503 with Retry-After
// while their tokens cannot be checked).
func probeProvider(ctx context.Context, p interface {
	Reachable(ctx context.Context) error
}, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, reachTimeout)
	defer cancel()
	if err := p.Reachable(ctx); err != nil {
		log.Warn("the OpenID provider cannot be reached at start; serving anyway, and requests are answered 503 "+
			"with Retry-After while their tokens cannot be checked", "err", err)
	}
}

// watchGrant follows the grant between calls, logs its coming end and
// checks the Gateway's (and the provider's) reachability, every interval
// until stop. gw and provider are nil when nothing reports reachability
// (no /healthz): the server then sends the Gateway nothing of its own
// between calls. The first round runs before watchGrant returns, so a
// server is checked before it serves.
func watchGrant(ctx context.Context, f grantFollower, st *opsState, gw, provider pinger, interval time.Duration,
	log *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	round := func() {
		st.setGrant(f.FollowGrant(ctx))
		st.warnExpiry(log)
		if gw != nil {
			st.checkReach(ctx, gw, &st.gateway)
		}
		if provider != nil {
			st.checkReach(ctx, provider, &st.provider)
		}
	}
	round()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			round()
		}
	}()
	return func() {
		cancel()
		wg.Wait()
	}
}
