package handoff

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/pdmcp/pdmcp/audit"
	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/server/journal"
)

// Minter mints a scoped session acting as a named user; the registered
// service's *gateway.Client is one.
type Minter interface {
	Mint(ctx context.Context, req gateway.MintRequest) (*gateway.Session, error)
}

// Revoked is one journalled entry that a revocation from the journal dealt
// with: its step, the document it was recorded for, a digest of its key
// (never the t-Tag), how its row was closed (Outcome, one of the journal's
// Closed* reasons: only "revoked" took anything away), and the failure if
// it stays open.
type Revoked struct {
	ID         int64
	Step       string
	DocumentID string
	KeyDigest  string
	Outcome    string
	Err        error
}

// RevokeAsDelegator closes the given open hand-offs as the registered
// service acting as the user who granted each (recorded in its row; the
// manifest's step's from user for older rows), by
// the rule SettleRows follows: each row under the journal's lock on its
// (key, recipient), its entry revoked and read back absent only if it
// still reads as the row granted it, left alone otherwise. It is what the
// server's shutdown, a call refused GRANT_EXPIRED, and `pdmcp close-step`
// use when the delegating user's own session is not at hand. It goes on
// past a failure; the error joins every failure, and a row that failed
// stays open.
func RevokeAsDelegator(ctx context.Context, minter Minter, m *grant.Manifest, j *journal.Journal, rows []journal.HandOff) ([]Revoked, error) {
	byFrom := map[string][]journal.HandOff{}
	var out []Revoked
	var errs []error
	for _, r := range rows {
		// The user the row was granted as, recorded with it; the
		// manifest's step only for rows written before that was.
		from := r.From
		if from == "" {
			st, ok := m.Steps[r.Step]
			if !ok {
				err := fmt.Errorf("hand-off %d: step %q is not in the manifest and the row predates recording its user, so its user is unknown", r.ID, r.Step)
				out = append(out, revoked(r, err))
				errs = append(errs, err)
				continue
			}
			from = st.From
		}
		byFrom[from] = append(byFrom[from], r)
	}
	for _, from := range slices.Sorted(maps.Keys(byFrom)) {
		group := byFrom[from]
		for len(group) > 0 {
			// One session covers at most api.MaxObjects keys.
			var chunk []journal.HandOff
			keys := map[string]bool{}
			for len(group) > 0 && (keys[group[0].TTag] || len(keys) < api.MaxObjects) {
				keys[group[0].TTag] = true
				chunk = append(chunk, group[0])
				group = group[1:]
			}
			res, err := revokeChunk(ctx, minter, j, from, slices.Sorted(maps.Keys(keys)), chunk)
			out = append(out, res...)
			if err != nil {
				errs = append(errs, err)
			}
		}
	}
	return out, errors.Join(errs...)
}

func revokeChunk(ctx context.Context, minter Minter, j *journal.Journal, from string, keys []string, rows []journal.HandOff) ([]Revoked, error) {
	var out []Revoked
	sess, err := minter.Mint(ctx, gateway.MintRequest{ActingAs: from, Objects: keys, TTL: time.Minute})
	if err != nil {
		err = fmt.Errorf("acting as the step's user: %w", err)
		for _, r := range rows {
			out = append(out, revoked(r, err))
		}
		return out, err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = sess.Revoke(rctx)
	}()
	var errs []error
	for _, r := range rows {
		res, err := settleLocked(ctx, sess, j, r)
		rv := revoked(r, err)
		rv.Outcome = res
		out = append(out, rv)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return out, errors.Join(errs...)
}

// settleLocked closes one row by SettleRows' rule under the journal's lock
// on its (key, recipient).
func settleLocked(ctx context.Context, acl ACL, j *journal.Journal, r journal.HandOff) (string, error) {
	unlock, err := j.LockHandOffs(ctx, []journal.LockKey{{TTag: r.TTag, SystemID: r.SystemID, PrincipalID: r.PrincipalID}},
		journal.LockOptions{})
	if err != nil {
		return "", err
	}
	defer unlock()
	res, err := SettleRows(ctx, acl, j, []journal.HandOff{r})
	if err != nil {
		return "", err
	}
	return res[0].Reason, nil
}

func revoked(r journal.HandOff, err error) Revoked {
	return Revoked{ID: r.ID, Step: r.Step, DocumentID: r.DocumentID, KeyDigest: audit.Digest12(r.TTag), Err: err}
}

// CloseStepOptions are `pdmcp close-step`'s inputs, once loaded.
type CloseStepOptions struct {
	Minter   Minter
	Manifest *grant.Manifest
	Journal  *journal.Journal
	Step     string
}

// CloseStep revokes every open hand-off of one step the journal names, for
// every caller, acting as the user each was granted as. A step with nothing
// open is done at once, so running it twice is safe. A step the manifest no
// longer defines is still closed while the journal holds open entries of
// it (the operator removed the step after handing off); with none, it is
// refused as unknown.
func CloseStep(ctx context.Context, o CloseStepOptions) ([]Revoked, error) {
	rows, err := o.Journal.OpenHandOffs(ctx, o.Step)
	if err != nil {
		return nil, err
	}
	if _, ok := o.Manifest.Steps[o.Step]; !ok && len(rows) == 0 {
		return nil, fmt.Errorf("step %q: %w", o.Step, grant.ErrUnknownStep)
	}
	if len(rows) == 0 {
		return nil, nil
	}
	return RevokeAsDelegator(ctx, o.Minter, o.Manifest, o.Journal, rows)
}

// RevokeGrant revokes every open hand-off made under the engine's grant,
// acting as each step's user: a call refused GRANT_EXPIRED, when the grant
// has ended for every server of it.
func (e *Engine) RevokeGrant(ctx context.Context, minter Minter, m *grant.Manifest) ([]Revoked, error) {
	return e.revokeOfGrant(ctx, minter, m, func(journal.HandOff) bool { return true })
}

// RevokeAtShutdown revokes the open hand-offs under the engine's grant
// that this server made, and those of a server of the grant that is no
// longer running (killed, or from before makers were recorded): the
// server's shutdown. Another running server's (a second host on the same
// grant) are its own to close, and left open.
func (e *Engine) RevokeAtShutdown(ctx context.Context, minter Minter, m *grant.Manifest) ([]Revoked, error) {
	return e.revokeOfGrant(ctx, minter, m, func(h journal.HandOff) bool {
		return h.Maker == e.cfg.Maker || journal.MakerGone(h.Maker)
	})
}

func (e *Engine) revokeOfGrant(ctx context.Context, minter Minter, m *grant.Manifest, take func(journal.HandOff) bool) ([]Revoked, error) {
	all, err := e.cfg.Journal.OpenHandOffsOfGrant(ctx, e.cfg.Grant.ID)
	if err != nil {
		return nil, err
	}
	var rows []journal.HandOff
	for _, h := range all {
		if take(h) {
			rows = append(rows, h)
		}
	}
	if left := len(all) - len(rows); left > 0 {
		e.cfg.Logger.Info("open hand-offs left to the servers that made them", "entries", left)
	}
	if len(rows) == 0 {
		return nil, nil
	}
	res, err := RevokeAsDelegator(ctx, minter, m, e.cfg.Journal, rows)
	alone := 0
	for _, r := range res {
		if r.Outcome == journal.ClosedLeftAlone {
			alone++
		}
	}
	e.cfg.Logger.Info("open hand-offs closed", "entries", len(res), "leftAlone", alone, "failed", err != nil)
	return res, err
}
