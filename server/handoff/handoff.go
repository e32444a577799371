// Package handoff carries out the operator's hand-off steps: one user hands
// the sections of compound documents that user holds to another user, READ
// only and for a bounded window, and takes them back. It decides what a step
// hands of a task's documents, journals every access-list entry before it is
// granted, reads each back, undoes all of a hand-off when any part fails,
// and revokes from the journal (the close_step tool, the server's shutdown,
// and `pdmcp close-step`).
//
// It never decides who may read a section: the key server does, for the
// user whose session grants the entry. It only ever changes entries it made
// and journalled.
package handoff

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/crashpoint"
	"github.com/pdmcp/pdmcp/server/journal"
	"github.com/pdmcp/pdmcp/server/refusal"
)

// MinWindow is the shortest window a hand-off is made for: less than this
// left and the entry could lapse before the recipient's first read.
const MinWindow = 4 * time.Second

// Codes of the refusals this package decides (the adapter layer): the
// catalogue's (package refusal), which holds each one's status.
const (
	CodeStepNotInGrant          = refusal.StepNotInGrant
	CodeUnknownStep             = refusal.UnknownStep
	CodeConfirmationUnavailable = refusal.ConfirmationUnavailable
	CodeConfirmationDeclined    = refusal.ConfirmationDeclined
	CodeNotStepDelegator        = refusal.NotStepDelegator
	CodeNothingToHandOff        = refusal.NothingToHandOff
	CodeWindowTooShort          = refusal.WindowTooShort
	CodeRecipientHasEntry       = refusal.RecipientHasEntry
	CodeHandOffNotVerified      = refusal.HandOffNotVerified
	CodeStepNotOpen             = refusal.StepNotOpen
	CodeHandedOffReadOnly       = refusal.HandedOffReadOnly
	// CodeHandOffNotUndone: a hand-off failed part way and an entry it made
	// could not be revoked; the journal still names it, so close_step or
	// `pdmcp close-step` can.
	CodeHandOffNotUndone = refusal.HandOffNotUndone
	// CodeHandOffBusy: another hand-off, close or save on the same key and
	// recipient held it for longer than a call waits.
	CodeHandOffBusy = refusal.HandOffBusy
)

// Refusal is a "no" this package decided: a catalogue code, whose status
// it carries, and a sentence. The server renders it as an adapter-layer
// refusal.
type Refusal = refusal.Refusal

func refuse(code refusal.Code, format string, args ...any) *Refusal {
	return refusal.New(code, format, args...)
}

// ACL is what a hand-off needs of a Gateway session acting as the
// delegating user; *gateway.Session is one.
type ACL interface {
	ACLGet(ctx context.Context, ttag string) ([]api.ACLEntry, error)
	ACLGrant(ctx context.Context, g api.ACLGrantRequest) error
	ACLRevoke(ctx context.Context, r api.ACLRevokeRequest) error
}

// Section is one section a step hands.
type Section struct {
	DocumentID string `json:"documentId"`
	FragmentID string `json:"fragmentId"`
	Label      string `json:"label,omitempty"`
	DataType   string `json:"dataType"`
}

// Plan is what one step would hand of this task's documents: the sections,
// and the distinct keys they are under (one entry each).
type Plan struct {
	StepID   string
	Step     grant.Step
	Sections []Section
	// Keys are the sections' keys, sorted; KeyDocument names, for each,
	// the first document it hands a section of (for the journal); TypeKey
	// maps each data type handed to its key.
	Keys        []string
	KeyDocument map[string]string
	TypeKey     map[string]string
}

// Receipt is what hand_off and close_step answer. Replayed says it is the
// receipt of an earlier call, returned again, and nothing was changed.
type Receipt struct {
	StepID    string    `json:"stepId"`
	Label     string    `json:"label"`
	Recipient string    `json:"recipient"`
	Sections  []Section `json:"sections"`
	ExpiresAt string    `json:"expiresAt"`
	ClosedAt  string    `json:"closedAt,omitempty"`
	// LeftAlone are the sections whose key's entry for the recipient was
	// not the one this server granted (someone changed or replaced it), so
	// it was not revoked: the recipient may still hold access there.
	LeftAlone []Section `json:"leftAlone,omitempty"`
	Replayed  bool      `json:"replayed"`
}

// Identity is a principal as the key server names it in an access list.
type Identity struct {
	SystemID    int64
	PrincipalID string
}

// LeftAloneError is a failed hand-off during whose undo an entry was found
// that this server did not grant as it reads now, and was left as it is.
// Err is why the hand-off failed.
type LeftAloneError struct {
	Err       error
	LeftAlone int
}

func (e *LeftAloneError) Error() string {
	return fmt.Sprintf("%v (%d entries left alone)", e.Err, e.LeftAlone)
}

func (e *LeftAloneError) Unwrap() error { return e.Err }

// Config is what an Engine is built from.
type Config struct {
	Grant   *grant.Grant
	Journal *journal.Journal
	Now     func() time.Time
	// ClockOffset is the Gateway's clock minus this one, as measured from
	// its answers; nil means none.
	ClockOffset func() time.Duration
	// Hook, when set, is called at each named point of a hand-off
	// (crashpoint.HandOffJournalled, HandOffGrantRefused, HandOffGranted,
	// HandOffVerified); tests kill the process or change an entry there.
	Hook   func(point crashpoint.Point)
	Logger *slog.Logger
	// OnLockWait, when set, is called when a call finds the (key,
	// recipient) lock it needs held and starts to wait (tests).
	OnLockWait func()
}

// Engine makes and closes one grant's hand-offs. It is safe for concurrent
// use: calls on the same step by the same caller run one at a time.
type Engine struct {
	cfg Config

	mu    sync.Mutex
	locks map[string]*sync.Mutex
}

// New returns an engine for cfg.
func New(cfg Config) *Engine {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.ClockOffset == nil {
		cfg.ClockOffset = func() time.Duration { return 0 }
	}
	if cfg.Hook == nil {
		cfg.Hook = func(crashpoint.Point) {}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Engine{cfg: cfg, locks: map[string]*sync.Mutex{}}
}

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

// CheckSteps applies, at start, the rules every step the grant names must
// keep in this manifest: each of its documents is a compound document, each
// data type is one of that document's sections' and has a key. The error
// names the step and the document.
func CheckSteps(g *grant.Grant, m *grant.Manifest) error {
	for _, id := range g.Steps {
		st, ok := m.Steps[id]
		if !ok {
			return fmt.Errorf("step %q: %w", id, grant.ErrUnknownStep)
		}
		for _, docID := range slices.Sorted(maps.Keys(st.Documents)) {
			d, ok := m.Documents[docID]
			if !ok {
				return fmt.Errorf("step %q names document %q: %w", id, docID, grant.ErrUnknownDocument)
			}
			if !d.IsCompound() {
				return fmt.Errorf("step %q names document %q: %w; a step hands sections of compound documents only",
					id, docID, grant.ErrNotCompound)
			}
			have := d.DataTypes()
			for _, dt := range st.Documents[docID] {
				if !slices.Contains(have, dt) {
					return fmt.Errorf("step %q names data type %q of document %q, which has no such section: %w",
						id, dt, docID, grant.ErrUnknownDataType)
				}
				if m.CompoundKeys[dt] == "" {
					return fmt.Errorf("step %q names data type %q of document %q, which has no key in compoundKeys: %w",
						id, dt, docID, grant.ErrUnknownDataType)
				}
			}
		}
	}
	return nil
}

// Plan resolves stepID for this grant against m. It refuses a step the
// grant does not name (STEP_NOT_IN_GRANT), one the manifest does not hold
// (UNKNOWN_STEP), and one none of whose documents the grant names
// (NOTHING_TO_HAND_OFF). Nothing is sent anywhere.
func (e *Engine) Plan(m *grant.Manifest, stepID string) (*Plan, error) {
	if !slices.Contains(e.cfg.Grant.Steps, stepID) {
		return nil, refuse(CodeStepNotInGrant,
			"step %q is not in this task's grant; nothing was sent; use a stepId from list_approved_documents", stepID)
	}
	st, ok := m.Steps[stepID]
	if !ok {
		return nil, refuse(CodeUnknownStep, "the operator's manifest has no step %q; nothing was sent; do not retry", stepID)
	}
	p := &Plan{StepID: stepID, Step: st, KeyDocument: map[string]string{}, TypeKey: map[string]string{}}
	keys := map[string]bool{}
	for _, docID := range slices.Sorted(maps.Keys(st.Documents)) {
		if !slices.Contains(e.cfg.Grant.Documents, docID) {
			continue
		}
		d, ok := m.Documents[docID]
		if !ok || !d.IsCompound() {
			continue
		}
		for _, f := range d.Fragments {
			if !slices.Contains(st.Documents[docID], f.DataType) {
				continue
			}
			k := m.CompoundKeys[f.DataType]
			if k == "" {
				continue
			}
			p.Sections = append(p.Sections, Section{DocumentID: docID, FragmentID: f.ID, Label: f.Label, DataType: f.DataType})
			p.TypeKey[f.DataType] = k
			if !keys[k] {
				keys[k] = true
				p.KeyDocument[k] = docID
			}
		}
	}
	if len(p.Sections) == 0 {
		return nil, refuse(CodeNothingToHandOff,
			"none of step %q's documents is in this task's grant; nothing was sent; do not retry", stepID)
	}
	p.Keys = slices.Sorted(maps.Keys(keys))
	return p, nil
}

// IsDelegator reports whether actingAs is the step's from user.
func (p *Plan) IsDelegator(actingAs string) bool { return actingAs != "" && actingAs == p.Step.From }

// NotDelegator is the refusal for anyone but the step's from user.
func NotDelegator(stepID string) error {
	return refuse(CodeNotStepDelegator,
		"only the user who hands step %q may hand it off or close it; nothing was sent; do not retry", stepID)
}

// EndTime is the end of a hand-off made now, on the Gateway's clock: the
// earlier of now plus the step's window and the grant's end, moved by the
// Gateway clock's measured offset and cut to the second. Less than
// MinWindow left is WINDOW_TOO_SHORT.
func (e *Engine) EndTime(p *Plan) (time.Time, error) {
	now := e.cfg.Now()
	end := now.Add(time.Duration(p.Step.MaxWindowSeconds) * time.Second)
	if e.cfg.Grant.NotAfter.Before(end) {
		end = e.cfg.Grant.NotAfter
	}
	if left := end.Sub(now); left < MinWindow {
		return time.Time{}, refuse(CodeWindowTooShort,
			"step %q would be handed for %s, less than the %s minimum (the grant ends at %s); nothing was sent; ask the operator for a new grant",
			p.StepID, left.Round(time.Second), MinWindow, e.cfg.Grant.NotAfter.UTC().Format(time.RFC3339))
	}
	return end.Add(e.cfg.ClockOffset()).UTC().Truncate(time.Second), nil
}

// gatewayNow is now on the Gateway's clock.
func (e *Engine) gatewayNow() time.Time { return e.cfg.Now().Add(e.cfg.ClockOffset()) }

// GatewayNow is now on the Gateway's clock, as hand-off end times are.
func (e *Engine) GatewayNow() time.Time { return e.gatewayNow() }

// Open returns the receipt of the caller's hand-off of the step while it is
// open: every entry verified and not yet past its end.
func (e *Engine) Open(ctx context.Context, caller string, p *Plan) (*Receipt, bool, error) {
	rows, err := e.cfg.Journal.StepHandOffs(ctx, p.StepID, caller)
	if err != nil {
		return nil, false, err
	}
	open := openRows(rows)
	if len(open) == 0 {
		return nil, false, nil
	}
	now := e.gatewayNow()
	for _, r := range open {
		if r.VerifiedAt.IsZero() || !r.EndTime.After(now) {
			return nil, false, nil
		}
	}
	rec := p.receipt(open)
	rec.Replayed = true
	return rec, true, nil
}

// Status is whether the caller's hand-off of the step is open, and until
// when (on the Gateway's clock); for list_approved_documents.
func (e *Engine) Status(ctx context.Context, caller, stepID string) (bool, time.Time, error) {
	rows, err := e.cfg.Journal.StepHandOffs(ctx, stepID, caller)
	if err != nil {
		return false, time.Time{}, err
	}
	open := openRows(rows)
	if len(open) == 0 {
		return false, time.Time{}, nil
	}
	now := e.gatewayNow()
	var until time.Time
	for _, r := range open {
		if r.VerifiedAt.IsZero() || !r.EndTime.After(now) {
			return false, time.Time{}, nil
		}
		if until.IsZero() || r.EndTime.Before(until) {
			until = r.EndTime
		}
	}
	return true, until, nil
}

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
			Batch: batch, GrantID: e.cfg.Grant.ID})
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
				err = refuse(CodeRecipientHasEntry,
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
			err = refuse(CodeHandOffNotVerified,
				"an entry of step %q did not read back as READ until %s with unlimited uses; every entry made that still read as granted was revoked and nothing is handed; tell the operator",
				p.StepID, end.Format(time.RFC3339))
		}
		if err != nil {
			var r *Refusal
			if !errors.As(err, &r) {
				err = refuse(CodeHandOffNotVerified,
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
			return refuse(CodeRecipientHasEntry,
				"the recipient of step %q already holds access to a section it hands, made by %s until %s; nothing was handed and that access was not changed; close that step first (close_step, or the operator's pdmcp close-step), or wait until then",
				p.StepID, who, o.EndTime.UTC().Format(time.RFC3339))
		}
		// Lapsed, or no longer reading as granted, or gone: close it by the
		// rule every close follows.
		res, err := SettleRows(ctx, acl, e.cfg.Journal, []journal.HandOff{o})
		if err != nil {
			return refuse(CodeRecipientHasEntry,
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
		return refuse(CodeRecipientHasEntry,
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
		return refuse(CodeHandOffNotUndone,
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
	unlock, err := e.cfg.Journal.LockHandOffs(ctx, keys, journal.LockOptions{OnWait: e.cfg.OnLockWait})
	if errors.Is(err, journal.ErrLockBusy) {
		return nil, refuse(CodeHandOffBusy,
			"another hand-off, close or save on the same section and recipient is still in progress; nothing was changed; try again in a minute")
	}
	return unlock, err
}

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
			return nil, refuse(CodeStepNotOpen,
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
		return nil, refuse(CodeHandedOffReadOnly,
			"section %q of %q was handed to this user read-only by step %q; it was not saved and nothing was sent; do not retry",
			fragmentID, documentID, step)
	}
	return unlock, nil
}

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

// receipt describes the rows' entries: the plan's sections under their
// keys, and the earliest end.
func (p *Plan) receipt(rows []journal.HandOff) *Receipt {
	keys := map[string]bool{}
	var end time.Time
	for _, r := range rows {
		keys[r.TTag] = true
		if end.IsZero() || r.EndTime.Before(end) {
			end = r.EndTime
		}
	}
	rec := &Receipt{StepID: p.StepID, Label: p.Step.Label, Recipient: p.Step.To.Label, Sections: []Section{}}
	if !end.IsZero() {
		rec.ExpiresAt = end.UTC().Format(time.RFC3339)
	}
	alone := map[string]bool{}
	for _, r := range rows {
		if r.CloseReason == journal.ClosedLeftAlone {
			alone[r.TTag] = true
		}
	}
	for _, s := range p.Sections {
		if keys[p.TypeKey[s.DataType]] {
			rec.Sections = append(rec.Sections, s)
		}
		if alone[p.TypeKey[s.DataType]] {
			rec.LeftAlone = append(rec.LeftAlone, s)
		}
	}
	return rec
}

func newBatch() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("hand-off batch id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}
