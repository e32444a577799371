package gateway

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/pdmcp/pdmcp/gateway/api"
)

// idle ends one call's use of e's session.
func (p *Pool) idle(e *poolEntry) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e.busy--
	if e.busy == 0 {
		p.signalLocked()
		p.armSpareLocked()
	}
}

// signalLocked wakes every waiter for a place. p.mu is held.
func (p *Pool) signalLocked() {
	close(p.freed)
	p.freed = make(chan struct{})
}

// givePlaceLocked gives up e's place. p.mu is held.
func (p *Pool) givePlaceLocked(e *poolEntry) {
	if e.place {
		e.place, e.reserved = false, false
		p.places--
		p.signalLocked()
	}
}

// givePlace is givePlaceLocked taking p.mu.
func (p *Pool) givePlace(e *poolEntry) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.givePlaceLocked(e)
}

// takePlace makes sure e holds a place before it mints: a free one, or the
// place of the least recent user with no call in flight (idle past MinIdle
// when e's mint was refused finally before), whose session is revoked
// first; else it waits, up to MaxPlaceWait, for either. e.lock is
// held. again says e left the pool meanwhile (its place, if any, is given
// up).
func (p *Pool) takePlace(ctx context.Context, e *poolEntry) (again bool, _ error) {
	var timer *time.Timer
	for {
		p.mu.Lock()
		switch {
		case p.closed:
			p.givePlaceLocked(e)
			p.mu.Unlock()
			return false, ErrPoolClosed
		case e.gone:
			p.givePlaceLocked(e)
			p.mu.Unlock()
			return true, nil
		case e.place:
			p.mu.Unlock()
			return false, nil
		case p.places < p.maxCallers:
			e.place = true
			p.places++
			p.mu.Unlock()
			return false, nil
		}
		if p.evicting > 0 {
			// A place is being freed in the background: wait for it
			// rather than end another user.
			freed := p.freed
			p.mu.Unlock()
			select {
			case <-freed:
				continue
			case <-ctx.Done():
				return false, fmt.Errorf("waiting for a place in the session pool: %w", ctx.Err())
			}
		}
		// A caller whose mint was refused finally before, tried again,
		// may be refused again: it ends only a user idle past MinIdle.
		var calledBefore time.Time
		if p.wasRefusedLocked(e.id) {
			calledBefore = p.now().Add(-p.minIdle)
		}
		if v := p.idlestLocked(e, calledBefore); v != nil {
			// v's place passes to e once v's session is revoked: e mints
			// only after that, so the count at the Gateway never rises.
			delete(p.callers, v.id)
			vs := v.sess
			v.gone, v.sess, v.place, v.reserved, e.place = true, nil, false, false, true
			p.mu.Unlock()
			// The evicted user is named by their audit digest only.
			trace.SpanFromContext(ctx).AddEvent(EventPoolEviction, trace.WithAttributes(attribute.String("pdmcp.pool.evicted", v.digest)))
			if vs != nil {
				p.revoke(ctx, taken{v, vs}, "evicted")
			}
			v.release()
			return false, nil
		}
		freed := p.freed
		p.mu.Unlock()
		if timer == nil {
			trace.SpanFromContext(ctx).AddEvent(EventPoolWait)
			timer = time.NewTimer(p.maxPlaceWait)
			defer timer.Stop()
			p.log.LogAttrs(ctx, slog.LevelInfo, "gateway session pool: every place busy; waiting",
				slog.String("caller", e.digest), slog.Int("maxCallers", p.maxCallers))
		}
		select {
		case <-freed:
		case <-timer.C:
			p.log.LogAttrs(ctx, slog.LevelWarn, "gateway session pool: every place stayed busy; call refused SESSIONS_BUSY",
				slog.String("caller", e.digest), slog.Int("maxCallers", p.maxCallers))
			return false, p.busyRefusal()
		case <-ctx.Done():
			return false, fmt.Errorf("waiting for a place in the session pool: %w", ctx.Err())
		}
	}
}

// busyRefusal is the retryable refusal when every place stays busy.
func (p *Pool) busyRefusal() *api.Error {
	wait := max(p.maxPlaceWait, time.Second)
	return &api.Error{Layer: api.LayerAdapter, Code: api.CodeSessionsBusy, Status: http.StatusServiceUnavailable,
		RetryAfter: wait,
		Detail: fmt.Sprintf("every one of this server's %d Gateway sessions is in use by other calls in flight or kept for a user about to call; "+
			"nothing was sent; retry after %d seconds", p.maxCallers, int((wait+time.Second-1)/time.Second))}
}

// idlestLocked takes out of use, and locks, the entry holding a place that
// called least recently among those with no call in flight and not being
// served, never keep, never a place reserved within MinIdle, and (when
// calledBefore is set) whose last call was before calledBefore; nil when
// there is none. p.mu is held.
func (p *Pool) idlestLocked(keep *poolEntry, calledBefore time.Time) *poolEntry {
	kept := p.now().Add(-p.minIdle)
	var candidates []*poolEntry
	for _, e := range p.callers {
		if e != keep && e.place && e.busy == 0 && !e.gone && (calledBefore.IsZero() || e.lastAt.Before(calledBefore)) &&
			(!e.reserved || e.lastAt.Before(kept)) {
			candidates = append(candidates, e)
		}
	}
	slices.SortFunc(candidates, func(a, b *poolEntry) int { return cmp.Compare(a.lastCall, b.lastCall) })
	for _, e := range candidates {
		if e.tryAcquire() {
			return e
		}
	}
	return nil
}

// Expect says callerID is about to call (a well-formed request of theirs
// that comes before a tool call was served): when they have no entry,
// every place is taken and none is being freed, the least recent user with
// no call in flight who has not called for MinIdle is ended in the
// background now, and their place passes to callerID, reserved, once the
// session is revoked; their first call mints in it. When no such user
// exists, or a place is free, or callerID's mint was refused finally
// within RefusedFor, nothing is ended and nothing is reserved.
// Nothing is minted; at most one place is freed this way at a time.
func (p *Pool) Expect(callerID string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if callerID == "" || p.closed || p.callers[callerID] != nil || p.places < p.maxCallers || p.evicting > 0 ||
		p.refusedAnswerLocked(callerID) != nil {
		return
	}
	e := &poolEntry{id: callerID, digest: callerDigest(callerID), lock: make(chan struct{}, 1)}
	p.tick++
	e.lastCall, e.lastAt = p.tick, p.now()
	if p.freeAheadLocked(p.minIdle, e) {
		// The entry holds no place until the revoke is answered; it is
		// in the pool so that the place can pass to it.
		p.callers[callerID] = e
	}
}

// evictAheadLocked frees a place in the background when every place is
// taken and none is being freed (freeAheadLocked), for heir (nil: for
// whoever comes). It reports whether a place is free or being freed.
// p.mu is held.
func (p *Pool) evictAheadLocked(minIdle time.Duration, heir *poolEntry) bool {
	if p.closed {
		return false
	}
	if p.places < p.maxCallers || p.evicting > 0 {
		return true
	}
	return p.freeAheadLocked(minIdle, heir)
}

// freeAheadLocked takes out of the pool the least recent idle user who
// has not called for minIdle and revokes their session in the background;
// their place passes to heir once the revoke is answered (or the holder
// key destroyed), or is given up when heir is nil or has left the pool
// or found another place meanwhile, so the count at the Gateway never
// rises. It reports whether it found such a user. p.mu is held.
func (p *Pool) freeAheadLocked(minIdle time.Duration, heir *poolEntry) bool {
	var before time.Time
	if minIdle > 0 {
		before = p.now().Add(-minIdle)
	}
	v := p.idlestLocked(nil, before)
	if v == nil {
		return false
	}
	delete(p.callers, v.id)
	vs := v.sess
	v.gone, v.sess, v.heir = true, nil, heir
	p.evicting++
	p.bg.Go(func() {
		if vs != nil {
			p.revoke(context.Background(), taken{v, vs}, "evicted ahead of need")
		}
		p.mu.Lock()
		p.evicting--
		passed := p.passPlaceLocked(v)
		p.mu.Unlock()
		v.release()
		if passed {
			p.log.LogAttrs(context.Background(), slog.LevelInfo, "gateway session pool: place reserved for a newcomer",
				slog.String("caller", heir.digest), slog.String("ended", v.digest))
		}
	})
	return true
}

// passPlaceLocked hands v's place, its session revoked, to v's heir when
// the heir is still in the pool and holds no place, reserved; else it is
// given up. It reports whether it was passed. p.mu is held.
func (p *Pool) passPlaceLocked(v *poolEntry) bool {
	h := v.heir
	v.heir = nil
	if h == nil || h.gone || h.place || !v.place {
		p.givePlaceLocked(v)
		return false
	}
	v.place, v.reserved = false, false
	h.place, h.reserved = true, true
	// The heir's call may be waiting for this place.
	p.signalLocked()
	return true
}

// armSpareLocked looks again, once the least recent idle user has been
// idle for SpareIdle, whether a place should be freed ahead of need. p.mu
// is held.
func (p *Pool) armSpareLocked() {
	if p.closed || p.spareTimer != nil || p.places < p.maxCallers || p.evicting > 0 {
		return
	}
	var oldest *poolEntry
	for _, e := range p.callers {
		if e.place && e.busy == 0 && !e.gone && (oldest == nil || e.lastAt.Before(oldest.lastAt)) {
			oldest = e
		}
	}
	if oldest == nil {
		return
	}
	wait := max(oldest.lastAt.Add(p.spareIdle).Sub(p.now()), 10*time.Millisecond)
	p.spareTimer = time.AfterFunc(wait, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.spareTimer = nil
		if !p.evictAheadLocked(p.spareIdle, nil) {
			p.armSpareLocked()
		}
	})
}
