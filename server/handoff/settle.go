package handoff

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/server/journal"
)

// Settled is how one journalled row was closed: Reason is one of the
// journal's Closed* reasons.
type Settled struct {
	Row    journal.HandOff
	Reason string
}

// SettleRows closes each open row by the one rule this server follows,
// whoever asks (an undo, close_step, hand_off's leftovers, shutdown,
// GRANT_EXPIRED, pdmcp close-step): the row is read again from the journal
// (one another call closed meanwhile is left as it is); the recipient's
// entry on the key is read; an entry that reads exactly as the row granted
// it (READ alone, the row's end time, unlimited uses) is revoked and read
// back absent; an entry that reads otherwise is left alone; no entry means
// nothing to revoke. The row is then closed with that reason. The caller
// holds the journal's lock on each row's (key, recipient). It goes on past
// a failure and returns every failure joined; a row that failed stays
// open.
func SettleRows(ctx context.Context, acl ACL, j *journal.Journal, rows []journal.HandOff) ([]Settled, error) {
	var out []Settled
	var errs []error
	for _, r := range rows {
		reason, err := settleRow(ctx, acl, j, r)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, Settled{Row: r, Reason: reason})
	}
	return out, errors.Join(errs...)
}

func settleRow(ctx context.Context, acl ACL, j *journal.Journal, r journal.HandOff) (string, error) {
	cur, err := j.GetHandOff(ctx, r.ID)
	if err != nil {
		return "", err
	}
	if cur.State != journal.HandOffOpen {
		return cur.CloseReason, nil
	}
	entries, err := acl.ACLGet(ctx, r.TTag)
	if err != nil {
		return "", err
	}
	reason := journal.ClosedRevoked
	switch {
	case !hasEntry(entries, r.SystemID, r.PrincipalID):
		reason = journal.ClosedAbsent
	case !grantedAsSent(entries, r):
		reason = journal.ClosedLeftAlone
	default:
		revokeErr := acl.ACLRevoke(ctx, api.ACLRevokeRequest{TTag: r.TTag, SystemID: r.SystemID, PrincipalID: r.PrincipalID})
		// Read back either way: a refused revoke of an entry that is gone
		// by now leaves nothing to do.
		entries, err := acl.ACLGet(ctx, r.TTag)
		if err != nil {
			return "", errors.Join(revokeErr, err)
		}
		if hasEntry(entries, r.SystemID, r.PrincipalID) {
			if revokeErr != nil {
				return "", revokeErr
			}
			return "", fmt.Errorf("hand-off %d: the entry still reads back after its revocation", r.ID)
		}
		if revokeErr != nil {
			reason = journal.ClosedAbsent
		}
	}
	if _, err := j.CloseHandOffAs(ctx, r.ID, reason); err != nil {
		return "", err
	}
	return reason, nil
}

func hasEntry(entries []api.ACLEntry, systemID int64, principalID string) bool {
	return slices.ContainsFunc(entries, func(e api.ACLEntry) bool {
		return e.SystemID == systemID && e.PrincipalID == principalID
	})
}

// grantedAsSent reports whether the row's entry reads back exactly as
// granted: READ alone, the end time sent, unlimited uses.
func grantedAsSent(entries []api.ACLEntry, r journal.HandOff) bool {
	for _, e := range entries {
		if e.SystemID != r.SystemID || e.PrincipalID != r.PrincipalID {
			continue
		}
		return len(e.Rights) == 1 && e.Rights[0] == api.RightRead && e.Uses == nil &&
			e.EndTime != nil && e.EndTime.Equal(r.EndTime)
	}
	return false
}

func openRows(rows []journal.HandOff) []journal.HandOff {
	var out []journal.HandOff
	for _, r := range rows {
		if r.State == journal.HandOffOpen {
			out = append(out, r)
		}
	}
	return out
}
