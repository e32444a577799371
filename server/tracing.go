package server

// Names of the runtime/trace regions a read is broken down by (pdmcp bench
// --trace): the tool's run and the audit line's write are regions on the
// goroutine that runs them, beside (package gateway) each Gateway request
// and (package serve) each HTTP request's task.
const (
	TraceToolRegion  = "pdmcp.tool"
	TraceAuditRegion = "pdmcp.audit"
)
