package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/pdmcp/pdmcp/audit"
	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/server"
)

// Metrics counts what the server does, for Prometheus. It has its own
// registry (nothing global) and labels only by tool, outcome, layer, code
// and Gateway route: never a user, a document or a key.
type Metrics struct {
	reg      *prometheus.Registry
	calls    *prometheus.CounterVec
	gwTime   *prometheus.HistogramVec
	refusals *prometheus.CounterVec
	panics   *prometheus.CounterVec
	opTime   *prometheus.HistogramVec
}

// NewMetrics makes the collectors. sessions, when set, reports how many
// Gateway sessions are live.
func NewMetrics(sessions func() int) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pdmcp_tool_calls_total",
			Help: "Tool calls by tool and outcome (ok, refused, error), with the refusing layer and code.",
		}, []string{"tool", "outcome", "layer", "code"}),
		gwTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "pdmcp_gateway_request_seconds",
			Help:    "Latency of requests to the Gateway, by route and HTTP status class.",
			Buckets: []float64{.002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"route", "status"}),
		// The conventions' mcp.server.operation.duration, its attributes
		// as labels (dots made underscores); the buckets are the
		// conventions' below 10 ms and finer at the short end, where a
		// read's time is.
		opTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "mcp_server_operation_duration_seconds",
			Help: "MCP requests handled, by method, tool (tools/call), error type (a JSON-RPC code, tool_error for a " +
				"refused call, empty when it succeeded), protocol revision and transport: the OpenTelemetry MCP " +
				"conventions' mcp.server.operation.duration. Names outside the known sets are _OTHER.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5, 10, 30, 60, 120, 300},
		}, []string{"mcp_method_name", "gen_ai_tool_name", "error_type", "mcp_protocol_version", "network_transport"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pdmcp_http_refusals_total",
			Help: "HTTP requests refused before any tool ran, by class (no-token, expired, ...).",
		}, []string{"class", "status"}),
	}
	// Every label value is made at once, so a panic-free server shows
	// its zeros (an alert on the rate needs the series to exist).
	m.panics = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pdmcp_panics_total",
		Help: "Panics recovered, by where: tool (a tool call), method (another MCP request), background (a goroutine a call started), http (the HTTP handler chain). Each ended one call or request; the log has its stack.",
	}, []string{"where"})
	for _, w := range []string{server.PanicTool, server.PanicMethod, server.PanicBackground, PanicHTTP} {
		m.panics.WithLabelValues(w)
	}
	m.reg.MustRegister(m.calls, m.gwTime, m.refusals, m.panics, m.opTime,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if sessions != nil {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "pdmcp_gateway_sessions",
			Help: "Live scoped Gateway sessions held by this server.",
		}, func() float64 { return float64(sessions()) }))
	}
	return m
}

// GrantSecondsLeft reports through left how long the grant in force has
// left (0 once it ended), as pdmcp_grant_seconds_remaining.
func (m *Metrics) GrantSecondsLeft(left func() float64) {
	if m == nil {
		return
	}
	_ = m.reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "pdmcp_grant_seconds_remaining",
		Help: "Seconds until the grant in force ends (0 once it ended: every tool call is then refused GRANT_EXPIRED).",
	}, left))
}

// MCPSessions reports live MCP sessions (HTTP) through n.
func (m *Metrics) MCPSessions(n func() int) {
	if m == nil {
		return
	}
	_ = m.reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "pdmcp_mcp_sessions",
		Help: "Live MCP sessions of the HTTP transport (protocol revisions with sessions).",
	}, func() float64 { return float64(n()) }))
}

// ToolCall records one tool call's outcome and its Gateway requests
// (server.CallMetrics).
func (m *Metrics) ToolCall(line audit.ToolCall, reqs []gateway.Request) {
	if m == nil {
		return
	}
	// A refused call may name any tool the model made up: only the known
	// names become labels, so /metrics never carries the model's text and
	// the series stay bounded.
	tool := line.Tool
	if !grant.KnownTool(tool) {
		tool = "unknown"
	}
	m.calls.WithLabelValues(tool, line.Outcome, line.Layer, line.Code).Inc()
	for _, q := range reqs {
		m.gwTime.WithLabelValues(q.Route, statusClass(q.Status)).Observe(q.Latency.Seconds())
	}
}

// Operation records one handled MCP request (server.OperationMetrics);
// every label value is one of a bounded set (server.Operation).
func (m *Metrics) Operation(op server.Operation) {
	if m == nil {
		return
	}
	m.opTime.WithLabelValues(op.Method, op.Tool, op.ErrorType, op.Protocol, op.Transport).Observe(op.Duration.Seconds())
}

// Panicked counts one recovered panic (server.CallMetrics); where is one
// of the labels NewMetrics makes.
func (m *Metrics) Panicked(where string) {
	if m == nil {
		return
	}
	m.panics.WithLabelValues(where).Inc()
}

// AuthRefused records one refused HTTP request.
func (m *Metrics) AuthRefused(class string, status int) {
	if m == nil {
		return
	}
	m.refusals.WithLabelValues(class, fmt.Sprint(status)).Inc()
}

func statusClass(s int) string {
	if s == 0 {
		return "none"
	}
	return fmt.Sprintf("%dxx", s/100)
}

// OpsHandler serves /healthz (no authentication, no secrets) and /metrics.
func OpsHandler(m *Metrics, version, transport string) http.Handler {
	return opsHandler(m, version, transport, nil)
}

// opsHandler is OpsHandler with the server's health: health, when set,
// adds its members to /healthz's answer, and a false ok makes it 503 with
// status "unavailable" (nothing can be served).
func opsHandler(m *Metrics, version, transport string, health func() (map[string]any, bool)) http.Handler {
	mux := http.NewServeMux()
	started := time.Now()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		body := map[string]any{}
		ok := true
		if health != nil {
			body, ok = health()
		}
		body["status"], body["name"], body["version"] = "ok", server.Name, version
		body["transport"], body["uptimeSeconds"] = transport, int(time.Since(started).Seconds())
		if !ok {
			body["status"] = "unavailable"
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(body)
	})
	if m != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	}
	return mux
}

// opsMaxConnections bounds the operations listener's connections (the
// oldest closed to admit a new one): a scraper and a health check need a
// few.
const opsMaxConnections = 16

// opsHygiene refuses, with 403, a request to the operations endpoints whose
// Host does not name the listener (DNS rebinding: a page of another site
// whose name resolves to 127.0.0.1 would otherwise read /metrics) or that
// comes from a browser page of any other origin.
func opsHygiene(own ownAddrs, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !own.hostOKOn(r.Host, "80") {
			http.Error(w, "Forbidden: Host does not name this server", http.StatusForbidden)
			return
		}
		if o := r.Header.Values("Origin"); len(o) > 1 || (len(o) == 1 && !own.originOK(o[0])) {
			http.Error(w, "Forbidden: origin not allowed", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// serveOps runs the operations listener on a loopback address until ctx
// ends. It refuses any other address: these endpoints have no
// authentication.
func serveOps(ctx context.Context, addr string, h http.Handler, log *slog.Logger) (string, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("--ops-addr %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return "", fmt.Errorf("--ops-addr %q: the operations endpoints have no authentication and serve on a loopback IP only", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("operations listener: %w", err)
	}
	// Anyone on the machine can reach it: the same bounds as the MCP
	// listener, smaller, with no one ever signed in.
	ln = newConnTracker(opsMaxConnections, 0, 0).listener(ln)
	srv := &http.Server{
		Handler:           opsHygiene(newOwnAddrs("http://"+ln.Addr().String()), h),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       time.Minute,
		MaxHeaderBytes:    8 << 10,
	}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("operations listener stopped", "err", err)
		}
	}()
	return "http://" + ln.Addr().String(), nil
}
