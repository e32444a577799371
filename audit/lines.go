package audit

import (
	"slices"
	"strings"
	"time"
)

// Line is one kind of audit line: ToolCall, Client, AuthRefused,
// RefusalSummary, Startup or Shutdown. The set is closed; Write adds the "event" member.
// The Log writes lines of one more event of its own, EventHead (heads.go).
type Line interface {
	event() string
	// prepare returns a copy of the line to encode, with its timestamps set
	// and in UTC and its ill-shaped fields cleared; and the JSON names of the
	// fields cleared.
	prepare(now time.Time) (any, []string)
}

// Events, as the "event" member of each line.
const (
	EventTool        = "tool"
	EventClient      = "client"
	EventAuthRefused = "auth-refused"
	// EventRefusalSummary counts refused requests not written one by one
	// (Log.Refused).
	EventRefusalSummary = "auth-refused-summary"
	EventStartup        = "startup"
	EventShutdown       = "shutdown"
)

// Outcomes of a tool call, or of one section of a compound read.
const (
	OutcomeOK      = "ok"
	OutcomeRefused = "refused"
	OutcomeError   = "error"
)

// Layers that refuse (the same words as gateway/api's Layer constants).
const (
	LayerAdapter   = "adapter"
	LayerGateway   = "gateway"
	LayerKeyServer = "keyserver"
)

// ToolCall is the line for one tool call.
type ToolCall struct {
	RunID    string `json:"runId"`
	GrantID  string `json:"grantId"`
	ActingAs string `json:"actingAs,omitempty"`
	Caller   string `json:"caller,omitempty"` // the HTTP user id; empty over stdio
	// JKT is the session holder key's RFC 7638 thumbprint (base64url).
	JKT string `json:"jkt,omitempty"`
	// HandleDigest is Digest12 of the session handle, never the handle.
	HandleDigest string `json:"handleDigest,omitempty"`

	Tool       string `json:"tool"`
	DocumentID string `json:"documentId,omitempty"`
	FragmentID string `json:"fragmentId,omitempty"`
	StepID     string `json:"stepId,omitempty"`
	Version    int    `json:"version,omitempty"`

	Outcome string `json:"outcome"` // OutcomeOK, OutcomeRefused or OutcomeError
	Layer   string `json:"layer,omitempty"`
	Code    string `json:"code,omitempty"`
	Status  int    `json:"status,omitempty"`

	StartedAt       time.Time `json:"startedAt"`
	LatencyMs       int64     `json:"latencyMs"`
	GatewayRequests []Request `json:"gatewayRequests,omitempty"`
	ServiceRelogin  bool      `json:"serviceRelogin,omitempty"`
	// SessionReplaced says the Gateway no longer knew the session the
	// call began on (restart, revoke, expiry), so a new one was minted and
	// the call sent once more; ActingAs, JKT and HandleDigest then name
	// the new session.
	SessionReplaced bool `json:"sessionReplaced,omitempty"`

	// File tools: the path relative to the file root, the plaintext's
	// sha256, whether a key was minted, and Digest12 of its hidden link.
	Path            string `json:"path,omitempty"`
	PlaintextSHA256 string `json:"plaintextSha256,omitempty"`
	Minted          bool   `json:"minted,omitempty"`
	KeyLink         string `json:"keyLink,omitempty"`

	// Sections of a compound document: each one's outcome, never its text.
	Sections []Section `json:"sections,omitempty"`

	// Confirmation is the user's answer when a hand-off asked for one:
	// ConfirmAccepted, ConfirmDeclined, ConfirmCancelled or
	// ConfirmUnavailable (the host could not be asked).
	Confirmation string `json:"confirmation,omitempty"`
	// EntriesLeftAlone counts, for hand_off and close_step, the access
	// entries this server had journalled that no longer read as it granted
	// them (someone changed or replaced them), and so were not revoked.
	EntriesLeftAlone int `json:"entriesLeftAlone,omitempty"`

	// TraceID and SpanID name the span the call ran in, when one was
	// active (see Trace): the line joins the trace by them.
	TraceID string `json:"traceId,omitempty"`
	SpanID  string `json:"spanId,omitempty"`
}

// Answers to a hand-off's confirmation.
const (
	ConfirmAccepted    = "accepted"
	ConfirmDeclined    = "declined"
	ConfirmCancelled   = "cancelled"
	ConfirmUnavailable = "unavailable"
)

// Request is one Gateway request a tool call made.
type Request struct {
	Route     string `json:"route"`
	Status    int    `json:"status"`
	Code      string `json:"code,omitempty"`
	LatencyMs int64  `json:"latencyMs"`
}

// Section is one section's outcome in a compound read. Its time is when
// its own decrypt began (StartedAt, UTC, to the millisecond) and how long it
// took (LatencyMs): sections are opened one after another, so a reader can
// tell which section a slow or refused Gateway request belonged to.
type Section struct {
	ID        string    `json:"id"`
	Outcome   string    `json:"outcome"`
	Layer     string    `json:"layer,omitempty"`
	Code      string    `json:"code,omitempty"`
	StartedAt time.Time `json:"startedAt"`
	LatencyMs int64     `json:"latencyMs"`
}

// Client is the line written at each initialize: which host connected and
// whether it said it can elicit.
type Client struct {
	RunID string `json:"runId"`
	// Caller is Digest12 of the HTTP user id (issuer|subject), as the
	// server's log names callers; never the id. Empty over stdio.
	Caller          string    `json:"caller,omitempty"`
	Name            string    `json:"name"`
	Version         string    `json:"version"`
	Elicitation     bool      `json:"elicitation"`
	ProtocolVersion string    `json:"protocolVersion"`
	TS              time.Time `json:"ts"`
	// TraceID and SpanID as ToolCall's.
	TraceID string `json:"traceId,omitempty"`
	SpanID  string `json:"spanId,omitempty"`
}

// AuthRefused is the line for an HTTP request refused for its token. It
// carries no header value and nothing from inside the token.
type AuthRefused struct {
	Class  string `json:"class"`  // e.g. "expired", "no-token"
	Reason string `json:"reason"` // the server's code, e.g. "TOKEN_EXPIRED"
	Status int    `json:"status"`
	// Caller is Digest12 of the verified user's id, for a refusal that came
	// after the token was accepted (another user's MCP session); empty
	// otherwise. Never the id itself.
	Caller string `json:"caller,omitempty"`
	// Method is the request's method if it is a standard one, else
	// "OTHER"; Path is the route the server matched (a query is dropped,
	// and a path of any other shape than a route's is not written). Both
	// are what the sender chose, so neither is written as sent.
	Method string    `json:"method"`
	Path   string    `json:"path"`
	TS     time.Time `json:"ts"`
	// TraceID and SpanID as ToolCall's, where the refusal came with a
	// context to take them from. Refusals counted into a RefusalSummary
	// are many requests, so a summary names no trace.
	TraceID string `json:"traceId,omitempty"`
	SpanID  string `json:"spanId,omitempty"`
}

// RefusalSummary counts the refused requests of one kind (class, reason,
// status and caller) that were not written one by one: the first of a kind
// gets its own AuthRefused line, and those within RefusalWindow after it
// are counted here (see Log.Refused). The lines of a kind plus its
// summaries' counts are every refusal of that kind.
type RefusalSummary struct {
	Class  string `json:"class"`
	Reason string `json:"reason"`
	Status int    `json:"status"`
	Caller string `json:"caller,omitempty"` // as AuthRefused's
	Count  int    `json:"count"`
	// First and Last are when the first and the last refusal counted came.
	First time.Time `json:"first"`
	Last  time.Time `json:"last"`
}

// Startup is the line written when the server starts serving.
type Startup struct {
	RunID          string    `json:"runId"`
	ProgramVersion string    `json:"programVersion,omitempty"`
	Transport      string    `json:"transport"` // "stdio" or "http"
	GrantID        string    `json:"grantId,omitempty"`
	TS             time.Time `json:"ts"`
}

// Shutdown is the line written when the server stops.
type Shutdown struct {
	RunID  string    `json:"runId"`
	Reason string    `json:"reason,omitempty"` // e.g. "SIGTERM", "stdin-closed"
	TS     time.Time `json:"ts"`
}

func (ToolCall) event() string       { return EventTool }
func (Client) event() string         { return EventClient }
func (AuthRefused) event() string    { return EventAuthRefused }
func (RefusalSummary) event() string { return EventRefusalSummary }
func (Startup) event() string        { return EventStartup }
func (Shutdown) event() string       { return EventShutdown }

func (c ToolCall) prepare(now time.Time) (any, []string) { return c.sanitized(now) }

// sanitized is prepare for a tool call, as a ToolCall.
func (c ToolCall) sanitized(now time.Time) (ToolCall, []string) {
	var s sanitizer
	c.RunID = s.free("runId", c.RunID)
	c.GrantID = s.free("grantId", c.GrantID)
	c.ActingAs = s.free("actingAs", c.ActingAs)
	c.Caller = s.free("caller", c.Caller)
	c.JKT = s.match("jkt", c.JKT, isThumbprint)
	c.HandleDigest = s.match("handleDigest", c.HandleDigest, isDigest12)
	c.Tool = s.match("tool", c.Tool, isToolName)
	c.DocumentID = s.free("documentId", c.DocumentID)
	c.FragmentID = s.free("fragmentId", c.FragmentID)
	c.StepID = s.free("stepId", c.StepID)
	c.Outcome = s.match("outcome", c.Outcome, isOutcome)
	c.Layer = s.match("layer", c.Layer, isLayer)
	c.Code = s.match("code", c.Code, isCode)
	c.StartedAt = stamp(c.StartedAt, now)
	c.Path = s.free("path", c.Path)
	c.PlaintextSHA256 = s.match("plaintextSha256", c.PlaintextSHA256, isSHA256)
	c.KeyLink = s.match("keyLink", c.KeyLink, isDigest12)
	c.Confirmation = s.match("confirmation", c.Confirmation, isConfirmation)
	c.TraceID = s.match("traceId", c.TraceID, isTraceID)
	c.SpanID = s.match("spanId", c.SpanID, isSpanID)
	// The caller's requests are copied only when one loses a field.
	reqs, copied := c.GatewayRequests, false
	for i, r := range reqs {
		route := s.match("gatewayRequests.route", r.Route, isRoute)
		code := s.match("gatewayRequests.code", r.Code, isCode)
		if route != r.Route || code != r.Code {
			if !copied {
				reqs, copied = slices.Clone(reqs), true
			}
			reqs[i].Route, reqs[i].Code = route, code
		}
	}
	c.GatewayRequests = reqs
	if c.Sections != nil {
		secs := make([]Section, len(c.Sections))
		for i, sec := range c.Sections {
			sec.ID = s.free("sections.id", sec.ID)
			sec.Outcome = s.match("sections.outcome", sec.Outcome, isOutcome)
			sec.Layer = s.match("sections.layer", sec.Layer, isLayer)
			sec.Code = s.match("sections.code", sec.Code, isCode)
			// A section with no time of its own gets its call's.
			sec.StartedAt = stamp(sec.StartedAt, c.StartedAt)
			secs[i] = sec
		}
		c.Sections = secs
	}
	return c, s.dropped
}

func (c Client) prepare(now time.Time) (any, []string) {
	var s sanitizer
	c.RunID = s.free("runId", c.RunID)
	c.Caller = s.match("caller", c.Caller, isDigest12)
	// Name, version and protocol version are whatever the client sent.
	c.Name = s.free("name", clip(c.Name, maxClientField))
	c.Version = s.free("version", clip(c.Version, maxClientField))
	c.ProtocolVersion = s.free("protocolVersion", clip(c.ProtocolVersion, maxClientField))
	c.TS = stamp(c.TS, now)
	c.TraceID = s.match("traceId", c.TraceID, isTraceID)
	c.SpanID = s.match("spanId", c.SpanID, isSpanID)
	return c, s.dropped
}

func (a AuthRefused) prepare(now time.Time) (any, []string) {
	var s sanitizer
	a.Class = s.match("class", a.Class, isClass)
	a.Reason = s.match("reason", a.Reason, isCode)
	a.Caller = s.match("caller", a.Caller, isDigest12)
	a.Method = RequestMethod(a.Method)
	// A query string can carry a token (access_token=...), so only the path
	// is kept.
	if i := strings.IndexAny(a.Path, "?#"); i >= 0 {
		a.Path = a.Path[:i]
	}
	a.Path = s.match("path", a.Path, isRoute)
	a.TS = stamp(a.TS, now)
	a.TraceID = s.match("traceId", a.TraceID, isTraceID)
	a.SpanID = s.match("spanId", a.SpanID, isSpanID)
	return a, s.dropped
}

func (r RefusalSummary) prepare(now time.Time) (any, []string) {
	var s sanitizer
	r.Class = s.match("class", r.Class, isClass)
	r.Reason = s.match("reason", r.Reason, isCode)
	r.Caller = s.match("caller", r.Caller, isDigest12)
	r.First = stamp(r.First, now)
	r.Last = stamp(r.Last, now)
	return r, s.dropped
}

func (st Startup) prepare(now time.Time) (any, []string) {
	var s sanitizer
	st.RunID = s.free("runId", st.RunID)
	st.ProgramVersion = s.free("programVersion", st.ProgramVersion)
	st.Transport = s.match("transport", st.Transport, isClass)
	st.GrantID = s.free("grantId", st.GrantID)
	st.TS = stamp(st.TS, now)
	return st, s.dropped
}

func (sd Shutdown) prepare(now time.Time) (any, []string) {
	var s sanitizer
	sd.RunID = s.free("runId", sd.RunID)
	sd.Reason = s.match("reason", sd.Reason, isReason)
	sd.TS = stamp(sd.TS, now)
	return sd, s.dropped
}

// stamp fills a missing time and normalises it to UTC milliseconds, so
// lines sort and compare as text.
func stamp(t, now time.Time) time.Time {
	if t.IsZero() {
		t = now
	}
	return t.UTC().Truncate(time.Millisecond)
}
