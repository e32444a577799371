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

// OtherValue is the conventions' value for anything outside a known set: a
// metric label is one of a bounded set, never a client's free text.
const OtherValue = "_OTHER"

// MethodLabel is method as a metric label: itself when it is an MCP method
// a server receives (a request or a notification), OtherValue otherwise.
func MethodLabel(method string) string {
	switch method {
	case "initialize", "ping", "server/discover",
		"tools/list", "tools/call",
		"prompts/list", "prompts/get",
		"resources/list", "resources/read", "resources/templates/list",
		"resources/subscribe", "resources/unsubscribe", "subscriptions/listen",
		"completion/complete", "logging/setLevel",
		"notifications/initialized", "notifications/cancelled", "notifications/progress",
		"notifications/roots/list_changed":
		return method
	}
	return OtherValue
}
