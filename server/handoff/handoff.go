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
	"github.com/pdmcp/pdmcp/server/journal"
)

// MinWindow is the shortest window a hand-off is made for: less than this
// left and the entry could lapse before the recipient's first read.
const MinWindow = 4 * time.Second

// Codes of the refusals this package decides (the adapter layer).
const (
	CodeStepNotInGrant          = "STEP_NOT_IN_GRANT"
	CodeUnknownStep             = "UNKNOWN_STEP"
	CodeConfirmationUnavailable = "CONFIRMATION_UNAVAILABLE"
	CodeConfirmationDeclined    = "CONFIRMATION_DECLINED"
	CodeNotStepDelegator        = "NOT_STEP_DELEGATOR"
	CodeNothingToHandOff        = "NOTHING_TO_HAND_OFF"
	CodeWindowTooShort          = "WINDOW_TOO_SHORT"
	CodeRecipientHasEntry       = "RECIPIENT_HAS_ENTRY"
	CodeHandOffNotVerified      = "HANDOFF_NOT_VERIFIED"
	CodeStepNotOpen             = "STEP_NOT_OPEN"
	CodeHandedOffReadOnly       = "HANDED_OFF_READ_ONLY"
	// CodeHandOffNotUndone: a hand-off failed part way and an entry it made
	// could not be revoked; the journal still names it, so close_step or
	// `pdmcp close-step` can.
	CodeHandOffNotUndone = "HANDOFF_NOT_UNDONE"
)

// Refusal is a "no" this package decided. The server renders it as an
// adapter-layer refusal.
type Refusal struct {
	Code   string
	Status int
	Detail string
}

func (r *Refusal) Error() string { return r.Code + ": " + r.Detail }

func refuse(code string, status int, format string, args ...any) *Refusal {
	return &Refusal{Code: code, Status: status, Detail: fmt.Sprintf(format, args...)}
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
	Replayed  bool      `json:"replayed"`
}

// Config is what an Engine is built from.
type Config struct {
	Grant   *grant.Grant
	Journal *journal.Journal
	Now     func() time.Time
	// ClockOffset is the Gateway's clock minus this one, as measured from
	// its answers; nil means none.
	ClockOffset func() time.Duration
	// Hook, when set, is called at each named point of a hand-off
	// ("handoff:journalled", "handoff:granted", "handoff:verified"); tests
	// kill the process or change an entry there.
	Hook   func(point string)
	Logger *slog.Logger
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
		cfg.Hook = func(string) {}
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
		return nil, refuse(CodeStepNotInGrant, 403,
			"step %q is not in this task's grant; nothing was sent; use a stepId from list_approved_documents", stepID)
	}
	st, ok := m.Steps[stepID]
	if !ok {
		return nil, refuse(CodeUnknownStep, 404, "the operator's manifest has no step %q; nothing was sent; do not retry", stepID)
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
		return nil, refuse(CodeNothingToHandOff, 403,
			"none of step %q's documents is in this task's grant; nothing was sent; do not retry", stepID)
	}
	p.Keys = slices.Sorted(maps.Keys(keys))
	return p, nil
}

// IsDelegator reports whether actingAs is the step's from user.
func (p *Plan) IsDelegator(actingAs string) bool { return actingAs != "" && actingAs == p.Step.From }

// NotDelegator is the refusal for anyone but the step's from user.
func NotDelegator(stepID string) error {
	return refuse(CodeNotStepDelegator, 403,
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
		return time.Time{}, refuse(CodeWindowTooShort, 403,
			"step %q would be handed for %s, less than the %s minimum (the grant ends at %s); nothing was sent; ask the operator for a new grant",
			p.StepID, left.Round(time.Second), MinWindow, e.cfg.Grant.NotAfter.UTC().Format(time.RFC3339))
	}
	return end.Add(e.cfg.ClockOffset()).UTC().Truncate(time.Second), nil
}

// gatewayNow is now on the Gateway's clock.
func (e *Engine) gatewayNow() time.Time { return e.cfg.Now().Add(e.cfg.ClockOffset()) }

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
// Every entry is journalled before it is granted and read back after; if
// any grant is refused, or any entry does not read back as READ with that
// end and unlimited uses, every entry made is revoked and read back absent.
// A recipient who already holds an entry on one of the keys is refused
// before anything is granted, and that entry is never touched. While the
// caller's hand-off of the step is open, the first receipt is returned and
// nothing is granted.
func (e *Engine) HandOff(ctx context.Context, acl ACL, caller string, p *Plan, end time.Time) (*Receipt, error) {
	defer e.lock(p.StepID, caller)()
	if rec, ok, err := e.Open(ctx, caller, p); err != nil || ok {
		return rec, err
	}
	// Entries left by an earlier hand-off that lapsed, or that did not
	// finish (a crash), are this server's own: take them back first.
	rows, err := e.cfg.Journal.StepHandOffs(ctx, p.StepID, caller)
	if err != nil {
		return nil, err
	}
	if left := openRows(rows); len(left) > 0 {
		if err := e.revokeAll(ctx, acl, left); err != nil {
			return nil, err
		}
	}
	to := p.Step.To
	for _, k := range p.Keys {
		entries, err := acl.ACLGet(ctx, k)
		if err != nil {
			return nil, err
		}
		if hasEntry(entries, to.SystemID, to.PrincipalID) {
			return nil, refuse(CodeRecipientHasEntry, 409,
				"the recipient of step %q already holds access to a section it hands, not made by this server; nothing was handed and that access was not changed; tell the operator",
				p.StepID)
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
		e.cfg.Hook("handoff:journalled")
		if err := acl.ACLGrant(ctx, api.ACLGrantRequest{TTag: k, SystemID: to.SystemID, PrincipalID: to.PrincipalID,
			Rights: []string{api.RightRead}, EndTime: &end}); err != nil {
			return nil, e.undo(ctx, acl, made, err)
		}
		e.cfg.Hook("handoff:granted")
	}
	for _, row := range made {
		entries, err := acl.ACLGet(ctx, row.TTag)
		if err == nil && !grantedAsSent(entries, row) {
			err = refuse(CodeHandOffNotVerified, 502,
				"an entry of step %q did not read back as READ until %s with unlimited uses; every entry made was revoked and nothing is handed; tell the operator",
				p.StepID, end.Format(time.RFC3339))
		}
		if err != nil {
			var r *Refusal
			if !errors.As(err, &r) {
				err = refuse(CodeHandOffNotVerified, 502,
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
	e.cfg.Hook("handoff:verified")
	e.cfg.Logger.Info("hand-off made", "step", p.StepID, "entries", len(made), "endTime", end.Format(time.RFC3339))
	return p.receipt(made), nil
}

// undo revokes the entries made so far and returns why the hand-off
// failed; if an entry could not be revoked, HANDOFF_NOT_UNDONE instead.
func (e *Engine) undo(ctx context.Context, acl ACL, made []journal.HandOff, cause error) error {
	if err := e.revokeAll(context.WithoutCancel(ctx), acl, made); err != nil {
		e.cfg.Logger.Error("hand-off could not be undone", "err", err)
		return refuse(CodeHandOffNotUndone, 502,
			"the hand-off failed and an entry it made could not be revoked; the server's journal keeps it: call close_step, or ask the operator to run pdmcp close-step")
	}
	return cause
}

// Close revokes every open entry of the caller's hand-off of the step, each
// read back absent. Asked again, it returns the first receipt; a step the
// caller never handed (or whose hand-off never completed) is STEP_NOT_OPEN.
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
			return nil, refuse(CodeStepNotOpen, 409,
				"step %q is not handed off; nothing was sent; call hand_off first if the task needs it", p.StepID)
		}
		rec := p.receipt(last)
		rec.ClosedAt = latestClose(last).UTC().Format(time.RFC3339)
		rec.Replayed = true
		return rec, nil
	}
	if err := e.revokeAll(ctx, acl, open); err != nil {
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

// ReadOnly reports whether actingAs is, on the key ttag, the recipient of
// an open hand-off of any step in m: such a user may read the section but
// not save it, and the name of the step.
func (e *Engine) ReadOnly(ctx context.Context, m *grant.Manifest, actingAs, ttag string) (string, bool, error) {
	if actingAs == "" || ttag == "" {
		return "", false, nil
	}
	now := e.gatewayNow()
	for _, id := range slices.Sorted(maps.Keys(m.Steps)) {
		to := m.Steps[id].To
		if to.ActingAs != actingAs {
			continue
		}
		rows, err := e.cfg.Journal.OpenHandOffsTo(ctx, ttag, to.SystemID, to.PrincipalID)
		if err != nil {
			return "", false, err
		}
		for _, r := range rows {
			if r.EndTime.After(now) {
				return r.Step, true, nil
			}
		}
	}
	return "", false, nil
}

// CheckSave refuses a save of a section (documentID, fragmentID, under
// ttag) by the recipient of an open hand-off of it: HANDED_OFF_READ_ONLY. A
// handed READ entry lets its holder encrypt under the key too, so without
// this check the recipient could change what was handed read-only. The
// save tool calls it with the caller's acting principal before it sends
// anything to the crypto routes.
func (e *Engine) CheckSave(ctx context.Context, m *grant.Manifest, actingAs, documentID, fragmentID, ttag string) error {
	step, ok, err := e.ReadOnly(ctx, m, actingAs, ttag)
	if err != nil {
		return err
	}
	if ok {
		return refuse(CodeHandedOffReadOnly, 403,
			"section %q of %q was handed to this user read-only by step %q; it was not saved and nothing was sent; do not retry",
			fragmentID, documentID, step)
	}
	return nil
}

// revokeAll revokes each row's entry, reads it back absent and closes the
// row; it goes on past a failure and returns every failure joined.
func (e *Engine) revokeAll(ctx context.Context, acl ACL, rows []journal.HandOff) error {
	return RevokeRows(ctx, acl, e.cfg.Journal, rows)
}

// RevokeRows revokes each row's entry through acl, reads it back absent and
// closes the row in j. An entry the key server no longer has counts as
// revoked. It goes on past a failure and returns every failure joined; a
// row whose revocation failed stays open.
func RevokeRows(ctx context.Context, acl ACL, j *journal.Journal, rows []journal.HandOff) error {
	var errs []error
	for _, r := range rows {
		if err := revokeOne(ctx, acl, r); err != nil {
			errs = append(errs, err)
			continue
		}
		if _, err := j.CloseHandOff(ctx, r.ID); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func revokeOne(ctx context.Context, acl ACL, r journal.HandOff) error {
	revokeErr := acl.ACLRevoke(ctx, api.ACLRevokeRequest{TTag: r.TTag, SystemID: r.SystemID, PrincipalID: r.PrincipalID})
	// Read back either way: a refused revoke of an entry that is not there
	// (a grant that never took, one already revoked) leaves nothing to do.
	entries, err := acl.ACLGet(ctx, r.TTag)
	if err != nil {
		return errors.Join(revokeErr, err)
	}
	if hasEntry(entries, r.SystemID, r.PrincipalID) {
		if revokeErr != nil {
			return revokeErr
		}
		return fmt.Errorf("hand-off %d: the entry still reads back after its revocation", r.ID)
	}
	return nil
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
	for _, s := range p.Sections {
		if keys[p.TypeKey[s.DataType]] {
			rec.Sections = append(rec.Sections, s)
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
