package serve

import (
	"net/http"
	"runtime/trace"
)

// Names of the runtime/trace annotations of an HTTP request (pdmcp bench
// --trace): each request to the MCP endpoint is a task, with the protocol
// revision it spoke logged in it; the tool's run and its audit line are
// regions in it (server.TraceToolRegion, server.TraceAuditRegion).
const (
	TraceRequestTask   = "pdmcp.request"
	TraceProtocolLog   = "pdmcp.protocol"
	traceProtocolUnset = "none"
)

// traced makes each request a trace task while a trace is being recorded;
// otherwise it costs one check.
func traced(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !trace.IsEnabled() {
			next.ServeHTTP(w, r)
			return
		}
		ctx, task := trace.NewTask(r.Context(), TraceRequestTask)
		defer task.End()
		v := r.Header.Get("Mcp-Protocol-Version")
		if v == "" {
			v = traceProtocolUnset
		}
		trace.Log(ctx, TraceProtocolLog, v)
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}
