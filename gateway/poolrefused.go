package gateway

import (
	"container/list"
	"errors"
	"time"

	"github.com/pdmcp/pdmcp/gateway/api"
)

// DefaultMaxRefusedCallers is PoolConfig.MaxRefusedCallers when it is zero.
const DefaultMaxRefusedCallers = 4096

// finalMintRefusal is the Gateway's refusal behind err when it is one that
// asking again cannot change until an operator acts: the identity is not
// mapped to a principal, the principal is disabled or not the service's,
// or the service may not mint scoped sessions at all. The Gateway's own
// detail says "do not retry" for these. A refused subject token is not
// final: the next call exchanges a fresh one.
func finalMintRefusal(err error) (*api.Error, bool) {
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Layer != api.LayerGateway {
		return nil, false
	}
	switch ae.Code {
	case api.CodeIdentityNotMapped, api.CodeActingAsRefused, api.CodeScopedNotAllowed:
		return ae, true
	}
	return nil, false
}

// refusedCaller is a caller whose mint the Gateway refused finally.
type refusedCaller struct {
	id  string
	at  time.Time // on the pool's clock
	err api.Error // the refusal, answered again as it was
}

// refusedMemory remembers the callers whose mint was refused finally, the
// most recent max of them, oldest dropped first, so that a flood of
// distinct refused callers cannot grow it without bound. Guarded by
// Pool.mu.
type refusedMemory struct {
	max   int
	order *list.List // of *refusedCaller, least recently refused first
	byID  map[string]*list.Element
}

func newRefusedMemory(maxCallers int) refusedMemory {
	return refusedMemory{max: maxCallers, order: list.New(), byID: map[string]*list.Element{}}
}

// remember records that id's mint was refused finally at now.
func (m *refusedMemory) remember(id string, ae *api.Error, now time.Time) {
	m.forget(id)
	r := &refusedCaller{id: id, at: now, err: *ae}
	r.err.Cause = nil // the answer is the refusal, not the request that drew it
	m.byID[id] = m.order.PushBack(r)
	for m.order.Len() > m.max {
		oldest := m.order.Front()
		delete(m.byID, oldest.Value.(*refusedCaller).id)
		m.order.Remove(oldest)
	}
}

// lookup is id's remembered refusal, or nil when there is none.
func (m *refusedMemory) lookup(id string) *refusedCaller {
	if el := m.byID[id]; el != nil {
		return el.Value.(*refusedCaller)
	}
	return nil
}

// forget drops what is remembered of id: their mint succeeded.
func (m *refusedMemory) forget(id string) {
	if el := m.byID[id]; el != nil {
		delete(m.byID, id)
		m.order.Remove(el)
	}
}

// len is how many callers are remembered.
func (m *refusedMemory) len() int { return m.order.Len() }

// refusedAnswerLocked is the refusal to answer id's call with, without
// asking the Gateway, when their mint was refused finally within
// refusedFor; nil otherwise. p.mu is held.
func (p *Pool) refusedAnswerLocked(id string) error {
	r := p.refused.lookup(id)
	if r == nil || !p.now().Before(r.at.Add(p.refusedFor)) {
		return nil
	}
	ae := r.err
	return &ae
}

// wasRefusedLocked says id's mint was refused finally before, and is not
// known to have succeeded since: their call, tried again, ends only a
// user idle past MinIdle. p.mu is held.
func (p *Pool) wasRefusedLocked(id string) bool { return p.refused.lookup(id) != nil }
