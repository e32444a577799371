package serve_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/reference"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/handofftest"
	"github.com/pdmcp/pdmcp/internal/mcptest"
	"github.com/pdmcp/pdmcp/server/refusal"
)

// TestHTTPHandOffBetweenTwoUsers: over Streamable HTTP, one grant serves
// the patient and the doctor. Only the patient hands the step; the doctor
// then opens the handed sections and no other, cannot pass them on, and
// loses them when the patient closes the step.
func TestHTTPHandOffBetweenTwoUsers(t *testing.T) {
	var w *handofftest.World
	hs := newHTTPStack(t, 8, withSteps(&w, handofftest.Options{}))
	alice := hs.connect(t, hs.token(t, "alice", "pw-a"))
	bob := hs.connect(t, hs.token(t, "bob", "pw-b"))
	ctx := context.Background()

	doctorReads := func(fragment string) string {
		ttag, iv, ct := w.Fragment(t, fragment)
		s := w.As(t, w.Doctor.Name)
		defer s.Revoke(ctx)
		_, err := s.Decrypt(ctx, ttag, iv, ct)
		var ae *api.Error
		if errors.As(err, &ae) {
			return ae.Code
		}
		if err != nil {
			return err.Error()
		}
		return ""
	}

	// The doctor is not the step's user: refused once his session shows
	// who he is, with nothing sent to the crypto or key routes.
	before := mcptest.KeyRouteCounts(hs.env.Gateway)
	m, isErr := mcptest.Call(t, bob, "hand_off", map[string]any{"stepId": handofftest.StepReferral})
	if !isErr || m["code"] != string(refusal.NotStepDelegator) || m["layer"] != "adapter" {
		t.Fatalf("bob's hand_off: %v", m)
	}
	if after := mcptest.KeyRouteCounts(hs.env.Gateway); !maps.Equal(before, after) {
		t.Fatalf("NOT_STEP_DELEGATOR reached the crypto or key routes: %v -> %v", before, after)
	}
	if code := doctorReads("problems"); code != "ACL_DENIED" {
		t.Fatalf("doctor before the hand-off: %q", code)
	}

	rec, isErr := mcptest.Call(t, alice, "hand_off", map[string]any{"stepId": handofftest.StepReferral})
	if isErr || len(rec["sections"].([]any)) != 3 {
		t.Fatalf("alice's hand_off: %v", rec)
	}
	if code := doctorReads("problems"); code != "" {
		t.Fatalf("doctor reading a handed section: %q", code)
	}
	if code := doctorReads("results"); code != "ACL_DENIED" {
		t.Fatalf("doctor reading a section not handed: %q", code)
	}
	// The same through his agent's tools.
	frag := func(id string) map[string]any {
		m, _ := mcptest.Call(t, bob, "read_protected_fragment", map[string]any{"documentId": handofftest.DocID, "fragmentId": id})
		return m
	}
	if m := frag("problems"); m["refused"] != nil || !strings.Contains(fmt.Sprint(m), "persistent cough") {
		t.Fatalf("bob's agent reading problems: %v", m)
	}
	if m := frag("results"); m["layer"] != "keyserver" || m["code"] != "ACL_DENIED" {
		t.Fatalf("bob's agent reading results: %v", m)
	}
	if m, _ := mcptest.Call(t, bob, "read_protected_document", map[string]any{"documentId": handofftest.DocID}); !strings.Contains(fmt.Sprint(m["text"]), "persistent cough") ||
		strings.Contains(fmt.Sprint(m["text"]), "chest film") {
		t.Fatalf("bob's mixed view: %v", m)
	}
	// Over HTTP his save of a handed section is refused here, before any
	// crypto or key route.
	before = mcptest.KeyRouteCounts(hs.env.Gateway)
	m, isErr = mcptest.Call(t, bob, "save_protected_fragment", map[string]any{"documentId": handofftest.DocID,
		"fragmentId": "problems", "text": `<section><text>changed by the doctor</text></section>`,
		"idempotencyKey": "bob-1"})
	if !isErr || m["layer"] != "adapter" || m["code"] != string(refusal.HandedOffReadOnly) {
		t.Fatalf("bob's save of a handed section: %v", m)
	}
	if after := mcptest.KeyRouteCounts(hs.env.Gateway); !maps.Equal(before, after) {
		t.Fatalf("HANDED_OFF_READ_ONLY reached the crypto or key routes: %v -> %v", before, after)
	}
	// Not passed on: the key server refuses a READ holder's grant.
	s := w.As(t, w.Doctor.Name)
	err := s.ACLGrant(ctx, api.ACLGrantRequest{TTag: w.Keys["problems"], SystemID: w.Nurse.SystemID,
		PrincipalID: w.Nurse.PrincipalID, Rights: []string{api.RightRead}})
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Layer != api.LayerKeyServer || ae.Code != api.CodeACLDenied {
		t.Fatalf("the doctor passing the section on: %v", err)
	}
	s.Revoke(ctx)
	// The step is open for alice, and for bob (who did not hand it) not.
	if l, _ := mcptest.Call(t, alice, "list_approved_documents", nil); !mcptest.StepOpen(l, handofftest.StepReferral) {
		t.Errorf("alice's list: %v", l)
	}
	if l, _ := mcptest.Call(t, bob, "list_approved_documents", nil); mcptest.StepOpen(l, handofftest.StepReferral) {
		t.Errorf("bob's list shows alice's hand-off open: %v", l)
	}
	if m, isErr := mcptest.Call(t, bob, "close_step", map[string]any{"stepId": handofftest.StepReferral}); !isErr ||
		m["code"] != string(refusal.NotStepDelegator) {
		t.Fatalf("bob's close_step: %v", m)
	}

	if m, isErr := mcptest.Call(t, alice, "close_step", map[string]any{"stepId": handofftest.StepReferral}); isErr {
		t.Fatalf("alice's close_step: %v", m)
	}
	if code := doctorReads("problems"); code != "ACL_DENIED" {
		t.Fatalf("doctor after close_step: %q", code)
	}
	if m := frag("problems"); m["layer"] != "keyserver" || m["code"] != "ACL_DENIED" {
		t.Fatalf("bob's agent reading problems after close_step: %v", m)
	}

	// Handed again, then the server stops (SIGTERM): it revokes on its way out.
	if m, isErr := mcptest.Call(t, alice, "hand_off", map[string]any{"stepId": handofftest.StepReferral}); isErr || m["replayed"] != false {
		t.Fatalf("alice's second hand_off: %v", m)
	}
	if code := doctorReads("problems"); code != "" {
		t.Fatalf("doctor after the second hand_off: %q", code)
	}
	hs.stop()
	if code := doctorReads("problems"); code != "ACL_DENIED" {
		t.Fatalf("doctor after the server stopped: %q", code)
	}
}

// TestHTTPHandOffConfirmation: over HTTP the go-sdk client's elicitation
// handler confirms a hand-off on the newest protocol (served statelessly:
// the question returns as an input request and the client calls again) and
// on 2025-11-25 (a session: the server asks during the call); a client
// without the capability is refused CONFIRMATION_UNAVAILABLE.
func TestHTTPHandOffConfirmation(t *testing.T) {
	var w *handofftest.World
	hs := newHTTPStack(t, 8, withSteps(&w, handofftest.Options{Confirm: grant.ConfirmElicit}))
	token := hs.token(t, "alice", "pw-a")
	connect := func(proto string, handler func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error)) *mcp.ClientSession {
		return hs.dial(t, "http-elicit", hs.as(token, nil), &mcp.ClientOptions{ElicitationHandler: handler},
			&mcp.ClientSessionOptions{ProtocolVersion: proto})
	}
	args := map[string]any{"stepId": handofftest.StepReferral}

	before := mcptest.KeyRouteCounts(hs.env.Gateway)
	if m, isErr := mcptest.Call(t, connect("", nil), "hand_off", args); !isErr || m["code"] != string(refusal.ConfirmationUnavailable) {
		t.Fatalf("without elicitation: %v", m)
	}
	decline := func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		return &mcp.ElicitResult{Action: "decline"}, nil
	}
	if m, isErr := mcptest.Call(t, connect("", decline), "hand_off", args); !isErr || m["code"] != string(refusal.ConfirmationDeclined) {
		t.Fatalf("declined: %v", m)
	}
	if after := mcptest.KeyRouteCounts(hs.env.Gateway); !maps.Equal(before, after) {
		t.Fatalf("an unconfirmed hand-off reached the crypto or key routes: %v -> %v", before, after)
	}
	for _, proto := range []string{"", "2025-11-25"} {
		asked := 0
		cs := connect(proto, func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asked++
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"confirm": true}}, nil
		})
		if m, isErr := mcptest.Call(t, cs, "hand_off", args); isErr || asked != 1 {
			t.Fatalf("protocol %q, accepted: %v (asked %d times)", proto, m, asked)
		}
		if _, ok := w.Entry(t, w.Keys["problems"], w.Doctor); !ok {
			t.Fatalf("protocol %q: accepted, but nothing was handed", proto)
		}
		if m, isErr := mcptest.Call(t, cs, "close_step", args); isErr {
			t.Fatalf("close_step: %v", m)
		}
	}
}

// TestHTTPShortWindowEndsAtTheKeyServer: a step handed for five seconds
// that nobody closes ends at the key server: once the Gateway's clock is
// past the entry's end (moved 30 s on, inside the proof window), the
// doctor's agent is refused by the key server.
func TestHTTPShortWindowEndsAtTheKeyServer(t *testing.T) {
	var w *handofftest.World
	hs := newHTTPStack(t, 8, withSteps(&w, handofftest.Options{Window: 5}))
	alice := hs.connect(t, hs.token(t, "alice", "pw-a"))
	bob := hs.connect(t, hs.token(t, "bob", "pw-b"))
	if m, isErr := mcptest.Call(t, alice, "hand_off", map[string]any{"stepId": handofftest.StepReferral}); isErr {
		t.Fatalf("hand_off: %v", m)
	}
	args := map[string]any{"documentId": handofftest.DocID, "fragmentId": "problems"}
	if m, isErr := mcptest.Call(t, bob, "read_protected_fragment", args); isErr {
		t.Fatalf("bob within the window: %v", m)
	}
	hs.env.Gateway.SetFaults(reference.Faults{ClockSkew: 30 * time.Second})
	t.Cleanup(func() { hs.env.Gateway.SetFaults(reference.Faults{}) })
	if m, isErr := mcptest.Call(t, bob, "read_protected_fragment", args); !isErr || m["layer"] != "keyserver" || m["code"] != "ACL_DENIED" {
		t.Fatalf("bob after the window: %v", m)
	}
}
