package serve_test

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/handofftest"
)

// contentTypes records the Content-Type of every POST answered 200.
type contentTypes struct {
	base http.RoundTripper
	mu   sync.Mutex
	seen []string
}

func (c *contentTypes) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.base.RoundTrip(r)
	if err == nil && r.Method == http.MethodPost && resp.StatusCode == http.StatusOK {
		c.mu.Lock()
		c.seen = append(c.seen, resp.Header.Get("Content-Type"))
		c.mu.Unlock()
	}
	return resp, err
}

// TestHTTPSingleAnswersAreJSON: a call with a single answer comes back as
// one application/json body, not an SSE stream, in both session modes, and
// the real go-sdk client reads it; a server whose grant allows hand_off
// keeps the stream for sessions before 2026-07-28 (its confirmation is a
// request to the host on that stream; TestHTTPHandOffConfirmation checks
// it works) and answers JSON without sessions.
func TestHTTPSingleAnswersAreJSON(t *testing.T) {
	var w *handofftest.World
	stacks := map[string]*httpStack{
		"no hand_off":   newHTTPStack(t, 8),
		"with hand_off": newHTTPStack(t, 8, withSteps(&w, handofftest.Options{Confirm: grant.ConfirmElicit})),
	}
	for name, hs := range stacks {
		tok := hs.token(t, "alice", "pw-a")
		for _, v := range []string{"2025-11-25", "2026-07-28"} {
			t.Run(name+"/"+v, func(t *testing.T) {
				rec := &contentTypes{base: hs.hc.Transport}
				cs := hs.dial(t, "json-"+v, hs.as(tok, rec), nil, &mcp.ClientSessionOptions{ProtocolVersion: v})
				rec.mu.Lock()
				rec.seen = nil
				rec.mu.Unlock()
				res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "list_approved_documents", Arguments: map[string]any{}})
				if err != nil || res.IsError {
					t.Fatalf("list_approved_documents over %s: %v %v", v, err, res)
				}
				want := "application/json"
				if name == "with hand_off" && v < "2026-07-28" {
					want = "text/event-stream"
				}
				rec.mu.Lock()
				defer rec.mu.Unlock()
				if len(rec.seen) != 1 || rec.seen[0] != want {
					t.Fatalf("the call was answered as %q, want one %q", rec.seen, want)
				}
			})
		}
	}
}
