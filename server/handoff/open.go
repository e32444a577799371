package handoff

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/internal/crashpoint"
	"github.com/pdmcp/pdmcp/server/journal"
	"github.com/pdmcp/pdmcp/server/refusal"
)

// HandOff grants the step's recipient READ on each of the plan's keys,
// until end, through acl (a session acting as the step's from user). The
// caller has checked that it is that user and asked any confirmation.
//
// The whole call holds the journal's lock on each (key, recipient) it
// touches, so no other hand-off, close or save check, in this process or
// another, works on them meanwhile. Every entry is journalled before it is
// granted and read back after; a grant the key server refuses made
// nothing, and its row is closed without a revoke; if any grant fails, or
// any entry does not read back as READ with that end and unlimited uses,
// every entry made is undone: read back, and revoked only where it still
// reads as this server granted it. A recipient who already holds an entry
// on one of the keys is refused before anything is granted, and that entry
// is never touched, unless it is a lapsed hand-off of this server's
// journal, which is then closed the same way. While the caller's hand-off
// of the step is open, the first receipt is returned and nothing is
// granted.
func (e *Engine) HandOff(ctx context.Context, acl ACL, caller string, p *Plan, end time.Time) (*Receipt, error) {
	defer e.lock(p.StepID, caller)()
	to := p.Step.To
	rows, err := e.cfg.Journal.StepHandOffs(ctx, p.StepID, caller)
	if err != nil {
		return nil, err
	}
	locks := lockKeys(p.Keys, to.SystemID, to.PrincipalID)
	for _, r := range openRows(rows) {
		locks = append(locks, journal.LockKey{TTag: r.TTag, SystemID: r.SystemID, PrincipalID: r.PrincipalID})
	}
	unlock, err := e.lockOn(ctx, locks)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if rec, ok, err := e.Open(ctx, caller, p); err != nil || ok {
		return rec, err
	}
	// Entries left by an earlier hand-off of this step that lapsed, or that
	// did not finish (a crash), are this server's own where they still read
	// as granted: take those back first, and leave anything else alone.
	if rows, err = e.cfg.Journal.StepHandOffs(ctx, p.StepID, caller); err != nil {
		return nil, err
	}
	leftoverAlone := map[string]bool{}
	if left := openRows(rows); len(left) > 0 {
		res, err := SettleRows(ctx, acl, e.cfg.Journal, left)
		if err != nil {
			return nil, err
		}
		for _, r := range res {
			if r.Reason == journal.ClosedLeftAlone {
				leftoverAlone[r.Row.TTag] = true
				e.cfg.Logger.Warn("an earlier hand-off's entry no longer reads as granted; left alone", "step", p.StepID,
					"row", r.Row.ID)
			}
		}
	}
	for _, k := range p.Keys {
		if err := e.clearKey(ctx, acl, p, k, leftoverAlone[k]); err != nil {
			return nil, err
		}
	}
	batch, err := newBatch()
	if err != nil {
		return nil, err
	}
	var made []journal.HandOff
	for _, k := range p.Keys {
		row, _, err := e.cfg.Journal.AddHandOff(ctx, journal.HandOff{Step: p.StepID, Caller: caller, TTag: k,
			DocumentID: p.KeyDocument[k], SystemID: to.SystemID, PrincipalID: to.PrincipalID, EndTime: end,
			Batch: batch, GrantID: e.cfg.Grant.ID, From: p.Step.From, Maker: e.cfg.Maker})
		if err != nil {
			return nil, e.undo(ctx, acl, made, err)
		}
		made = append(made, row)
		e.cfg.Hook(crashpoint.HandOffJournalled)
		err = acl.ACLGrant(ctx, api.ACLGrantRequest{TTag: k, SystemID: to.SystemID, PrincipalID: to.PrincipalID,
			Rights: []string{api.RightRead}, EndTime: &end})
		if err != nil && refusedBeforeWork(err) {
			// The key server said no: nothing was made under this row, so
			// nothing of it is revoked, whatever the recipient holds now.
			e.cfg.Hook(crashpoint.HandOffGrantRefused)
			if _, cerr := e.cfg.Journal.CloseHandOffAs(context.WithoutCancel(ctx), row.ID, journal.ClosedNotGranted); cerr != nil {
				return nil, e.undo(ctx, acl, made, errors.Join(err, cerr))
			}
			made = made[:len(made)-1]
			if isCode(err, api.CodeConflict) {
				err = refusal.New(refusal.RecipientHasEntry,
					"while step %q was being handed, the recipient was given access to a section it hands by someone else, not by this server; nothing was handed and that access was not changed; tell the operator",
					p.StepID)
			}
			return nil, e.undo(ctx, acl, made, err)
		}
		if err != nil {
			return nil, e.undo(ctx, acl, made, err)
		}
		e.cfg.Hook(crashpoint.HandOffGranted)
	}
	for _, row := range made {
		entries, err := acl.ACLGet(ctx, row.TTag)
		if err == nil && !grantedAsSent(entries, row) {
			err = refusal.New(refusal.HandOffNotVerified,
				"an entry of step %q did not read back as READ until %s with unlimited uses; every entry made that still read as granted was revoked and nothing is handed; tell the operator",
				p.StepID, end.Format(time.RFC3339))
		}
		if err != nil {
			var r *refusal.Refusal
			if !errors.As(err, &r) {
				err = refusal.New(refusal.HandOffNotVerified,
					"an entry of step %q could not be read back; every entry made was revoked and nothing is handed; try again later", p.StepID)
			}
			return nil, e.undo(ctx, acl, made, err)
		}
	}
	ids := make([]int64, len(made))
	for i, r := range made {
		ids[i] = r.ID
	}
	if err := e.cfg.Journal.VerifyHandOffs(ctx, ids); err != nil {
		return nil, e.undo(ctx, acl, made, err)
	}
	e.cfg.Hook(crashpoint.HandOffVerified)
	e.cfg.Logger.Info("hand-off made", "step", p.StepID, "entries", len(made), "endTime", end.Format(time.RFC3339))
	return p.receipt(made), nil
}

// clearKey makes sure, under the lock on (k, recipient), that the
// recipient holds no entry on k before it is granted one. This journal's
// other open rows on (k, recipient) are looked at first: one whose entry
// is gone is closed; one that has lapsed is closed as any row is (revoked
// only if it still reads as granted), which frees the key for this step;
// one still in force refuses the hand-off, naming its step. An entry
// nothing in the journal accounts for refuses it too, as not made by this
// server. Nothing is granted here.
func (e *Engine) clearKey(ctx context.Context, acl ACL, p *Plan, k string, leftoverAlone bool) error {
	to := p.Step.To
	others, err := e.cfg.Journal.OpenHandOffsTo(ctx, k, to.SystemID, to.PrincipalID)
	if err != nil {
		return err
	}
	entries, err := acl.ACLGet(ctx, k)
	if err != nil {
		return err
	}
	now := e.gatewayNow()
	for _, o := range others {
		live := o.EndTime.After(now)
		if live && hasEntry(entries, to.SystemID, to.PrincipalID) && grantedAsSent(entries, o) {
			who := "this server's open hand-off of step " + fmt.Sprintf("%q", o.Step)
			if o.Step == p.StepID {
				who = "another user's open hand-off of this step"
			}
			return refusal.New(refusal.RecipientHasEntry,
				"the recipient of step %q already holds access to a section it hands, made by %s until %s; nothing was handed and that access was not changed; close that step first (close_step, or the operator's pdmcp close-step), or wait until then",
				p.StepID, who, o.EndTime.UTC().Format(time.RFC3339))
		}
		// Lapsed, or no longer reading as granted, or gone: close it by the
		// rule every close follows.
		res, err := SettleRows(ctx, acl, e.cfg.Journal, []journal.HandOff{o})
		if err != nil {
			return refusal.New(refusal.RecipientHasEntry,
				"the recipient of step %q holds access to a section it hands from this server's earlier hand-off of step %q (lapsed, or changed since), which could not be closed now; nothing was handed; ask the operator to run pdmcp close-step --step %s",
				p.StepID, o.Step, o.Step)
		}
		e.cfg.Logger.Info("an earlier hand-off on the key was closed", "step", o.Step, "row", o.ID, "reason", res[0].Reason,
			"lapsed", !live)
		if entries, err = acl.ACLGet(ctx, k); err != nil {
			return err
		}
	}
	if hasEntry(entries, to.SystemID, to.PrincipalID) {
		why := "not made by this server"
		if leftoverAlone {
			why = "changed by someone else since this server's earlier hand-off of this step granted it, so no longer this server's"
		}
		return refusal.New(refusal.RecipientHasEntry,
			"the recipient of step %q already holds access to a section it hands, %s; nothing was handed and that access was not changed; tell the operator",
			p.StepID, why)
	}
	return nil
}

// undo closes the rows made so far by the rule every close follows, and
// returns why the hand-off failed; HANDOFF_NOT_UNDONE instead if an entry
// could not be revoked, and a LeftAloneError around the cause if an entry
// no longer read as granted and was left alone.
func (e *Engine) undo(ctx context.Context, acl ACL, made []journal.HandOff, cause error) error {
	res, err := SettleRows(context.WithoutCancel(ctx), acl, e.cfg.Journal, made)
	if err != nil {
		e.cfg.Logger.Error("hand-off could not be undone", "err", err)
		return refusal.New(refusal.HandOffNotUndone,
			"the hand-off failed and an entry it made could not be revoked; the server's journal keeps it: call close_step, or ask the operator to run pdmcp close-step")
	}
	if n := countReason(res, journal.ClosedLeftAlone); n > 0 {
		e.cfg.Logger.Warn("hand-off undone; entries that no longer read as granted were left alone", "entries", n)
		return &LeftAloneError{Err: cause, LeftAlone: n}
	}
	return cause
}

func countReason(res []Settled, reason string) int {
	n := 0
	for _, r := range res {
		if r.Reason == reason {
			n++
		}
	}
	return n
}

// refusedBeforeWork reports whether err is an answer saying the request
// was refused and nothing done (a 4xx from the Gateway or the key server),
// as against a failure after which the grant may have been made (a 5xx, an
// answer that never came).
func refusedBeforeWork(err error) bool {
	var ae *api.Error
	return errors.As(err, &ae) && ae.Status >= 400 && ae.Status < 500
}

func isCode(err error, code string) bool {
	var ae *api.Error
	return errors.As(err, &ae) && ae.Code == code
}
func newBatch() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("hand-off batch id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}
