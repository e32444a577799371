package server

import (
	"context"
	"encoding/json"
	"errors"
	"runtime/trace"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/pdmcp/pdmcp/audit"
	"github.com/pdmcp/pdmcp/auth"
	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/server/refusal"
)

// tool is one tool this build offers; New registers those the grant allows.
type tool struct {
	name     string
	def      *mcp.Tool
	register func(*mcp.Server)
}

// call is one tool call in flight: who asked, the Gateway session it used,
// and what its audit line records.
type call struct {
	caller  Caller
	session GatewaySession
	// releases end the call's hold on the sessions it acquired.
	releases []func()
	line     audit.ToolCall
	// mcp is the host's MCP session, and inputs the answers it sent with a
	// retried call (an elicitation's, for a hand-off's confirmation).
	mcp    *mcp.ServerSession
	inputs mcp.InputResponseMap
	// state is the requestState the host echoed with inputs (2026-07-28).
	state string
}

// needInput ends a call round with a request for the host's input (MCP
// multi round-trip): the SDK asks the host and calls the tool again with
// the answers. The round itself writes no audit line; the call that
// finishes does.
type needInput struct {
	requests mcp.InputRequestMap
	// state is the requestState the host must echo with its answers.
	state string
}

func (*needInput) Error() string { return "the call needs the host's input" }

// description is a tool's description as a model reads it in tools/list:
// four short paragraphs, always in this order, so a model finds each part
// where it expects it. Each holds what never changes between calls; a
// result carries only what varies (TestToolDescriptionsHaveTheirParts
// checks the shape of every tool's).
type description struct {
	// does is what the tool does and what it returns.
	does string
	// use completes "Use it ...": when to call it, with what, and what to
	// call next.
	use string
	// refuses completes "It refuses ...": what is refused, and whether
	// anything was sent first.
	refuses string
	// never completes "It never ...".
	never string
}

func (d description) String() string {
	return d.does + "\n\nUse it " + d.use + "\n\nIt refuses " + d.refuses + "\n\nIt never " + d.never
}

// readsOnly is the annotations of a tool that changes nothing: no tool
// here reaches beyond the task's own documents, keys and folder (no open
// world).
func readsOnly() *mcp.ToolAnnotations {
	return &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)}
}

// writes is the annotations of a tool that writes: whether calling it
// again with the same arguments changes nothing more, and whether it
// takes away something that was there.
func writes(idempotent, destructive bool) *mcp.ToolAnnotations {
	return &mcp.ToolAnnotations{DestructiveHint: ptr(destructive), IdempotentHint: idempotent, OpenWorldHint: ptr(false)}
}

// contenter lets a result choose its own text content (a document read is
// framed as untrusted text); other results are shown as their JSON.
type contenter interface {
	content() []mcp.Content
}

// schemaJSON is a schema's JSON. The schemas are of this package's own types;
// one that does not marshal is a programming error caught by every test
// that builds a server.
func schemaJSON(s *jsonschema.Schema) json.RawMessage {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return b
}

// newTool wraps a typed handler with what every call gets: the grant's
// expiry check, closed argument decoding, the Gateway request recorder, one
// audit line, and refusals rendered as isError results.
func newTool[In, Out any](s *Server, def mcp.Tool, h func(context.Context, *call, In) (Out, error)) tool {
	in, err := inputSchema[In]()
	if err != nil {
		// The input types are this package's own; a failure here is a
		// programming error caught by every test that builds a server.
		panic(err)
	}
	// The schemas go to the SDK as their JSON, marshalled once here: it
	// marshals a tool's schemas again for every tools/list, and, without
	// MCP sessions, re-reads the input schema for every tools/call (its
	// parameter-header check), which a *jsonschema.Schema would walk by
	// reflection each time.
	def.InputSchema = schemaJSON(in)
	if out, err := jsonschema.For[Out](&jsonschema.ForOptions{}); err == nil {
		def.OutputSchema = schemaJSON(out)
	}
	args := newArgDecoder[In](in)
	d := def
	handler := func(ctx context.Context, req *mcp.CallToolRequest) (res *mcp.CallToolResult, err error) {
		defer trace.StartRegion(ctx, TraceToolRegion).End()
		start := s.cfg.Now()
		c := &call{caller: callerOf(req), line: audit.ToolCall{Tool: d.Name}, mcp: req.Session,
			inputs: req.Params.InputResponses, state: req.Params.RequestState}
		rec := &gateway.Recorder{}
		// A panic ends this call only (see panic.go). Deferred before
		// releaseSessions, so it runs after the call's sessions are
		// released: the caller's session is then idle and ended at once.
		defer func() {
			if v := recover(); v != nil {
				res, err = s.endPanicked(ctx, c, start, rec, s.recovered(PanicTool, d.Name, v)), nil
			}
		}()
		defer c.releaseSessions()
		ctx = gateway.WithRecorder(ctx, rec)
		out, err := runTool(ctx, s, c, start, req.Params.Arguments, args, h)
		if err != nil {
			// Only a call that did not complete asks for input; ni is
			// declared here so that a completed call does not allocate it.
			var ni *needInput
			if errors.As(err, &ni) {
				return &mcp.CallToolResult{InputRequests: ni.requests, RequestState: ni.state}, nil
			}
			r, internal := asRefusal(err)
			if internal {
				s.log.Error("tool call failed", "tool", d.Name, "err", err)
				s.cfg.Sessions.End(context.WithoutCancel(ctx), c.caller)
			} else if r.Code == string(refusal.StorageUnavailable) {
				s.log.Warn("tool call refused: storage unavailable (journal busy or disk full)", "tool", d.Name, "err", err)
			}
			s.writeAudit(ctx, c.line, c.caller.ID, start, r, rec, c.session)
			return r.result(), nil
		}
		s.writeAudit(ctx, c.line, c.caller.ID, start, nil, rec, c.session)
		// out is made an interface value once, for both uses.
		structured := any(out)
		ok := &mcp.CallToolResult{StructuredContent: structured}
		if cc, isContenter := structured.(contenter); isContenter {
			ok.Content = cc.content()
		} else {
			ok.Content = []mcp.Content{&mcp.TextContent{Text: jsonText(out)}}
		}
		return ok, nil
	}
	return tool{name: d.Name, def: &d, register: func(ms *mcp.Server) { ms.AddTool(&d, handler) }}
}

// runTool does what comes before the handler: a call after the grant's
// notAfter is refused GRANT_EXPIRED and ends the task's Gateway sessions,
// then the arguments are decoded against the closed schema.
func runTool[In, Out any](ctx context.Context, s *Server, c *call, start time.Time, raw json.RawMessage,
	args *argDecoder[In], h func(context.Context, *call, In) (Out, error)) (Out, error) {
	var zero Out
	g := s.FollowGrant(ctx)
	if g.Expired(start) {
		s.revokeGrantHandOffs(ctx)
		s.endSessions(ctx)
		return zero, refusal.GrantEnded(g.NotAfter, true)
	}
	if !s.toolGranted(g, c.line.Tool) {
		return zero, refusal.New(refusal.ToolNotInGrant,
			"the operator's new grant no longer allows %s; nothing was sent", c.line.Tool)
	}
	in, r := args.decode(raw)
	if r != nil {
		return zero, r
	}
	return h(ctx, c, in)
}

// writeAudit writes one tool-call line. r is nil for a call that
// succeeded. The line names the trace span active in ctx, if any.
func (s *Server) writeAudit(ctx context.Context, line audit.ToolCall, caller string, start time.Time, r *Refusal, rec *gateway.Recorder, sess GatewaySession) {
	defer trace.StartRegion(ctx, TraceAuditRegion).End()
	// The call's span, looked up in ctx once for the line and for itself.
	span := oteltrace.SpanFromContext(ctx)
	line.TraceID, line.SpanID = audit.SpanIDs(span.SpanContext())
	line.RunID = s.cfg.RunID
	line.GrantID = s.grantNow().ID
	line.Caller = caller
	line.StartedAt = start.UTC()
	line.LatencyMs = s.cfg.Now().Sub(start).Milliseconds()
	if sess == nil {
		// A call that sent nothing (a list, an adapter refusal) still names
		// the session the caller holds, if any, so every line of a user
		// joins the Gateway's rows the same way.
		if p, ok := s.cfg.Sessions.(sessionPeeker); ok {
			sess = p.Current(Caller{ID: caller})
		}
	}
	if sess != nil {
		line.ActingAs, line.JKT, line.HandleDigest = sess.ActingAs(), sess.JKT(), sess.HandleDigest()
	}
	line.Outcome = "ok"
	if r != nil {
		line.Outcome = "refused"
		if r.Code == string(refusal.Internal) {
			line.Outcome = "error"
		}
		line.Layer, line.Code, line.Status = r.Layer, r.Code, r.Status
	}
	var reqs []gateway.Request
	if rec != nil {
		reqs = rec.Requests()
		for _, q := range reqs {
			line.GatewayRequests = append(line.GatewayRequests, audit.Request{
				Route: q.Route, Status: q.Status, Code: q.Code, LatencyMs: q.Latency.Milliseconds()})
			if q.ServiceRelogin {
				line.ServiceRelogin = true
			}
		}
	}
	traceCall(span, &line)
	if s.cfg.Metrics != nil {
		s.cfg.Metrics.ToolCall(line, reqs)
	}
	if err := s.cfg.Audit.WriteToolCall(line); err != nil {
		// A refused call's tool name is the model's text: only names this
		// build knows reach the log.
		tool := line.Tool
		if !grant.KnownTool(tool) {
			tool = "unknown"
		}
		s.log.Error("audit write failed", "tool", tool, "err", err)
	}
}

// sessionPeeker is a Sessions that can say which session a caller holds
// now without minting one.
type sessionPeeker interface {
	// Current is the caller's live session, or nil when there is none.
	Current(c Caller) GatewaySession
}

// session gets the caller's Gateway session for this call, held busy
// until the call ends, and remembers it for the audit line. The session
// returned replaces itself once if the Gateway says it no longer knows it
// (see retryingSession).
func (s *Server) session(ctx context.Context, c *call) (GatewaySession, error) {
	return s.retryingSession(ctx, c, "")
}

// widenedSession is session covering ttag too (GatewaySessions.AcquireWidened).
func (s *Server) widenedSession(ctx context.Context, c *call, ttag string) (GatewaySession, error) {
	return s.retryingSession(ctx, c, ttag)
}

// callerOf is the verified caller of an HTTP request; the empty Caller over
// stdio, where the grant names the one user.
func callerOf(req mcp.Request) Caller {
	if req == nil {
		return Caller{}
	}
	ex := req.GetExtra()
	if ex == nil || ex.TokenInfo == nil {
		return Caller{}
	}
	c := Caller{ID: ex.TokenInfo.UserID}
	if cred, ok := auth.CredentialFromExtra(ex.TokenInfo.Extra); ok {
		c.Credential = cred
	}
	return c
}
