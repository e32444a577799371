package serve

import (
	"log/slog"
	"net/http"

	"github.com/pdmcp/pdmcp/internal/panics"
	"github.com/pdmcp/pdmcp/server"
)

// PanicHTTP is the pdmcp_panics_total label of a panic recovered in the
// HTTP handler chain (server.PanicTool and the others are the MCP
// server's own).
const PanicHTTP = "http"

// internalErrorBody is the answer to a request whose handling panicked: a
// JSON-RPC internal error a host's client can read, saying nothing of the
// panic.
const internalErrorBody = `{"jsonrpc":"2.0","id":null,"error":{"code":-32603,"message":"internal error: the server failed; report this to the operator"}}` + "\n"

// recoverHTTP is the outermost handler: a panic anywhere in the handler
// chain on the request's own goroutine (the Host and Origin checks, the
// token check and what it calls, the JSON-RPC shape check, the session
// limiter, the SDK's HTTP handling) ends that request only. It is logged
// as the server's recovers are (the value described without its contents,
// the stack without argument words: internal/panics) and counted; the
// request is answered 500 with a JSON-RPC internal error when nothing of
// the answer was sent yet, and otherwise cut off (http.ErrAbortHandler:
// net/http closes the connection without logging it). net/http would
// recover it too, but close the connection with no answer and log the
// panic's value, which may hold a token.
//
// The MCP server's handlers run on goroutines of the SDK's, not here; the
// server recovers those itself (server/panic.go).
func recoverHTTP(log *slog.Logger, m *Metrics, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		aw := &answerWriter{ResponseWriter: w}
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			log.Error("a panic was recovered in the HTTP handler chain; the request was answered 500 or cut off, and the server goes on",
				"panic", panics.Value(v), "answerStarted", aw.started, "stack", panics.Stack())
			m.Panicked(PanicHTTP)
			if aw.started {
				panic(http.ErrAbortHandler)
			}
			h := w.Header()
			for k := range h {
				delete(h, k)
			}
			h.Set("Content-Type", "application/json")
			h.Set("Connection", "close")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(internalErrorBody))
		}()
		next.ServeHTTP(aw, r)
	})
}

// answerWriter notes whether the answer has started (a status or a byte
// sent), so a panic after it cuts the connection rather than send a
// second status. Unwrap lets http.ResponseController (the SDK's flushes,
// deadlines) reach the connection's writer; Flush keeps it an
// http.Flusher for code that asks so.
type answerWriter struct {
	http.ResponseWriter
	started bool
}

func (a *answerWriter) WriteHeader(code int) {
	// An informational status (1xx) leaves the final one to come.
	a.started = a.started || code >= 200
	a.ResponseWriter.WriteHeader(code)
}

func (a *answerWriter) Write(b []byte) (int, error) {
	a.started = true
	return a.ResponseWriter.Write(b)
}

func (a *answerWriter) Flush() {
	a.started = true
	_ = http.NewResponseController(a.ResponseWriter).Flush()
}

func (a *answerWriter) Unwrap() http.ResponseWriter { return a.ResponseWriter }

// reportBackgroundPanic logs and counts a panic recovered on a goroutine
// the serving edge's parts start on a request's behalf (the token
// exchange ahead of need, the session pool's evictions), as the server
// reports its own (server.PanicBackground).
func reportBackgroundPanic(log *slog.Logger, m *Metrics, what string, v any) {
	log.Error("a panic was recovered; the server goes on",
		"where", server.PanicBackground, "in", what, "panic", panics.Value(v), "stack", panics.Stack())
	m.Panicked(server.PanicBackground)
}
