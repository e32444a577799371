package telemetry

// Names from the OpenTelemetry semantic conventions (MCP, GenAI, RPC) and
// values pdmcp gives them, kept here rather than in package server, whose
// source spells only tools' names in snake case (TestSourceNamesOnlyTools).
const (
	AttrToolName         = "gen_ai.tool.name"
	AttrOperationName    = "gen_ai.operation.name"
	AttrRPCStatusCode    = "rpc.response.status_code"
	ErrorTypeTool        = "tool_error"
	OperationExecuteTool = "execute_tool"

	// ErrorFile, ErrorExchange and ErrorJournal are error.type of a failed
	// file step, token exchange and journal transaction: a class, never
	// the error's text.
	ErrorFile     = "file_error"
	ErrorExchange = "exchange_failed"
	ErrorJournal  = "journal_error"
)

// SpanTokenExchange names the span of a caller's token exchange (HTTP).
const SpanTokenExchange = "pdmcp.token_exchange"
