package server

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/audit"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/server/handoff"
	"github.com/pdmcp/pdmcp/server/refusal"
)

// stepInput is hand_off's and close_step's arguments.
type stepInput struct {
	StepID string `json:"stepId" jsonschema:"a stepId from list_approved_documents"`
}

func (s *Server) handOffTool() tool {
	return newTool(s, mcp.Tool{
		Name:  grant.ToolHandOff,
		Title: "Hand a step's sections to its recipient",
		Description: description{
			does: "Gives the recipient of one step, defined by the operator, read-only access to the sections the step " +
				"names in this task's documents, until the step's window ends (never past this task's grant). Returns " +
				"a receipt: the step, the recipient's name, the sections handed, and when access ends.",
			use: "when the task needs the step's recipient to read those sections. Pass only a stepId from " +
				"list_approved_documents; the recipient, the sections and the window are the operator's. Some steps " +
				"ask the user to confirm first. Called again while the step is open, it returns the first receipt and " +
				"grants nothing. Call close_step when the recipient is done.",
			refuses: "every caller but the user the step hands from. The key server grants each section only if that user " +
				"holds it with write or owner rights; if any section cannot be handed, nothing is.",
			never: "lets the recipient save a handed section or pass it on, and never returns document text, a key or a " +
				"user id.",
		}.String(),
		Annotations: writes(true, false),
	}, s.handOff)
}

func (s *Server) closeStepTool() tool {
	return newTool(s, mcp.Tool{
		Name:  grant.ToolCloseStep,
		Title: "Take back a handed step",
		Description: description{
			does: "Takes back every access hand_off granted for one step, and checks at the key server that each is " +
				"gone. Returns the step's receipt with the time it was closed.",
			use: "when the step's recipient is done, with its stepId. Called again, it returns the first receipt and " +
				"changes nothing.",
			refuses: "every caller but the user the step hands from, and a step that was never handed (STEP_NOT_OPEN).",
			never:   "takes back text the recipient already read, and never returns document text, a key or a user id.",
		}.String(),
		Annotations: writes(true, true),
	}, s.closeStep)
}

// stepPlan does what both tools check before anything is sent: the step is
// in the grant and the manifest, it hands something of this task's
// documents, and (over stdio, where the grant names the user) the caller is
// the step's user. It records the step in the audit line once the grant
// names it.
func (s *Server) stepPlan(c *call, stepID string) (*handoff.Plan, error) {
	p, err := s.handoffs.Plan(s.currentManifest(), stepID)
	if p != nil || !isCode(err, refusal.StepNotInGrant) {
		c.line.StepID = stepID
	}
	if err != nil {
		return nil, err
	}
	if u := s.grantNow().LocalUser; u != "" && !p.IsDelegator(u) {
		return nil, handoff.NotDelegator(stepID)
	}
	return p, nil
}

// delegatorPlan is stepPlan and the caller's Gateway session, once it
// shows the caller is the step's user. Over HTTP that is known only from
// the session: minting it sends nothing to the crypto or key routes.
func (s *Server) delegatorPlan(ctx context.Context, c *call, stepID string) (*handoff.Plan, GatewaySession, error) {
	p, err := s.stepPlan(c, stepID)
	if err != nil {
		return nil, nil, err
	}
	sess, err := s.session(ctx, c)
	if err != nil {
		return nil, nil, err
	}
	if !p.IsDelegator(sess.ActingAs()) {
		return nil, nil, handoff.NotDelegator(p.StepID)
	}
	return p, sess, nil
}

func (s *Server) handOff(ctx context.Context, c *call, in stepInput) (handoff.Receipt, error) {
	var zero handoff.Receipt
	// An entry opened now would be recorded only in a journal no one will
	// read again: close_step and the shutdown could not revoke it.
	if err := s.checkJournal(); err != nil {
		return zero, err
	}
	p, sess, err := s.delegatorPlan(ctx, c, in.StepID)
	if err != nil {
		return zero, err
	}
	if rec, ok, err := s.handoffs.Open(ctx, c.caller.ID, p); err != nil || ok {
		return derefReceipt(rec), err
	}
	end, err := s.handoffs.EndTime(p)
	if err != nil {
		return zero, err
	}
	if end, err = s.confirm(ctx, c, p, end); err != nil {
		return zero, err
	}
	rec, err := s.handoffs.HandOff(ctx, sess, c.caller.ID, p, end)
	var la *handoff.LeftAloneError
	if errors.As(err, &la) {
		c.line.EntriesLeftAlone = la.LeftAlone
		if r, internal := asRefusal(la.Err); !internal {
			out := *r
			out.Detail += fmt.Sprintf(" %d access entries this hand-off had made no longer read as it granted them "+
				"(someone changed them), so they were left as they are and the recipient may still hold them; tell the operator.", la.LeftAlone)
			return zero, &out
		}
	}
	return derefReceipt(rec), err
}

func (s *Server) closeStep(ctx context.Context, c *call, in stepInput) (handoff.Receipt, error) {
	var zero handoff.Receipt
	p, sess, err := s.delegatorPlan(ctx, c, in.StepID)
	if err != nil {
		return zero, err
	}
	rec, err := s.handoffs.Close(ctx, sess, c.caller.ID, p)
	if rec != nil && !rec.Replayed {
		keys := map[string]bool{}
		for _, sec := range rec.LeftAlone {
			keys[p.TypeKey[sec.DataType]] = true
		}
		c.line.EntriesLeftAlone = len(keys)
	}
	return derefReceipt(rec), err
}

func derefReceipt(r *handoff.Receipt) handoff.Receipt {
	if r == nil {
		return handoff.Receipt{}
	}
	return *r
}

// confirmField is the one boolean the confirmation form asks for, and
// confirmRequest the id of the request for it.
const (
	confirmField   = "confirm"
	confirmRequest = "confirm-hand-off"
)

// protocolInputRequests is the first protocol revision on which a host
// answers a server's input request by calling again (MCP multi
// round-trip); before it, the server asks with an elicitation/create
// request during the call.
const protocolInputRequests = "2026-07-28"

// confirm asks the host's user, through MCP elicitation, to confirm a step
// whose confirm is "elicit", before anything is granted, and returns the
// end time the user confirmed. An answer is taken only for the question
// this server asked, of this caller, about this step as it stands:
//
//   - before 2026-07-28 the server sends elicitation/create itself during
//     the call and takes the host's response to that request (JSON-RPC
//     ties it by id); input responses the host sends with its call are
//     ignored.
//   - on 2026-07-28 the question goes out as an input request whose
//     requestState is sealed (HMAC under this process's secret) and names
//     the caller, the grant, the step, a digest of the recipient and
//     sections, the end time asked about and when the question lapses
//     (confirmTTL). An answer is taken only with a state that opens, names
//     all of these as they are now, has not lapsed and was not answered
//     before; any other answer is ignored and the question asked afresh.
//
// A host that did not declare form elicitation is CONFIRMATION_UNAVAILABLE;
// a declined, cancelled or unticked form is CONFIRMATION_DECLINED. The
// answer goes into the audit line.
func (s *Server) confirm(ctx context.Context, c *call, p *handoff.Plan, end time.Time) (time.Time, error) {
	if p.Step.Confirm != grant.ConfirmElicit {
		return end, nil
	}
	if !canElicit(c.mcp) {
		c.line.Confirmation = audit.ConfirmUnavailable
		return end, &refusal.Refusal{Code: refusal.ConfirmationUnavailable,
			Detail: fmt.Sprintf("step %q must be confirmed by the user, and this host cannot ask (it did not declare MCP elicitation); nothing was sent; use a host that can, or ask the operator", p.StepID)}
	}
	if !answersInputRequests(c.mcp) {
		res, err := c.mcp.Elicit(ctx, confirmParams(p, end))
		if err != nil {
			s.log.Warn("the host did not answer a hand-off's confirmation", "step", p.StepID, "err", err)
			return end, s.confirmAnswer(c, p, nil)
		}
		return end, s.confirmAnswer(c, p, res)
	}
	now := s.cfg.Now()
	answer, answered := c.inputs[confirmRequest]
	if answered {
		st, ok := s.confirms.open(c.state)
		ok = ok && st.Caller == c.caller.ID && st.Grant == s.grantNow().ID && st.Step == p.StepID &&
			st.Plan == planDigest(p) && now.Unix() <= st.Expiry
		asked := time.Unix(st.End, 0).UTC()
		// The end the user saw must still leave the shortest window.
		ok = ok && asked.Sub(end) <= 0 && asked.Sub(s.handoffs.GatewayNow()) >= handoff.MinWindow
		if ok && s.confirms.spend(st, now) {
			res, _ := answer.(*mcp.ElicitResult)
			return asked, s.confirmAnswer(c, p, res)
		}
		s.log.Warn("a confirmation answer that is not for the question this server asked was ignored; asking again",
			"step", p.StepID)
	}
	state, err := s.confirms.ask(confirmState{Caller: c.caller.ID, Grant: s.grantNow().ID, Step: p.StepID,
		Plan: planDigest(p), End: end.Unix(), Expiry: now.Add(confirmTTL).Unix()}, now)
	var over *errTooManyConfirms
	if errors.As(err, &over) {
		return end, tooManyConfirms(p.StepID, over)
	}
	if err != nil {
		return end, err
	}
	return end, &needInput{requests: mcp.InputRequestMap{confirmRequest: confirmParams(p, end)}, state: state}
}

// tooManyConfirms is the refusal of a question over a bound of the open
// confirmations (confirmSeal): nothing was asked or sent, and it says
// when the oldest question in the way lapses.
func tooManyConfirms(step string, e *errTooManyConfirms) *Refusal {
	whose := "this user has"
	if !e.caller {
		whose = "the server has"
	}
	r := refuseCode(refusal.TooManyConfirmations,
		"step %q was not asked about: %s %d confirmations asked and not yet answered, the most it keeps open; nothing was sent; answer one of them, or try again after retryAfter seconds, when the oldest lapses",
		step, whose, e.open)
	r.RetryAfter = int((e.retryAfter + time.Second - 1) / time.Second)
	return r
}

// confirmAnswer judges the host's answer (nil: none came) and records it in
// the audit line.
func (s *Server) confirmAnswer(c *call, p *handoff.Plan, res *mcp.ElicitResult) error {
	if res == nil {
		c.line.Confirmation = audit.ConfirmUnavailable
		return &refusal.Refusal{Code: refusal.ConfirmationUnavailable,
			Detail: fmt.Sprintf("the host did not answer the confirmation of step %q; nothing was sent; try again, or ask the operator", p.StepID)}
	}
	switch {
	case res.Action == "accept" && res.Content[confirmField] == true:
		c.line.Confirmation = audit.ConfirmAccepted
		return nil
	case res.Action == "cancel":
		c.line.Confirmation = audit.ConfirmCancelled
	default:
		c.line.Confirmation = audit.ConfirmDeclined
	}
	return &refusal.Refusal{Code: refusal.ConfirmationDeclined,
		Detail: fmt.Sprintf("the user did not confirm step %q; nothing was sent; do not retry unless the user asks", p.StepID)}
}

// confirmParams is the confirmation form: one boolean, and a message
// naming the step, the recipient, each section and the end time.
func confirmParams(p *handoff.Plan, end time.Time) *mcp.ElicitParams {
	return &mcp.ElicitParams{
		Mode:    "form",
		Message: confirmMessage(p, end),
		RequestedSchema: map[string]any{
			"type": "object",
			"properties": map[string]any{
				confirmField: map[string]any{"type": "boolean", "title": "Hand these sections over",
					"description": "Tick to give the recipient read-only access until the time shown."},
			},
			"required": []string{confirmField},
		},
	}
}

// answersInputRequests reports whether the host speaks 2026-07-28 or
// later, where input requests are answered by calling again.
func answersInputRequests(ss *mcp.ServerSession) bool {
	v := protocolInputRequests
	if ip := ss.InitializeParams(); ip != nil && ip.ProtocolVersion != "" {
		v = ip.ProtocolVersion
	}
	return v >= protocolInputRequests
}

// canElicit reports whether the host declared form elicitation at
// initialize (an empty elicitation capability means form).
func canElicit(ss *mcp.ServerSession) bool {
	if ss == nil {
		return false
	}
	ip := ss.InitializeParams()
	if ip == nil || ip.Capabilities == nil || ip.Capabilities.Elicitation == nil {
		return false
	}
	el := ip.Capabilities.Elicitation
	return el.Form != nil || el.URL == nil
}

// confirmMessage says what the user is asked to allow: the step, who
// receives, which sections, until when.
func confirmMessage(p *handoff.Plan, end time.Time) string {
	var secs []string
	for _, sec := range p.Sections {
		name := sec.Label
		if name == "" {
			name = sec.FragmentID
		}
		secs = append(secs, fmt.Sprintf("%s (%s, document %s)", name, sec.DataType, sec.DocumentID))
	}
	label := p.Step.Label
	if label == "" {
		label = p.StepID
	}
	to := p.Step.To.Label
	if to == "" {
		to = "the step's recipient"
	}
	return fmt.Sprintf("Step %q: give %s read-only access to %s, until %s (UTC). Confirm?",
		label, to, strings.Join(secs, "; "), end.UTC().Format("2006-01-02 15:04:05"))
}

// listedStep is a step as list_approved_documents shows it: never who
// hands it, who receives it, or a principal id.
type listedStep struct {
	StepID    string            `json:"stepId" jsonschema:"the id to pass to hand_off and close_step"`
	Label     string            `json:"label" jsonschema:"the operator's name for the step"`
	Fragments []handoff.Section `json:"sections" jsonschema:"the sections of this task's documents hand_off would hand"`
	Open      bool              `json:"open" jsonschema:"true when this user's hand-off of the step is in force"`
	OpenUntil string            `json:"openUntil,omitempty" jsonschema:"when an open hand-off ends (RFC 3339, UTC); absent when the step is not open"`
}

// listSteps is the grant's steps as list_approved_documents shows them to
// this caller.
func (s *Server) listSteps(ctx context.Context, c *call) ([]listedStep, error) {
	if len(s.grantNow().Steps) == 0 {
		return nil, nil
	}
	m := s.currentManifest()
	out := []listedStep{}
	for _, id := range s.grantNow().Steps {
		st, ok := m.Steps[id]
		if !ok {
			continue
		}
		ls := listedStep{StepID: id, Label: st.Label, Fragments: []handoff.Section{}}
		if p, err := s.handoffs.Plan(m, id); err == nil {
			ls.Fragments = p.Sections
		}
		open, until, err := s.handoffs.Status(ctx, c.caller.ID, id)
		if err != nil {
			return nil, err
		}
		if open {
			ls.Open, ls.OpenUntil = true, until.UTC().Format(time.RFC3339)
		}
		out = append(out, ls)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].StepID < out[j].StepID })
	return out, nil
}

// RevokeHandOffs revokes, at shutdown, the open hand-offs this server made
// under its grant, and those of a server of the grant no longer running,
// as each step's user, through the registered service. Another running
// server's are left to it. Bounded in time; what it cannot revoke stays in
// the journal for `pdmcp close-step`.
func (s *Server) RevokeHandOffs(ctx context.Context) {
	s.revokeHandOffs(ctx, s.handoffs.RevokeAtShutdown)
}

// revokeGrantHandOffs revokes every open hand-off of the grant, whoever
// made it: the grant has ended, for every server of it.
func (s *Server) revokeGrantHandOffs(ctx context.Context) {
	s.revokeHandOffs(ctx, s.handoffs.RevokeGrant)
}

func (s *Server) revokeHandOffs(ctx context.Context, revoke func(context.Context, handoff.Minter, *grant.Manifest) ([]handoff.Revoked, error)) {
	if s.cfg.Revoker == nil || len(s.grantNow().Steps) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	res, err := revoke(ctx, s.cfg.Revoker, s.currentManifest())
	if err != nil {
		s.log.Error("open hand-offs not all revoked; run pdmcp close-step", "entries", len(res), "err", err)
	}
}

func isCode(err error, code refusal.Code) bool {
	r, ok := err.(*refusal.Refusal)
	return ok && r.Code == code
}
