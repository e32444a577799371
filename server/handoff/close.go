package handoff

import (
	"context"
	"slices"
	"time"

	"github.com/pdmcp/pdmcp/server/journal"
	"github.com/pdmcp/pdmcp/server/refusal"
)

// Close closes every open entry of the caller's hand-off of the step,
// under the journal's lock on each: an entry that still reads as granted
// is revoked and read back absent; one that does not is left alone and
// named in the receipt's leftAlone. Asked again, it returns the first
// receipt; a step the caller never handed (or whose hand-off never
// completed) is STEP_NOT_OPEN. A lapsed hand-off closes the same way.
func (e *Engine) Close(ctx context.Context, acl ACL, caller string, p *Plan) (*Receipt, error) {
	defer e.lock(p.StepID, caller)()
	rows, err := e.cfg.Journal.StepHandOffs(ctx, p.StepID, caller)
	if err != nil {
		return nil, err
	}
	open := openRows(rows)
	if len(open) == 0 {
		last := lastVerifiedBatch(rows)
		if len(last) == 0 {
			return nil, refusal.New(refusal.StepNotOpen,
				"step %q is not handed off; nothing was sent; call hand_off first if the task needs it", p.StepID)
		}
		rec := p.receipt(last)
		rec.ClosedAt = latestClose(last).UTC().Format(time.RFC3339)
		rec.Replayed = true
		return rec, nil
	}
	var locks []journal.LockKey
	for _, r := range open {
		locks = append(locks, journal.LockKey{TTag: r.TTag, SystemID: r.SystemID, PrincipalID: r.PrincipalID})
	}
	unlock, err := e.lockOn(ctx, locks)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if _, err := SettleRows(ctx, acl, e.cfg.Journal, open); err != nil {
		return nil, err
	}
	closed, err := e.cfg.Journal.StepHandOffs(ctx, p.StepID, caller)
	if err != nil {
		return nil, err
	}
	var done []journal.HandOff
	for _, r := range closed {
		if slices.ContainsFunc(open, func(o journal.HandOff) bool { return o.ID == r.ID }) {
			done = append(done, r)
		}
	}
	rec := p.receipt(done)
	rec.ClosedAt = latestClose(done).UTC().Format(time.RFC3339)
	return rec, nil
}

// lastVerifiedBatch is the newest batch whose entries were all verified and
// are all closed, or nil.
func lastVerifiedBatch(rows []journal.HandOff) []journal.HandOff {
	var order []string
	batches := map[string][]journal.HandOff{}
	for _, r := range rows {
		if _, seen := batches[r.Batch]; !seen {
			order = append(order, r.Batch)
		}
		batches[r.Batch] = append(batches[r.Batch], r)
	}
	for i := len(order) - 1; i >= 0; i-- {
		if order[i] == "" {
			continue
		}
		batch := batches[order[i]]
		if !slices.ContainsFunc(batch, func(r journal.HandOff) bool {
			return r.VerifiedAt.IsZero() || r.State != journal.HandOffClosed
		}) {
			return batch
		}
	}
	return nil
}

func latestClose(rows []journal.HandOff) time.Time {
	var t time.Time
	for _, r := range rows {
		if r.ClosedAt.After(t) {
			t = r.ClosedAt
		}
	}
	return t
}
