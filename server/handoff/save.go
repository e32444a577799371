package handoff

import (
	"context"

	"github.com/pdmcp/pdmcp/server/journal"
	"github.com/pdmcp/pdmcp/server/refusal"
)

// ReadOnly reports whether who is, on the key ttag, the recipient of an
// open hand-off in this server's journal that has not lapsed: such a user
// may read the section but not save it; and the name of the step. It goes
// by the recipient's ids, as the journal recorded them when the entry was
// granted, so it holds whatever the manifest now says of the step, or if
// it no longer has it.
func (e *Engine) ReadOnly(ctx context.Context, who Identity, ttag string) (string, bool, error) {
	if who.PrincipalID == "" || ttag == "" {
		return "", false, nil
	}
	rows, err := e.cfg.Journal.OpenHandOffsTo(ctx, ttag, who.SystemID, who.PrincipalID)
	if err != nil {
		return "", false, err
	}
	now := e.gatewayNow()
	for _, r := range rows {
		if r.EndTime.After(now) {
			return r.Step, true, nil
		}
	}
	return "", false, nil
}

// MayBeHanded reports whether the journal has any open hand-off on ttag,
// to anyone: a save of a section under it must then run CheckSave even
// where the manifest names no step.
func (e *Engine) MayBeHanded(ctx context.Context, ttag string) (bool, error) {
	rows, err := e.cfg.Journal.OpenHandOffsOn(ctx, ttag)
	return len(rows) > 0, err
}

// CheckSave refuses a save of a section (documentID, fragmentID, under
// ttag) by the recipient of an open hand-off of it: HANDED_OFF_READ_ONLY. A
// handed READ entry lets its holder encrypt under the key too, so without
// this check the recipient could change what was handed read-only. The
// save tool calls it with the caller's ids before it sends anything to the
// crypto routes, and holds the returned release until the save is done:
// the check takes the journal's lock on (ttag, who), so no hand-off to who
// on ttag can start between the check and the save's encrypt.
func (e *Engine) CheckSave(ctx context.Context, who Identity, documentID, fragmentID, ttag string) (func(), error) {
	if who.PrincipalID == "" || ttag == "" {
		return func() {}, nil
	}
	unlock, err := e.lockOn(ctx, []journal.LockKey{{TTag: ttag, SystemID: who.SystemID, PrincipalID: who.PrincipalID}})
	if err != nil {
		return nil, err
	}
	step, ok, err := e.ReadOnly(ctx, who, ttag)
	if err != nil {
		unlock()
		return nil, err
	}
	if ok {
		unlock()
		return nil, refusal.New(refusal.HandedOffReadOnly,
			"section %q of %q was handed to this user read-only by step %q; it was not saved and nothing was sent; do not retry",
			fragmentID, documentID, step)
	}
	return unlock, nil
}
