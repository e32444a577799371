package server

import (
	"context"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/audit"
	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/internal/panics"
)

// The go-sdk runs each request's handler on a goroutine of its own, over
// stdio and HTTP alike, and recovers nothing: a panic there, or in a
// goroutine a call starts, would end the process and every user's work,
// with no shutdown clean-up. So each is recovered here, and a panic ends
// the one call it happened in:
//
//   - the call is answered INTERNAL_ERROR in the tool's refusal shape,
//     with the catalogue's detail and nothing of the panic;
//   - the log gets an error line with where it happened, the value
//     described by internal/panics (a runtime error's text, otherwise
//     only its type: a value given to panic may hold a token or document
//     text) and the stack without argument words;
//   - CallMetrics.Panicked counts it;
//   - the caller's Gateway session is ended, so the next call mints a
//     fresh one (the panic may have left the session in any state), and
//     the call's audit line says INTERNAL_ERROR, outcome error;
//   - every other user's calls go on.
//
// The locks a session source holds across a call's work (the pool's
// per-user entry, a stdio task's session) are released in defers, so that
// ending the user after a panic frees their place. A panic inside a
// shared structure's own short critical section would still leave its
// mutex held; recovering cannot undo that, and no code here panics on
// purpose.

// Where a panic was recovered, as CallMetrics.Panicked and the log name it.
const (
	// PanicTool is a tool call's handler (or a session source it called).
	PanicTool = "tool"
	// PanicMethod is any other MCP request's handling (the tool gate,
	// tools/list, initialize, ...).
	PanicMethod = "method"
	// PanicBackground is a goroutine a call started, such as the
	// envelope staged beside an encrypt.
	PanicBackground = "background"
)

// panicked is the error a call ends in when work it started panicked: it
// says nothing of the panic, whose report went to the log.
type panicked struct{ where string }

func (p *panicked) Error() string { return "a panic was recovered (" + p.where + ")" }

// recovered reports a panic recovered in where, with what: logged
// without its contents and counted. The error it returns ends the call
// INTERNAL_ERROR like any internal failure.
func (s *Server) recovered(where, what string, v any) *panicked {
	s.log.Error("a panic was recovered; the server goes on",
		"where", where, "in", what, "panic", panics.Value(v), "stack", panics.Stack())
	if s.cfg.Metrics != nil {
		s.cfg.Metrics.Panicked(where)
	}
	return &panicked{where: where}
}

// guarded runs f, and only reports a panic in it: for the clean-up after
// a panic recovered in where (ending a session, writing the audit line),
// which must not take the answer down with it.
func (s *Server) guarded(where, what string, f func()) {
	defer func() {
		if v := recover(); v != nil {
			s.recovered(where, what, v)
		}
	}()
	f()
}

// endPanicked answers a tool call that panicked: the caller's Gateway
// session ended, the audit line written, the INTERNAL_ERROR refusal.
func (s *Server) endPanicked(ctx context.Context, c *call, start time.Time, rec *gateway.Recorder, err *panicked) *mcp.CallToolResult {
	r, _ := asRefusal(err)
	s.guarded(err.where, "ending the caller's Gateway session", func() {
		s.cfg.Sessions.End(context.WithoutCancel(ctx), c.caller)
	})
	s.guarded(err.where, "writing the audit line", func() {
		s.writeAudit(ctx, c.line, c.caller.ID, start, r, rec, c.session)
	})
	return r.result()
}

// recoverPanics is the outermost receiving middleware: a panic in
// handling any request that the tool handlers did not recover themselves
// (the tool gate, the SDK's own handling inside the middleware chain, a
// list) is answered too. A tools/call gets the INTERNAL_ERROR refusal as
// a tool result, its caller's Gateway session ended and an audit line
// written; any other method the JSON-RPC internal error, -32603.
func (s *Server) recoverPanics(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (res mcp.Result, err error) {
		if method == "tools/call" {
			// Here, the outermost of pdmcp's frames on the request's
			// goroutine: the fewest to copy (growStack).
			growStack()
		}
		start := s.cfg.Now()
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			perr := s.recovered(PanicMethod, methodName(method), v)
			if method != "tools/call" {
				res, err = nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError,
					Message: "internal error: the server failed; report this to the operator"}
				return
			}
			c := &call{caller: callerOf(req)}
			if p, ok := req.GetParams().(*mcp.CallToolParamsRaw); ok {
				c.line = audit.ToolCall{Tool: p.Name}
			}
			res, err = completeOn(req, s.endPanicked(ctx, c, start, nil, perr)), nil
		}()
		return next(ctx, method, req)
	}
}

// background runs f on a goroutine of its own, for a call that waits for
// it, and sends f's result on the channel returned. A panic in f is
// recovered there (the go-sdk's recover-nothing applies to every
// goroutine) and sent as the error that ends the call INTERNAL_ERROR.
func background[T any](s *Server, what string, f func() T, failed func(error) T) <-chan T {
	done := make(chan T, 1)
	go func() {
		defer func() {
			if v := recover(); v != nil {
				done <- failed(s.recovered(PanicBackground, what, v))
			}
		}()
		done <- f()
	}()
	return done
}

// methodName is method for the log when it reads as an MCP method name,
// else "unknown": the name is the client's text.
func methodName(method string) string {
	if len(method) == 0 || len(method) > 64 || strings.Trim(method, "abcdefghijklmnopqrstuvwxyz/_") != "" {
		return "unknown"
	}
	return method
}
