package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/server/journal"
	"github.com/pdmcp/pdmcp/server/refusal"
)

// Refusal is a decided "no", from whichever layer said it. It becomes a tool
// result with isError set and the refusal as JSON in its text content; it is
// never a protocol error, so the model can read it.
type Refusal struct {
	Refused    bool   `json:"refused"`
	Layer      string `json:"layer"`
	Code       string `json:"code"`
	Status     int    `json:"status"`
	Detail     string `json:"detail"`
	RetryAfter int    `json:"retryAfter,omitempty"`
}

func (r *Refusal) Error() string {
	return fmt.Sprintf("%s refused %s: %s", r.Layer, r.Code, r.Detail)
}

// refuseCode builds an adapter refusal with the catalogue's status for
// code: no status is given by hand. The refusals several places make are
// the catalogue's constructors (refusal.GrantEnded,
// refusal.NoVerifiedCaller), which asRefusal renders the same way.
func refuseCode(code refusal.Code, format string, args ...any) *Refusal {
	return &Refusal{Refused: true, Layer: api.LayerAdapter, Code: string(code), Status: code.Status(),
		Detail: fmt.Sprintf(format, args...)}
}

// asRefusal turns any error a tool ended in into a refusal. A Gateway or key
// server refusal keeps its own layer and code; anything else is this
// server's internal failure, reported without its text (which may name
// paths or upstream details).
func asRefusal(err error) (r *Refusal, internal bool) {
	var own *Refusal
	if errors.As(err, &own) {
		return own, false
	}
	var step *refusal.Refusal
	if errors.As(err, &step) {
		return &Refusal{Refused: true, Layer: api.LayerAdapter, Code: string(step.Code), Status: step.Status(), Detail: step.Detail}, false
	}
	var gw *api.Error
	if errors.As(err, &gw) {
		out := &Refusal{Refused: true, Layer: gw.Layer, Code: gw.Code, Status: gw.Status, Detail: boundDetail(gw.Detail)}
		if gw.RetryAfter > 0 {
			out.RetryAfter = int(gw.RetryAfter.Seconds() + 0.999)
		}
		if out.Layer == "" {
			out.Layer = api.LayerGateway
		}
		return out, false
	}
	if journal.StorageUnavailable(err) {
		// The disk or the journal's lock, not this call: a retry can
		// succeed, and the Gateway session is kept.
		return &Refusal{Refused: true, Layer: api.LayerAdapter, Code: string(refusal.StorageUnavailable),
			Status: refusal.StorageUnavailable.Status(), RetryAfter: storageRetryAfter,
			Detail: "the server could not use its record (its journal is busy or its disk is full); the call did not finish " +
				"and nothing receipted was lost; call it again with the same arguments shortly (a save with the same " +
				"idempotencyKey finishes once, never twice); if it keeps failing, tell the operator"}, false
	}
	return &Refusal{Refused: true, Layer: api.LayerAdapter, Code: string(refusal.Internal), Status: 500,
		Detail: "the server failed internally; the task's Gateway session was ended; report this to the operator"}, true
}

// storageRetryAfter is the seconds a STORAGE_UNAVAILABLE refusal asks the
// caller to wait: about the journal's busy timeout, which is what another
// process's write lock costs at most.
const storageRetryAfter = int(journal.BusyTimeout / time.Second)

// result renders a refusal as an isError tool result with no
// structuredContent and two text content blocks: a one-line sentence naming
// the layer, code and status, then the refusal as JSON.
//
// Why no structuredContent: a tool's outputSchema describes its success
// result (closed, with required fields), and a refusal object contradicts
// it. Clients built on the TypeScript SDK (1.32.2, Client.callTool) validate
// structuredContent against the cached outputSchema whenever it is present,
// error or not, and throw -32602 instead of returning the result; they skip
// that check, and the "outputSchema requires structuredContent" check, when
// isError is set and structuredContent is absent. The go-sdk client does not
// validate results at all. Hosts that hand their model structuredContent when
// present (Claude Code, Codex) fall back to the content blocks when it is
// absent, and hosts that always hand over the content (Gemini CLI, opencode,
// Copilot CLI) read the same JSON. Widening every outputSchema to admit the
// refusal shape instead would weaken each schema for every success result and
// would have to be repeated, and kept in step, by every new tool.
//
// Why the sentence comes first: Gemini CLI (0.61.0) parses a result's first
// text block as JSON into structuredContent when the server sent none, and
// its SDK then rejects that against the output schema, so its model would
// get the -32602 error instead of the refusal. A first block that is not
// JSON is left alone, and the model reads both blocks.
//
// Why the sentence ends with a newline: some hosts (Copilot CLI 1.0.102)
// join a result's text blocks with no separator; the JSON then starts on its
// own line and the model can parse it from what it got.
func (r *Refusal) result() *mcp.CallToolResult {
	b, err := json.Marshal(r)
	if err != nil {
		// A Refusal is strings and ints; this cannot happen.
		b = []byte(`{"refused":true,"layer":"adapter","code":"INTERNAL_ERROR","status":500,"detail":"refusal not renderable"}`)
	}
	line := fmt.Sprintf("Refused by the %s layer: %s (status %d). The refusal as JSON follows; its detail says what to do.\n",
		r.Layer, r.Code, r.Status)
	return &mcp.CallToolResult{
		IsError: true,
		Content: []mcp.Content{&mcp.TextContent{Text: line}, &mcp.TextContent{Text: string(b)}},
	}
}

// RefusalOf reads a refusal back from a tool result, as a client sees it:
// ok is false when res is not an isError result with a text content block
// holding a refusal object. Tests and in-process callers use it; a host's
// model reads the same JSON.
func RefusalOf(res *mcp.CallToolResult) (r *Refusal, ok bool) {
	if res == nil || !res.IsError {
		return nil, false
	}
	for _, c := range res.Content {
		tc, isText := c.(*mcp.TextContent)
		if !isText {
			continue
		}
		var out Refusal
		if err := json.Unmarshal([]byte(tc.Text), &out); err == nil && out.Refused {
			return &out, true
		}
	}
	return nil, false
}
