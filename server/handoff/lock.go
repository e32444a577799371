package handoff

import (
	"context"
	"errors"
	"sync"

	"github.com/pdmcp/pdmcp/server/journal"
	"github.com/pdmcp/pdmcp/server/refusal"
)

func (e *Engine) lock(step, caller string) func() {
	e.mu.Lock()
	k := step + "\x00" + caller
	l, ok := e.locks[k]
	if !ok {
		l = &sync.Mutex{}
		e.locks[k] = l
	}
	e.mu.Unlock()
	l.Lock()
	return l.Unlock
}
func lockKeys(keys []string, systemID int64, principalID string) []journal.LockKey {
	out := make([]journal.LockKey, 0, len(keys))
	for _, k := range keys {
		out = append(out, journal.LockKey{TTag: k, SystemID: systemID, PrincipalID: principalID})
	}
	return out
}

// lockOn takes the journal's locks on keys (see journal.LockHandOffs); a
// wait that runs out is HANDOFF_BUSY.
func (e *Engine) lockOn(ctx context.Context, keys []journal.LockKey) (func(), error) {
	unlock, err := e.cfg.Journal.LockHandOffs(ctx, keys, journal.LockOptions{OnWait: e.cfg.OnLockWait, OnPanic: e.cfg.OnPanic})
	if errors.Is(err, journal.ErrLockBusy) {
		return nil, refusal.New(refusal.HandOffBusy,
			"another hand-off, close or save on the same section and recipient is still in progress; nothing was changed; try again in a minute")
	}
	return unlock, err
}
