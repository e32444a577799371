package server_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/handofftest"
	"github.com/pdmcp/pdmcp/internal/mcptest"
	"github.com/pdmcp/pdmcp/server"
	"github.com/pdmcp/pdmcp/server/refusal"
)

var accepted = mcp.InputResponseMap{"confirm-hand-off": &mcp.ElicitResult{Action: "accept", Content: map[string]any{"confirm": true}}}

// rawHandOff calls hand_off with the given answers and request state, the
// SDK's multi round-trip handling off, and returns the raw result.
func rawHandOff(t *testing.T, f *stepFixture, step string, answers mcp.InputResponseMap, state string) *mcp.CallToolResult {
	t.Helper()
	res, err := f.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: grant.ToolHandOff,
		Arguments: map[string]any{"stepId": step}, InputResponses: answers, RequestState: state})
	if err != nil {
		t.Fatalf("hand_off: %v", err)
	}
	return res
}

func doctorHolds(t *testing.T, f *stepFixture) bool {
	t.Helper()
	_, ok := f.w.Entry(t, f.w.Keys["problems"], f.w.Doctor)
	return ok
}

// asksAgainCheck returns a check that a hand_off result asks for the
// confirmation again, that nothing reached the crypto or key routes since
// the check was made or last ran, and that the doctor holds no entry.
func asksAgainCheck(t *testing.T, f *stepFixture) func(what string, res *mcp.CallToolResult) {
	before := mcptest.KeyRouteCounts(f.env.Gateway)
	return func(what string, res *mcp.CallToolResult) {
		t.Helper()
		if !res.NeedsInput() || res.InputRequests["confirm-hand-off"] == nil || res.RequestState == "" {
			t.Fatalf("%s: got %+v, want the question asked again", what, res)
		}
		if after := mcptest.KeyRouteCounts(f.env.Gateway); !maps.Equal(before, after) {
			t.Fatalf("%s reached the crypto or key routes: %v -> %v", what, before, after)
		}
		if doctorHolds(t, f) {
			t.Fatalf("%s: the doctor holds an entry", what)
		}
		before = mcptest.KeyRouteCounts(f.env.Gateway) // doctorHolds reads the access list
	}
}

// TestConfirmationAnswersTheQuestionAsked (issue 18 item 10), on
// 2026-07-28: an answer is taken only with the request state this server
// sealed for this caller, step and question, not yet lapsed and not used
// before. An answer with no state, a forged state, another step's state,
// a used one or a lapsed one is not taken: the question is asked again,
// and nothing reaches the crypto or key routes.
func TestConfirmationAnswersTheQuestionAsked(t *testing.T) {
	var skew time.Duration
	o := withProblemsStep(600)
	o.world = handofftest.Options{Confirm: grant.ConfirmElicit} // referral and referral-problems both ask
	o.now = func() time.Time { return time.Now().Add(skew) }
	o.client = func(co *mcp.ClientOptions) { co.MultiRoundTrip = &mcp.MultiRoundTripOptions{Disabled: true} }
	f := newStepFixture(t, o)
	asksAgain := asksAgainCheck(t, f)

	asksAgain("an answer nobody asked for", rawHandOff(t, f, handofftest.StepReferral, accepted, ""))
	first := rawHandOff(t, f, handofftest.StepReferral, nil, "")
	asksAgain("the first call", first)
	state := first.RequestState
	asksAgain("a forged state", rawHandOff(t, f, handofftest.StepReferral, accepted, forged(t, state)))
	asksAgain("another step's state", rawHandOff(t, f, stepProblems, accepted, state))

	// The answer to the question asked is taken.
	res := rawHandOff(t, f, handofftest.StepReferral, accepted, state)
	if res.IsError || res.NeedsInput() || !doctorHolds(t, f) {
		t.Fatalf("the answer to the question asked: %+v", res)
	}
	if line := f.lastAudit(t, grant.ToolHandOff); line["confirmation"] != "accepted" {
		t.Errorf("audit line %v", line)
	}
	if m, isErr := f.call(t, grant.ToolCloseStep, map[string]any{"stepId": handofftest.StepReferral}); isErr {
		t.Fatal(m)
	}
	if doctorHolds(t, f) {
		t.Fatal("an entry after close_step")
	}
	asksAgain = asksAgainCheck(t, f)
	asksAgain("the same answer again", rawHandOff(t, f, handofftest.StepReferral, accepted, state))

	// A question left unanswered past its time is asked again.
	fresh := rawHandOff(t, f, handofftest.StepReferral, nil, "")
	skew = 11 * time.Minute
	asksAgain("a lapsed question", rawHandOff(t, f, handofftest.StepReferral, accepted, fresh.RequestState))
}

// forged is state with one bit of its seal flipped: its decoded bytes
// always differ from the real seal's. (Replacing the last two characters
// with "AA" left the same bytes about once in 1,024 runs, as those
// characters hold only ten bits of the seal, issue 31 item 8.)
func forged(t *testing.T, state string) string {
	t.Helper()
	body, seal := splitState(t, state)
	seal[0] ^= 1
	return body + "." + base64.RawURLEncoding.EncodeToString(seal)
}

// splitState is a request state's sealed body, as sent, and its seal,
// decoded.
func splitState(t *testing.T, state string) (string, []byte) {
	t.Helper()
	body, sig, ok := strings.Cut(state, ".")
	if !ok {
		t.Fatalf("request state %q has no seal", state)
	}
	seal, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil {
		t.Fatalf("request state's seal: %v", err)
	}
	return body, seal
}

// nonCanonical is state with its seal's last character changed in the
// bits that carry no data (the padding bits of unpadded base64): the same
// bytes, spelt another way.
func nonCanonical(t *testing.T, state string) string {
	t.Helper()
	_, seal := splitState(t, state)
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	// The seal's last character holds (8*len) mod 6 data bits; the rest of
	// its six are padding.
	padBits := 6 - (8*len(seal))%6
	if padBits == 6 {
		t.Fatalf("a %d-byte seal has no padding bits", len(seal))
	}
	last := strings.IndexByte(alphabet, state[len(state)-1])
	other := state[:len(state)-1] + string(alphabet[last^1])
	if other == state {
		t.Fatal("the re-encoded state is the same string")
	}
	if _, again := splitState(t, other); string(again) != string(seal) {
		t.Fatal("the re-encoded seal decodes to other bytes")
	}
	return other
}

// TestConfirmationStateSpeltAnotherWayIsTheSameAnswer (issue 31 item 8):
// the seal is read with the lenient base64 decoder, which ignores the
// padding bits of the last character, so a state re-encoded with other
// padding bits is the same sealed question (the one-time answer is keyed
// by the nonce inside it, not by the string). It is taken once: the answer
// given with the re-encoded state confirms the hand-off, and the original
// state, or the re-encoded one again, is the same answer and is not taken
// a second time.
func TestConfirmationStateSpeltAnotherWayIsTheSameAnswer(t *testing.T) {
	o := stepOptions{
		world:  handofftest.Options{Confirm: grant.ConfirmElicit},
		client: func(co *mcp.ClientOptions) { co.MultiRoundTrip = &mcp.MultiRoundTripOptions{Disabled: true} },
	}
	f := newStepFixture(t, o)
	asksAgain := asksAgainCheck(t, f)
	first := rawHandOff(t, f, handofftest.StepReferral, nil, "")
	asksAgain("the first call", first)
	state := first.RequestState
	other := nonCanonical(t, state)

	if res := rawHandOff(t, f, handofftest.StepReferral, accepted, other); res.IsError || res.NeedsInput() || !doctorHolds(t, f) {
		t.Fatalf("the answer with the state spelt another way: %+v", res)
	}
	if m, isErr := f.call(t, grant.ToolCloseStep, map[string]any{"stepId": handofftest.StepReferral}); isErr {
		t.Fatal(m)
	}
	asksAgain = asksAgainCheck(t, f)
	asksAgain("the same answer with the state as sealed", rawHandOff(t, f, handofftest.StepReferral, accepted, state))
	asksAgain("the same answer spelt another way again", rawHandOff(t, f, handofftest.StepReferral, accepted, other))
}

// TestConfirmationBefore20260728IsAskedDuringTheCall (issue 18 item 10):
// on 2025-11-25 the server asks with its own elicitation/create request;
// an answer the host puts in its call is ignored, and the user's own
// answer (here: decline) decides.
func TestConfirmationBefore20260728IsAskedDuringTheCall(t *testing.T) {
	asked := 0
	f := newStepFixture(t, stepOptions{world: handofftest.Options{Confirm: grant.ConfirmElicit}, proto: "2025-11-25",
		elicit: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asked++
			return &mcp.ElicitResult{Action: "decline"}, nil
		}})
	before := mcptest.KeyRouteCounts(f.env.Gateway)
	res := rawHandOff(t, f, handofftest.StepReferral, accepted, "")
	r, ok := server.RefusalOf(res)
	if !res.IsError || !ok || r.Code != string(refusal.ConfirmationDeclined) || asked != 1 {
		t.Fatalf("an answer sent with the call: %+v (asked %d times)", res, asked)
	}
	if after := mcptest.KeyRouteCounts(f.env.Gateway); !maps.Equal(before, after) {
		t.Fatalf("the hand-off reached the crypto or key routes: %v -> %v", before, after)
	}
	if doctorHolds(t, f) {
		t.Fatal("the doctor holds an entry")
	}
}

// TestConfirmationIsForTheStepAndSectionsAsked (issue 18 item 10): the
// state names the step and what it hands, not only when. An answer to
// the question about one step does not confirm a twin step (same
// recipient, sections and window, so the end alone cannot tell them
// apart), and an answer given before the operator changed the step's
// sections does not confirm the changed step: each time the question is
// asked again and nothing reaches the crypto or key routes.
func TestConfirmationIsForTheStepAndSectionsAsked(t *testing.T) {
	const twin = "referral-twin"
	o := stepOptions{
		world:  handofftest.Options{Confirm: grant.ConfirmElicit},
		client: func(co *mcp.ClientOptions) { co.MultiRoundTrip = &mcp.MultiRoundTripOptions{Disabled: true} },
		manifest: func(m *grant.Manifest) {
			m.Steps[twin] = m.Steps[handofftest.StepReferral]
		},
		mutate: func(g *grant.Grant) { g.Steps = append(g.Steps, twin) },
	}
	f := newStepFixture(t, o)
	asksAgain := asksAgainCheck(t, f)
	asked := rawHandOff(t, f, handofftest.StepReferral, nil, "")
	asksAgain("the first call", asked)
	asksAgain("the twin step with the referral's state", rawHandOff(t, f, twin, accepted, asked.RequestState))

	// The operator narrows the step while the question is open; the
	// server serves the changed manifest from the next call.
	if _, err := grant.UpdateManifest(context.Background(), f.w.Manifest, func(m *grant.Manifest) error {
		st := m.Steps[handofftest.StepReferral]
		st.Documents = map[string][]string{handofftest.DocID: {"problems"}}
		m.Steps[handofftest.StepReferral] = st
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	again := rawHandOff(t, f, handofftest.StepReferral, accepted, asked.RequestState)
	asksAgain("an answer given before the step's sections changed", again)

	// The answer to the question as it now stands is taken.
	if res := rawHandOff(t, f, handofftest.StepReferral, accepted, again.RequestState); res.IsError || res.NeedsInput() || !doctorHolds(t, f) {
		t.Fatalf("the answer to the changed question: %+v", res)
	}
}

// TestConfirmationsOpenAreBounded (issue 31 item 7): a host that calls
// hand_off in a loop without answering is asked 32 questions, then is
// refused TOO_MANY_CONFIRMATIONS (429, with the wait until the oldest
// lapses) and nothing is sent; an answer to a question already asked is
// still taken, and frees a place for the next question.
func TestConfirmationsOpenAreBounded(t *testing.T) {
	o := stepOptions{
		world:  handofftest.Options{Confirm: grant.ConfirmElicit},
		client: func(co *mcp.ClientOptions) { co.MultiRoundTrip = &mcp.MultiRoundTripOptions{Disabled: true} },
	}
	f := newStepFixture(t, o)
	asksAgain := asksAgainCheck(t, f)
	var states []string
	for i := range 32 {
		res := rawHandOff(t, f, handofftest.StepReferral, nil, "")
		asksAgain(fmt.Sprintf("question %d", i+1), res)
		states = append(states, res.RequestState)
	}
	before := mcptest.KeyRouteCounts(f.env.Gateway)
	res := rawHandOff(t, f, handofftest.StepReferral, nil, "")
	r, ok := server.RefusalOf(res)
	if !ok || r.Code != string(refusal.TooManyConfirmations) || r.Status != 429 || r.RetryAfter < 1 || r.RetryAfter > 601 {
		t.Fatalf("the 33rd question: %+v", res)
	}
	if res.NeedsInput() || res.RequestState != "" {
		t.Fatalf("the 33rd question was asked: %+v", res)
	}
	if after := mcptest.KeyRouteCounts(f.env.Gateway); !maps.Equal(before, after) {
		t.Fatalf("the refused question reached the crypto or key routes: %v -> %v", before, after)
	}

	if res := rawHandOff(t, f, handofftest.StepReferral, accepted, states[3]); res.IsError || res.NeedsInput() || !doctorHolds(t, f) {
		t.Fatalf("the answer to a question asked before the bound: %+v", res)
	}
	if m, isErr := f.call(t, grant.ToolCloseStep, map[string]any{"stepId": handofftest.StepReferral}); isErr {
		t.Fatal(m)
	}
	asksAgainCheck(t, f)("the question after an answer freed a place", rawHandOff(t, f, handofftest.StepReferral, nil, ""))
}
