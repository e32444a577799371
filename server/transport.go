package server

import "github.com/pdmcp/pdmcp/grant"

// MayAskHost reports whether a call may send the host a request of its own
// while it runs: hand_off's confirmation, which reaches a host on a
// revision before 2026-07-28 as an elicitation/create request on the
// call's stream. Only then does a session with MCP sessions answer over an
// SSE stream; otherwise every call has a single answer, sent as one JSON
// body (no stream to frame, flush and parse). Without sessions (2026-07-28)
// the server never sends a request (the confirmation is an input request in
// the result), so every answer is JSON.
func (s *Server) MayAskHost() bool { return s.allowed[grant.ToolHandOff] }
