package gateway

import (
	"context"
	"log/slog"
	"sync"

	"github.com/pdmcp/pdmcp/internal/panics"
)

// Drop forgets dead, the user's session, when the Gateway said it no
// longer knows it (IsSessionGone) and it is still the one the pool holds:
// its holder key is destroyed, nothing is sent, and its place is free.
// The user's next call mints a new session covering the same keys.
func (p *Pool) Drop(ctx context.Context, callerID string, dead *Session) {
	p.mu.Lock()
	e := p.callers[callerID]
	if e == nil || e.sess == nil || e.sess != dead {
		p.mu.Unlock()
		return
	}
	e.sess = nil
	p.givePlaceLocked(e) // the Gateway holds nothing for it any more
	p.mu.Unlock()
	dead.Discard()
	p.log.LogAttrs(ctx, slog.LevelInfo, "gateway session pool: session dropped; the Gateway no longer knows it",
		slog.String("caller", e.digest), slog.String("session", dead.HandleDigest()))
}

// revoke ends a session taken out of the pool. It is bounded and runs even
// when ctx is already cancelled: the session must end either way, and
// Session.Revoke destroys the holder key even when the Gateway cannot be
// told.
//
// A panic in it is recovered and taken as a revoke not confirmed: the
// holder key is destroyed all the same, and the caller gives the place
// up. On an eviction's own goroutine it would end the process.
func (p *Pool) revoke(ctx context.Context, v taken, why string) {
	defer func() {
		if r := recover(); r != nil {
			v.sess.Discard()
			p.panicked(r)
		}
	}()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), PoolRevokeTimeout)
	defer cancel()
	attrs := []slog.Attr{slog.String("caller", v.entry.digest), slog.String("session", v.sess.HandleDigest()),
		slog.String("why", why)}
	if err := v.sess.Revoke(rctx); err != nil {
		p.log.LogAttrs(ctx, slog.LevelWarn, "gateway session pool: revoke not confirmed; holder key destroyed",
			append(attrs, slog.String("code", refusalCode(err)))...)
		return
	}
	p.log.LogAttrs(ctx, slog.LevelInfo, "gateway session pool: session revoked", attrs...)
}

// panicked reports a panic the pool recovered: to OnPanic, or on the log
// without the value's contents (internal/panics).
func (p *Pool) panicked(v any) {
	if p.onPanic != nil {
		p.onPanic(v)
		return
	}
	p.log.Error("gateway session pool: a panic was recovered in a revoke; holder key destroyed",
		"panic", panics.Value(v), "stack", panics.Stack())
}

// End revokes the user's session, if they hold one, and destroys its
// holder key. A session being minted for them as End runs is revoked as
// soon as it arrives. Their next call is served by a new session.
func (p *Pool) End(ctx context.Context, callerID string) {
	p.mu.Lock()
	e := p.callers[callerID]
	if e == nil {
		p.mu.Unlock()
		return
	}
	delete(p.callers, callerID)
	v, locked := p.takeOutLocked(e)
	p.signalLocked() // a call of theirs waiting for a place starts over
	p.mu.Unlock()
	p.settle(ctx, v, locked, "ended")
}

// takeOutLocked marks e gone and takes its session. The caller settles e's
// place: when it took a session, or e holds a place with no call of the
// user serving it (locked: e.lock is then held); otherwise the call
// serving e gives the place up when it sees e gone. p.mu is held.
func (p *Pool) takeOutLocked(e *poolEntry) (v taken, locked bool) {
	e.gone = true
	v = taken{e, e.sess}
	e.sess = nil
	if v.sess == nil && e.place {
		locked = e.tryAcquire()
	}
	return v, locked
}

// settle revokes what takeOutLocked took and gives up the place.
func (p *Pool) settle(ctx context.Context, v taken, locked bool, why string) {
	if v.sess != nil {
		p.revoke(ctx, v, why)
	}
	if v.sess != nil || locked {
		p.givePlace(v.entry)
	}
	if locked {
		v.entry.release()
	}
}

// EndAll closes the pool (on SIGTERM or SIGINT): every session is revoked,
// in parallel, and every holder key destroyed; later calls of Session get
// ErrPoolClosed. It then waits, until ctx ends, for mints still in flight,
// which revoke what they minted.
func (p *Pool) EndAll(ctx context.Context) {
	p.mu.Lock()
	p.closed = true
	if p.spareTimer != nil {
		p.spareTimer.Stop()
		p.spareTimer = nil
	}
	type out struct {
		v      taken
		locked bool
	}
	var outs []out
	entries := make([]*poolEntry, 0, len(p.callers))
	for id, e := range p.callers {
		delete(p.callers, id)
		entries = append(entries, e)
		v, locked := p.takeOutLocked(e)
		outs = append(outs, out{v, locked})
	}
	p.signalLocked() // waiters for a place see the pool closed
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, o := range outs {
		wg.Go(func() { p.settle(ctx, o.v, o.locked, "shutdown") })
	}
	wg.Wait()
	// Sessions being ended in the background are revoked (each bounded by
	// PoolRevokeTimeout) before the pool counts as closed.
	p.bg.Wait()
	for _, e := range entries {
		if e.acquire(ctx) != nil {
			return
		}
		e.release()
	}
}
