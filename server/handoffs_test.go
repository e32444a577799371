package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/audit"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/reference"
	"github.com/pdmcp/pdmcp/gateway/reference/reftest"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/crashpoint"
	"github.com/pdmcp/pdmcp/internal/handofftest"
	"github.com/pdmcp/pdmcp/internal/mcptest"
	"github.com/pdmcp/pdmcp/server"
	"github.com/pdmcp/pdmcp/server/journal"
	"github.com/pdmcp/pdmcp/server/refusal"
)

// stepFixture is a server over a manifest with a compound document and
// hand-off steps (handofftest), its grant acting as one user over stdio,
// reached by a go-sdk client with the capabilities a test chooses.
type stepFixture struct {
	env      *reftest.Env
	w        *handofftest.World
	srv      *server.Server
	cs       *mcp.ClientSession
	auditLog string
	sessions *server.GrantSessions
	// grant and manifest are what the server was started with, for a
	// second server on the same task (secondServer).
	grant    *grant.Grant
	manifest *grant.Manifest
}

type stepOptions struct {
	user    func(*handofftest.World) string // default: the patient
	world   handofftest.Options
	mutate  func(*grant.Grant)
	now     func() time.Time
	elicit  func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error)
	noElict bool   // the client declares no elicitation
	proto   string // the protocol revision the client asks for; "" the newest
	// manifest changes the built manifest (saved back) before the server
	// starts; hook is the server's CrashPoint.
	manifest func(*grant.Manifest)
	hook     func(crashpoint.Point)
	// client changes the client's options (e.g. to turn off the SDK's
	// multi round-trip handling).
	client func(*mcp.ClientOptions)
}

func newStepFixture(t *testing.T, o stepOptions) *stepFixture {
	t.Helper()
	ctx := context.Background()
	f := &stepFixture{env: reftest.Start(t, reference.Config{})}
	f.w = handofftest.Build(t, f.env, t.TempDir(), o.world)
	user := f.w.Patient.Name
	if o.user != nil {
		user = o.user(f.w)
	}
	g := f.w.Grant(user, []string{grant.ToolListApprovedDocuments, grant.ToolReadProtectedDocument, grant.ToolHandOff,
		grant.ToolCloseStep}, []string{handofftest.StepReferral, handofftest.StepByNurse}, time.Hour)
	if o.mutate != nil {
		o.mutate(g)
	}
	m, err := grant.LoadManifest(f.w.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	if o.manifest != nil {
		o.manifest(m)
		if err := m.Save(f.w.Manifest); err != nil {
			t.Fatal(err)
		}
	}
	j, err := journal.Open(ctx, journal.DefaultPath(f.w.Manifest))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	f.auditLog = filepath.Join(f.w.Dir, "audit.jsonl")
	a, err := audit.Open(f.auditLog)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	f.sessions = server.NewGrantSessions(f.w.Client, g.LocalUser, grant.Keys(g, m), g.NotAfter, nil, nil)
	f.srv, err = server.New(server.Config{Grant: g, Manifest: m, ManifestPath: f.w.Manifest, Journal: j, Audit: a,
		Sessions: f.sessions, Version: "test", RunID: "run-test", Now: o.now, ClockOffset: f.w.Client.ClockOffset,
		Revoker: f.w.Client, CrashPoint: o.hook})
	if err != nil {
		t.Fatalf("server.New: %v", err)
	}
	t.Cleanup(func() { f.srv.Close() })
	f.grant, f.manifest = g, m
	ct, st := mcp.NewInMemoryTransports()
	if _, err := f.srv.MCP().Connect(ctx, st, nil); err != nil {
		t.Fatal(err)
	}
	opts := &mcp.ClientOptions{ElicitationHandler: o.elicit}
	if o.elicit == nil && !o.noElict {
		opts.Capabilities = &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{}}
	}
	if o.client != nil {
		o.client(opts)
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "step-host", Version: "0"}, opts)
	if f.cs, err = client.Connect(ctx, ct, &mcp.ClientSessionOptions{ProtocolVersion: o.proto}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.cs.Close(); f.sessions.EndAll(context.Background()) })
	return f
}

// call is mcptest.Call on the fixture's session.
func (f *stepFixture) call(t *testing.T, name string, args map[string]any) (map[string]any, bool) {
	t.Helper()
	return mcptest.Call(t, f.cs, name, args)
}

func (f *stepFixture) lastAudit(t *testing.T, tool string) map[string]any {
	t.Helper()
	file, err := os.Open(f.auditLog)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	var last map[string]any
	sc := bufio.NewScanner(file)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["tool"] == tool {
			last = m
		}
	}
	return last
}

func TestHandOffToolsEndToEnd(t *testing.T) {
	f := newStepFixture(t, stepOptions{})
	list, isErr := f.call(t, grant.ToolListApprovedDocuments, nil)
	if isErr {
		t.Fatal(list)
	}
	steps, _ := list["steps"].([]any)
	if len(steps) != 2 {
		t.Fatalf("steps listed: %v", list["steps"])
	}
	raw, _ := json.Marshal(list["steps"])
	for _, secret := range []string{f.w.Patient.Name, f.w.Doctor.Name, f.w.Doctor.PrincipalID, "Dr. Synthetic", "from", "actingAs", "principal"} {
		if strings.Contains(string(raw), secret) {
			t.Errorf("the step listing shows %q: %s", secret, raw)
		}
	}
	ref := steps[1].(map[string]any)
	if ref["stepId"] != handofftest.StepReferral || ref["open"] != false || len(ref["sections"].([]any)) != 3 {
		t.Fatalf("referral listed as %v", ref)
	}

	rec, isErr := f.call(t, grant.ToolHandOff, map[string]any{"stepId": handofftest.StepReferral})
	if isErr || rec["recipient"] != "Dr. Synthetic" || rec["replayed"] != false || len(rec["sections"].([]any)) != 3 {
		t.Fatalf("hand_off: %v", rec)
	}
	if line := f.lastAudit(t, grant.ToolHandOff); line["stepId"] != handofftest.StepReferral || line["outcome"] != "ok" ||
		line["actingAs"] != f.w.Patient.Name {
		t.Errorf("audit line %v", line)
	}
	list, _ = f.call(t, grant.ToolListApprovedDocuments, nil)
	ref = list["steps"].([]any)[1].(map[string]any)
	if ref["open"] != true || ref["openUntil"] != rec["expiresAt"] {
		t.Fatalf("referral after hand_off: %v (receipt %v)", ref, rec)
	}
	if _, ok := f.w.Entry(t, f.w.Keys["problems"], f.w.Doctor); !ok {
		t.Fatal("no entry for the doctor")
	}
	again, _ := f.call(t, grant.ToolHandOff, map[string]any{"stepId": handofftest.StepReferral})
	if again["replayed"] != true || again["expiresAt"] != rec["expiresAt"] {
		t.Fatalf("hand_off again: %v", again)
	}
	closed, isErr := f.call(t, grant.ToolCloseStep, map[string]any{"stepId": handofftest.StepReferral})
	if isErr || closed["closedAt"] == nil {
		t.Fatalf("close_step: %v", closed)
	}
	if _, ok := f.w.Entry(t, f.w.Keys["problems"], f.w.Doctor); ok {
		t.Fatal("entry after close_step")
	}
	again, _ = f.call(t, grant.ToolCloseStep, map[string]any{"stepId": handofftest.StepReferral})
	if again["replayed"] != true || again["closedAt"] != closed["closedAt"] {
		t.Fatalf("close_step again: %v", again)
	}
}

func TestHandOffAdapterRefusalsSendNothing(t *testing.T) {
	tests := []struct {
		name string
		o    stepOptions
		tool string
		args map[string]any
		code string
		// prepare, when set, runs once the server is up.
		prepare func(t *testing.T, f *stepFixture)
	}{
		{"step not in grant", stepOptions{}, grant.ToolHandOff, map[string]any{"stepId": "elsewhere"}, string(refusal.StepNotInGrant), nil},
		{"close of a step not in grant", stepOptions{}, grant.ToolCloseStep, map[string]any{"stepId": "elsewhere"}, string(refusal.StepNotInGrant), nil},
		{"undeclared argument", stepOptions{}, grant.ToolHandOff, map[string]any{"stepId": handofftest.StepReferral, "to": "x"}, string(refusal.UnexpectedArgument), nil},
		{"not the delegator (stdio)", stepOptions{user: func(w *handofftest.World) string { return w.Doctor.Name }},
			grant.ToolHandOff, map[string]any{"stepId": handofftest.StepReferral}, string(refusal.NotStepDelegator), nil},
		{"close by another user", stepOptions{user: func(w *handofftest.World) string { return w.Doctor.Name }},
			grant.ToolCloseStep, map[string]any{"stepId": handofftest.StepReferral}, string(refusal.NotStepDelegator), nil},
		{"nothing to hand off", stepOptions{mutate: func(g *grant.Grant) { g.Documents = []string{handofftest.PlainDocID} }},
			grant.ToolHandOff, map[string]any{"stepId": handofftest.StepReferral}, string(refusal.NothingToHandOff), nil},
		{"window too short", stepOptions{mutate: func(g *grant.Grant) { g.NotAfter = time.Now().Add(time.Hour).Truncate(time.Second) },
			now: func() time.Time { return time.Now().Truncate(time.Second).Add(time.Hour - 3*time.Second) }},
			grant.ToolHandOff, map[string]any{"stepId": handofftest.StepReferral}, string(refusal.WindowTooShort), nil},
		{"step not open", stepOptions{}, grant.ToolCloseStep, map[string]any{"stepId": handofftest.StepReferral}, string(refusal.StepNotOpen), nil},
		{"confirmation unavailable", stepOptions{world: handofftest.Options{Confirm: grant.ConfirmElicit}, noElict: true},
			grant.ToolHandOff, map[string]any{"stepId": handofftest.StepReferral}, string(refusal.ConfirmationUnavailable), nil},
		{"confirmation declined", stepOptions{world: handofftest.Options{Confirm: grant.ConfirmElicit},
			elicit: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				return &mcp.ElicitResult{Action: "decline"}, nil
			}}, grant.ToolHandOff, map[string]any{"stepId": handofftest.StepReferral}, string(refusal.ConfirmationDeclined), nil},
		{"confirmation unticked", stepOptions{world: handofftest.Options{Confirm: grant.ConfirmElicit},
			elicit: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"confirm": false}}, nil
			}}, grant.ToolHandOff, map[string]any{"stepId": handofftest.StepReferral}, string(refusal.ConfirmationDeclined), nil},
		// The journal would hold the entries close_step revokes by: one
		// removed under the server would lose them.
		{"the journal removed while serving", stepOptions{}, grant.ToolHandOff, map[string]any{"stepId": handofftest.StepReferral},
			string(refusal.RecordUnavailable), func(t *testing.T, f *stepFixture) {
				if err := os.Remove(journal.DefaultPath(f.w.Manifest)); err != nil {
					t.Fatal(err)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newStepFixture(t, tc.o)
			if tc.prepare != nil {
				tc.prepare(t, f)
			}
			before := mcptest.KeyRouteCounts(f.env.Gateway)
			m, isErr := f.call(t, tc.tool, tc.args)
			if !isErr || m["layer"] != "adapter" || m["code"] != tc.code || m["refused"] != true {
				t.Fatalf("got %v, want adapter %s", m, tc.code)
			}
			if after := mcptest.KeyRouteCounts(f.env.Gateway); !maps.Equal(before, after) {
				t.Fatalf("the refusal reached the crypto or key routes: %v -> %v", before, after)
			}
			for _, k := range f.w.Keys {
				if _, ok := f.w.Entry(t, k, f.w.Doctor); ok {
					t.Fatal("the doctor got an entry")
				}
			}
		})
	}
}

// TestHandOffConfirmation: the go-sdk client's elicitation handler is asked
// on the newest protocol (the server's input request, answered by a retried
// call) and on 2025-11-25 (an elicitation/create request during the call).
func TestHandOffConfirmation(t *testing.T) {
	for _, proto := range []string{"", "2025-11-25"} {
		t.Run("protocol "+proto, func(t *testing.T) { testHandOffConfirmation(t, proto) })
	}
}

func testHandOffConfirmation(t *testing.T, proto string) {
	var asked *mcp.ElicitParams
	f := newStepFixture(t, stepOptions{world: handofftest.Options{Confirm: grant.ConfirmElicit}, proto: proto,
		elicit: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asked = req.Params
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"confirm": true}}, nil
		}})
	rec, isErr := f.call(t, grant.ToolHandOff, map[string]any{"stepId": handofftest.StepReferral})
	if isErr {
		t.Fatalf("accepted hand_off: %v", rec)
	}
	if asked == nil {
		t.Fatal("the user was not asked")
	}
	for _, want := range []string{"Referral: history", "Dr. Synthetic", "Synthetic problems", "read-only"} {
		if !strings.Contains(asked.Message, want) {
			t.Errorf("the question %q does not say %q", asked.Message, want)
		}
	}
	if strings.Contains(asked.Message, "Synthetic results") || strings.Contains(asked.Message, f.w.Doctor.PrincipalID+" ") {
		t.Errorf("the question says too much: %q", asked.Message)
	}
	if _, ok := f.w.Entry(t, f.w.Keys["problems"], f.w.Doctor); !ok {
		t.Fatal("accepted, but nothing was handed")
	}
	if line := f.lastAudit(t, grant.ToolHandOff); line["confirmation"] != "accepted" {
		t.Errorf("audit line %v", line)
	}
	// Asked again while open: the receipt, and the user is not asked again.
	asked = nil
	if again, _ := f.call(t, grant.ToolHandOff, map[string]any{"stepId": handofftest.StepReferral}); again["replayed"] != true || asked != nil {
		t.Fatalf("hand_off again: %v (asked %v)", again, asked)
	}
}

func TestHandOffDeclineIsAudited(t *testing.T) {
	f := newStepFixture(t, stepOptions{world: handofftest.Options{Confirm: grant.ConfirmElicit},
		elicit: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "cancel"}, nil
		}})
	before := f.env.Gateway.Count(api.RouteACLGet)
	if m, _ := f.call(t, grant.ToolHandOff, map[string]any{"stepId": handofftest.StepReferral}); m["code"] != string(refusal.ConfirmationDeclined) {
		t.Fatalf("cancelled: %v", m)
	}
	if f.env.Gateway.Count(api.RouteACLGet) != before {
		t.Fatal("an ACL request was sent after a cancelled confirmation")
	}
	if line := f.lastAudit(t, grant.ToolHandOff); line["confirmation"] != "cancelled" || line["code"] != string(refusal.ConfirmationDeclined) {
		t.Errorf("audit line %v", line)
	}
}

func TestHandOffKeyServerRefusal(t *testing.T) {
	// The nurse holds the keys READ only: the key server refuses her grant,
	// and nothing is handed.
	f := newStepFixture(t, stepOptions{user: func(w *handofftest.World) string { return w.Nurse.Name }})
	m, isErr := f.call(t, grant.ToolHandOff, map[string]any{"stepId": handofftest.StepByNurse})
	if !isErr || m["layer"] != "keyserver" || m["code"] != "ACL_DENIED" {
		t.Fatalf("nurse's hand_off: %v", m)
	}
	if _, ok := f.w.Entry(t, f.w.Keys["problems"], f.w.Doctor); ok {
		t.Fatal("the doctor got an entry")
	}
}

func TestGrantExpiredRevokesHandOffs(t *testing.T) {
	var now time.Time
	f := newStepFixture(t, stepOptions{now: func() time.Time {
		if now.IsZero() {
			return time.Now()
		}
		return now
	}})
	if m, isErr := f.call(t, grant.ToolHandOff, map[string]any{"stepId": handofftest.StepReferral}); isErr {
		t.Fatal(m)
	}
	now = time.Now().Add(2 * time.Hour)
	if m, _ := f.call(t, grant.ToolListApprovedDocuments, nil); m["code"] != string(refusal.GrantExpired) {
		t.Fatalf("after the grant: %v", m)
	}
	for _, k := range f.w.Keys {
		if _, ok := f.w.Entry(t, k, f.w.Doctor); ok {
			t.Fatal("an entry survived GRANT_EXPIRED")
		}
	}
}

func TestShutdownRevokesHandOffs(t *testing.T) {
	f := newStepFixture(t, stepOptions{})
	if m, isErr := f.call(t, grant.ToolHandOff, map[string]any{"stepId": handofftest.StepReferral}); isErr {
		t.Fatal(m)
	}
	f.srv.RevokeHandOffs(context.Background())
	for _, k := range f.w.Keys {
		if _, ok := f.w.Entry(t, k, f.w.Doctor); ok {
			t.Fatal("an entry survived shutdown")
		}
	}
}

func TestServerRefusesAStepOnASingleDocument(t *testing.T) {
	env := reftest.Start(t, reference.Config{})
	w := handofftest.Build(t, env, t.TempDir(), handofftest.Options{})
	m, err := grant.LoadManifest(w.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	st := m.Steps[handofftest.StepReferral]
	st.Documents = map[string][]string{handofftest.PlainDocID: {"problems"}}
	m.Steps[handofftest.StepReferral] = st
	g := w.Grant(w.Patient.Name, []string{grant.ToolHandOff}, []string{handofftest.StepReferral}, time.Hour)
	j, err := journal.Open(context.Background(), journal.DefaultPath(w.Manifest))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	_, err = server.New(server.Config{Grant: g, Manifest: m, ManifestPath: w.Manifest, Journal: j,
		Sessions: server.NewGrantSessions(w.Client, g.LocalUser, nil, g.NotAfter, nil, nil)})
	if err == nil || !strings.Contains(err.Error(), handofftest.StepReferral) || !strings.Contains(err.Error(), handofftest.PlainDocID) {
		t.Fatalf("server.New: %v; want a refusal naming the step and the document", err)
	}
}
