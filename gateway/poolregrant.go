package gateway

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/pdmcp/pdmcp/gateway/api"
)

// Regrant follows a changed grant: from now on sessions are minted over
// objects and never past notAfter. When the keys changed, every user's
// session is ended (revoked, its holder key destroyed), so that no session
// keeps reaching a key the grant dropped and each next call mints over the
// new keys; a call in flight on an ended session replaces it once, as for
// any session the Gateway no longer knows. When only the end changed, the
// sessions that live past an earlier end are ended; a later end needs
// nothing now (sessions are renewed under it). It refuses what NewPool
// refuses of objects.
func (p *Pool) Regrant(ctx context.Context, objects []string, notAfter time.Time) error {
	switch {
	case len(objects) == 0:
		return errors.New("session pool: regrant with no objects")
	case len(objects) > api.MaxObjects:
		return &ScopeFullError{Count: len(objects), Max: api.MaxObjects}
	case slices.Contains(objects, ""):
		return errors.New("session pool: regrant with an empty object")
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrPoolClosed
	}
	keysChanged := !sameSet(p.objects, objects)
	p.objects, p.notAfter = slices.Clone(objects), notAfter
	var ids []string
	for id, e := range p.callers {
		if keysChanged || (!notAfter.IsZero() && e.deadline.After(notAfter)) {
			ids = append(ids, id)
		}
	}
	p.mu.Unlock()
	for _, id := range ids {
		p.End(ctx, id)
	}
	return nil
}

// EndSessions ends every user's session, as End does, and leaves the pool
// open (EndAll closes it): a grant that ended may be renewed, and the next
// call then mints afresh.
func (p *Pool) EndSessions(ctx context.Context) {
	p.mu.Lock()
	ids := make([]string, 0, len(p.callers))
	for id := range p.callers {
		ids = append(ids, id)
	}
	p.mu.Unlock()
	for _, id := range ids {
		p.End(ctx, id)
	}
}

// sameSet reports whether a and b hold the same strings.
func sameSet(a, b []string) bool {
	x, y := slices.Clone(a), slices.Clone(b)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(slices.Compact(x), slices.Compact(y))
}
