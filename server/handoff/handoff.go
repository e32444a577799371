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
//
// What it refuses it returns as a *refusal.Refusal with a code of the one
// catalogue (package server/refusal), which holds each code's status.
package handoff

import (
	"context"
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

// ACL is what a hand-off needs of a Gateway session acting as the
// delegating user; *gateway.Session is one.
type ACL interface {
	ACLGet(ctx context.Context, ttag string) ([]api.ACLEntry, error)
	ACLGrant(ctx context.Context, g api.ACLGrantRequest) error
	ACLRevoke(ctx context.Context, r api.ACLRevokeRequest) error
}

// Section is one section a step hands.
type Section struct {
	DocumentID string `json:"documentId" jsonschema:"the document the section is of"`
	FragmentID string `json:"fragmentId" jsonschema:"the section, as list_approved_documents names it"`
	Label      string `json:"label,omitempty" jsonschema:"the operator's name for the section; absent when it has none"`
	DataType   string `json:"dataType" jsonschema:"the kind of data the section holds, whose key the hand-off grants"`
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
	StepID    string    `json:"stepId" jsonschema:"the step handed or closed"`
	Label     string    `json:"label" jsonschema:"the operator's name for the step"`
	Recipient string    `json:"recipient" jsonschema:"the operator's name for the step's recipient (never a user id)"`
	Sections  []Section `json:"sections" jsonschema:"the sections the recipient was given read-only access to"`
	ExpiresAt string    `json:"expiresAt" jsonschema:"when the recipient's access ends (RFC 3339, UTC), never past this task's grant"`
	ClosedAt  string    `json:"closedAt,omitempty" jsonschema:"when close_step took the access back (RFC 3339, UTC); absent until then"`
	// LeftAlone are the sections whose key's entry for the recipient was
	// not the one this server granted (someone changed or replaced it), so
	// it was not revoked: the recipient may still hold access there.
	LeftAlone []Section `json:"leftAlone,omitempty" jsonschema:"sections whose access entry someone else changed, so close_step left it: the recipient may still read them; tell the operator"`
	Replayed  bool      `json:"replayed" jsonschema:"true when this is the receipt of an earlier call, returned again, and nothing was changed"`
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
	Grant *grant.Grant
	// GrantNow, when set, is the grant in force (the server follows
	// grant.json): a hand-off's documents and end are judged by it. The
	// journal's rows keep Grant's id, the one the run started with, so
	// that the stop revokes every hand-off the run opened.
	GrantNow func() *grant.Grant
	Journal  *journal.Journal
	Now      func() time.Time
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
	// Maker names this server in the rows it makes (journal.NewMaker).
	Maker string
	// OnPanic, when set, is told of a panic recovered on a goroutine the
	// engine's work started (journal.LockOptions.OnPanic).
	OnPanic func(v any)
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

// grantNow is the grant in force: Config.GrantNow's, or Config.Grant.
func (e *Engine) grantNow() *grant.Grant {
	if e.cfg.GrantNow != nil {
		return e.cfg.GrantNow()
	}
	return e.cfg.Grant
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
		return nil, refusal.New(refusal.StepNotInGrant,
			"step %q is not in this task's grant; nothing was sent; use a stepId from list_approved_documents", stepID)
	}
	st, ok := m.Steps[stepID]
	if !ok {
		return nil, refusal.New(refusal.UnknownStep, "the operator's manifest has no step %q; nothing was sent; do not retry", stepID)
	}
	p := &Plan{StepID: stepID, Step: st, KeyDocument: map[string]string{}, TypeKey: map[string]string{}}
	keys := map[string]bool{}
	for _, docID := range slices.Sorted(maps.Keys(st.Documents)) {
		if !slices.Contains(e.grantNow().Documents, docID) {
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
		return nil, refusal.New(refusal.NothingToHandOff,
			"none of step %q's documents is in this task's grant; nothing was sent; do not retry", stepID)
	}
	p.Keys = slices.Sorted(maps.Keys(keys))
	return p, nil
}

// IsDelegator reports whether actingAs is the step's from user.
func (p *Plan) IsDelegator(actingAs string) bool { return actingAs != "" && actingAs == p.Step.From }

// NotDelegator is the refusal for anyone but the step's from user.
func NotDelegator(stepID string) error {
	return refusal.New(refusal.NotStepDelegator,
		"only the user who hands step %q may hand it off or close it; nothing was sent; do not retry", stepID)
}

// EndTime is the end of a hand-off made now, on the Gateway's clock: the
// earlier of now plus the step's window and the grant's end, moved by the
// Gateway clock's measured offset and cut to the second. Less than
// MinWindow left is WINDOW_TOO_SHORT.
func (e *Engine) EndTime(p *Plan) (time.Time, error) {
	now := e.cfg.Now()
	end := now.Add(time.Duration(p.Step.MaxWindowSeconds) * time.Second)
	g := e.grantNow()
	if g.NotAfter.Before(end) {
		end = g.NotAfter
	}
	if left := end.Sub(now); left < MinWindow {
		return time.Time{}, refusal.New(refusal.WindowTooShort,
			"step %q would be handed for %s, less than the %s minimum (the grant ends at %s); nothing was sent; ask the operator for a new grant",
			p.StepID, left.Round(time.Second), MinWindow, g.NotAfter.UTC().Format(time.RFC3339))
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
