// Package serve is pdmcp's serving edge: `pdmcp serve`'s Run, which opens
// the grant, manifest, journal, audit log and the Gateway service session
// and serves one server.Server over stdio or over Streamable HTTP on TLS;
// the HTTP handler in front of the MCP endpoint (Host and Origin checks,
// body bounds, JSON-RPC shape, the token check, the per-user limits, the
// MCP session limiter);
// the operations endpoints (health and Prometheus metrics); the go-sdk's
// logger; and the environment check a start refuses model credentials by.
//
// It uses only package server's exported API. It lives at internal/serve,
// not under server/, because it imports server: every package under
// server/ is one server imports (tools' parts), so the tree shows
// cmd/pdmcp -> internal/serve -> server.
package serve

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"

	"github.com/pdmcp/pdmcp/audit"
	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/crashpoint"
	"github.com/pdmcp/pdmcp/internal/telemetry"
	"github.com/pdmcp/pdmcp/server"
	"github.com/pdmcp/pdmcp/server/journal"
	"github.com/pdmcp/pdmcp/server/record"
)

// Options are `pdmcp serve`'s inputs.
type Options struct {
	ConfigPath   string // config.json (the registered service)
	ManifestPath string
	GrantPath    string
	AuditPath    string
	// AuditKeyPath, when set, is an Ed25519 private key (PKCS #8 PEM) the
	// audit file's chain head is signed with now and then (audit.HeadKey).
	AuditKeyPath string
	JournalPath  string // default: <manifest>.journal.sqlite
	// HTTPConfigPath, when set, serves Streamable HTTP over TLS on
	// 127.0.0.1 as described by mcp-http.json; otherwise stdio.
	HTTPConfigPath string
	Version        string
	Environ        []string // checked for model credentials
	Logger         *slog.Logger
	Now            func() time.Time
	CrashPoint     func(crashpoint.Point)
	// StdioTransport defaults to the process's stdin and stdout, with the
	// requests read before the end of input answered (drainingStdio).
	StdioTransport mcp.Transport
	// Ready, when set, is called with the served URL once HTTP listens.
	Ready func(url string)
	// OpsAddr, when set, serves /healthz and /metrics on this loopback
	// address (host:port; port 0 picks one), reported to OpsReady.
	OpsAddr  string
	OpsReady func(url string)
	// Listener, when set, is the HTTP listener (bound to the configured
	// port by the caller); otherwise Run binds it.
	Listener net.Listener
	// NonDurableJournalForBenchmarks opens the journal without fsync
	// (journal.OpenNonDurableForBenchmarks). Only `pdmcp bench` sets it, on
	// its own throwaway stack; no flag or config file of serve does.
	NonDurableJournalForBenchmarks bool
	// GatewayTimeout bounds each Gateway request (gateway.DefaultTimeout
	// when zero). serve leaves it at the default; tests shorten it.
	GatewayTimeout time.Duration
	// GrantCheckInterval is how often the grant is followed, its end
	// warned of and the Gateway's reachability checked between calls
	// (grantCheckInterval when zero); tests shorten it.
	GrantCheckInterval time.Duration
	// Hangup, when set, delivers SIGHUP: each one reopens the audit file
	// (log rotation); it never ends the run (see watchHangup).
	Hangup <-chan os.Signal
	// Tracing, when set, is used instead of the one the OTEL_* variables
	// of Environ and mcp-http.json's tracing block describe; its owner
	// shuts it down (tests read its spans after the server stopped).
	// Otherwise Run starts its own and flushes it when it stops.
	Tracing *telemetry.Tracing
}

// deps is what both transports open before serving.
type deps struct {
	service  *gateway.ServiceConfig
	grant    *grant.Grant
	manifest *grant.Manifest
	journal  *journal.Journal
	audit    *audit.Log
	client   *gateway.Client
	runID    string
	// stopHangup ends the audit file's reopen-on-SIGHUP watch.
	stopHangup func()
	// provider is the OpenID provider over HTTP (its reachability is
	// reported by /healthz); nil over stdio.
	provider pinger
	// tracing is the run's trace set-up; ownTracing says Run started it,
	// so flushes it at close.
	tracing    *telemetry.Tracing
	ownTracing bool
}

func (d *deps) close() {
	d.stopHangup()
	d.journal.Close()
	d.audit.Close()
	if d.ownTracing {
		// Last: the spans of the stop's own revokes are flushed too.
		_ = d.tracing.Shutdown(context.Background())
	}
}

// tracer is the run's tracer, nil when tracing is off (the server then
// adds no tracing middleware at all).
func (d *deps) tracer() trace.Tracer {
	if !d.tracing.Enabled() {
		return nil
	}
	return d.tracing.Tracer()
}

// startTracing resolves the run's tracing from the environment and the
// HTTP config's block (nil over stdio), unless the options bring one.
func startTracing(ctx context.Context, o *Options, file *telemetry.Settings) (t *telemetry.Tracing, own bool, err error) {
	if o.Tracing != nil {
		return o.Tracing, false, nil
	}
	cfg, err := telemetry.Resolve(file, o.Environ)
	if err != nil {
		return nil, false, err
	}
	if t, err = telemetry.Start(ctx, cfg, o.Version, o.Logger); err != nil {
		return nil, false, err
	}
	if t.Enabled() {
		// The endpoint's URL may carry a token in its query; only its
		// presence and the service name are logged.
		o.Logger.Info("tracing on: spans are exported over OTLP/HTTP", "serviceName", cfg.ServiceName)
	}
	return t, true, nil
}

// open loads and checks everything a server needs and signs in as the
// service. httpMode selects which kind of grant is acceptable.
func open(ctx context.Context, o *Options, httpMode bool, tracingFile *telemetry.Settings) (*deps, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if err := CheckEnvironment(o.Environ); err != nil {
		return nil, err
	}
	// Checked before anything is opened: a bad OTEL_* value refuses the
	// start by name rather than serving untraced.
	tr, ownTracing, err := startTracing(ctx, o, tracingFile)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok && ownTracing {
			_ = tr.Shutdown(ctx)
		}
	}()
	c, err := checkStart(StartFiles{ConfigPath: o.ConfigPath, ManifestPath: o.ManifestPath, GrantPath: o.GrantPath},
		httpMode, o.Now())
	if err != nil {
		return nil, err
	}
	sc, g, m := c.service, c.grant, c.manifest
	// checkStart resolved the manifest's path (see there).
	o.ManifestPath = c.manifestPath
	jpath := o.JournalPath
	if jpath == "" {
		jpath = journal.DefaultPath(o.ManifestPath)
	}
	// A journal is created only where no saved version needs one: a
	// missing journal beside saved versions is refused (record.CheckJournal),
	// as is an empty one, naming `pdmcp check --repair`.
	openJournal := journal.Open
	if o.NonDurableJournalForBenchmarks {
		openJournal = journal.OpenNonDurableForBenchmarks
	}
	if _, err := os.Stat(jpath); errors.Is(err, fs.ErrNotExist) {
		if err := record.CheckJournal(ctx, o.ManifestPath, m, jpath, nil); err != nil {
			return nil, err
		}
	}
	j, err := openJournal(ctx, jpath)
	if err != nil {
		return nil, err
	}
	if err := record.CheckJournal(ctx, o.ManifestPath, m, jpath, j); err != nil {
		j.Close()
		return nil, err
	}
	// The journal is this task's: it takes the manifest's task on first
	// use, and one of another task is refused by name.
	if err := j.BindTask(ctx, m.Task); err != nil {
		j.Close()
		return nil, err
	}
	// The audit's own warnings (a torn line fenced off, refusal
	// summaries) go to the server's log; its refusal windows run on the
	// wall clock, whatever o.Now says, since they bound what a flood costs.
	ao := audit.Options{Logger: o.Logger}
	if o.AuditKeyPath != "" {
		if ao.HeadKey, err = loadAuditKey(o.AuditKeyPath); err != nil {
			j.Close()
			return nil, err
		}
		o.Logger.Info("audit file's chain head signed", "keyId", ao.HeadKey.ID())
	}
	a, err := audit.OpenWith(o.AuditPath, ao)
	if err != nil {
		j.Close()
		return nil, err
	}
	d := &deps{service: sc, grant: g, manifest: m, journal: j, audit: a,
		stopHangup: watchHangup(o.Hangup, a, o.Logger), tracing: tr, ownTracing: ownTracing}
	cc := sc.ClientConfig()
	cc.Logger = o.Logger
	cc.Timeout = o.GatewayTimeout
	cc.Tracer = d.tracer()
	if d.client, err = gateway.New(cc); err != nil {
		d.close()
		return nil, err
	}
	if err := d.client.SignIn(ctx); err != nil {
		d.close()
		return nil, fmt.Errorf("service sign-in: %w", err)
	}
	ok = true
	return d, nil
}

// endingSessions is the Gateway sessions a transport serves with: the
// server's, and ended when it stops.
type endingSessions interface {
	server.GatewaySessions
	EndAll(ctx context.Context)
}

// server builds the MCP server on sessions, and starts the operations
// endpoints when they are asked for. stop, deferred by the transport, ends
// it in order: the open hand-offs are revoked while the journal and the
// service session are still open, then the server is closed and every
// Gateway session ended. When server fails, the sessions are ended.
func (d *deps) server(ctx context.Context, o *Options, sessions endingSessions, live func() int, transport string) (srv *server.Server, m *Metrics, stop func(), err error) {
	defer func() {
		if err != nil {
			sessions.EndAll(context.WithoutCancel(ctx))
		}
	}()
	ops := newOpsState(d.grant, o.Now)
	if o.OpsAddr != "" {
		m = NewMetrics(live)
		m.GrantSecondsLeft(ops.secondsLeft)
		url, err := serveOps(ctx, o.OpsAddr, opsHandler(m, o.Version, transport, ops.health), o.Logger)
		if err != nil {
			return nil, nil, nil, err
		}
		o.Logger.Info("operations endpoints", "url", url)
		if o.OpsReady != nil {
			o.OpsReady(url)
		}
	}
	d.runID = newRunID()
	cfg := server.Config{
		Grant: d.grant, Manifest: d.manifest, ManifestPath: o.ManifestPath, GrantPath: o.GrantPath,
		Journal: d.journal, Audit: d.audit,
		Sessions: sessions, Version: o.Version, RunID: d.runID, Now: o.Now, Logger: o.Logger, CrashPoint: o.CrashPoint,
		SDKLogger: sdkLogger(o.Logger), ClockOffset: d.client.ClockOffset, Revoker: d.client,
		NonDurableForBenchmarks: o.NonDurableJournalForBenchmarks, OnGrant: ops.setGrant,
		Tracer: d.tracer(), Transport: transport,
	}
	if m != nil {
		cfg.Metrics = m
	}
	if srv, err = server.New(cfg); err != nil {
		return nil, nil, nil, err
	}
	d.writeAudit(o, audit.Startup{RunID: d.runID, ProgramVersion: o.Version, Transport: transport, GrantID: d.grant.ID,
		TS: o.Now().UTC()})
	interval := o.GrantCheckInterval
	if interval <= 0 {
		interval = grantCheckInterval
	}
	// Reachability is for /healthz alone: without it, nothing is sent to
	// the Gateway or the provider between calls.
	var gw, provider pinger
	if o.OpsAddr != "" {
		gw, provider = d.client, d.provider
	}
	stopWatch := watchGrant(ctx, srv, ops, gw, provider, interval, o.Logger)
	stop = func() {
		stopWatch()
		srv.RevokeHandOffs(context.WithoutCancel(ctx))
		srv.Close()
		sessions.EndAll(context.WithoutCancel(ctx))
	}
	return srv, m, stop, nil
}

// stopped writes the shutdown line: why this run ended.
func (d *deps) stopped(o *Options, reason string) {
	d.writeAudit(o, audit.Shutdown{RunID: d.runID, Reason: reason, TS: o.Now().UTC()})
}

func (d *deps) writeAudit(o *Options, line audit.Line) {
	if err := d.audit.Write(line); err != nil {
		o.Logger.Error("audit write failed", "err", err)
	}
}

// Run serves until the host leaves (stdin closes) or ctx ends (SIGTERM,
// SIGINT); either way every Gateway session is revoked before it returns.
func Run(ctx context.Context, o Options) error {
	if o.HTTPConfigPath != "" {
		return runHTTP(ctx, o)
	}
	d, err := open(ctx, &o, false, nil)
	if err != nil {
		return err
	}
	defer d.close()
	sessions := server.NewGrantSessions(d.client, d.grant.LocalUser, grant.Keys(d.grant, d.manifest), d.grant.NotAfter, o.Now, o.Logger)
	srv, _, stop, err := d.server(ctx, &o, sessions, sessions.Len, "stdio")
	if err != nil {
		return err
	}
	defer stop()
	t := o.StdioTransport
	if t == nil {
		t = &drainingStdio{in: os.Stdin, out: os.Stdout, wait: stdinDrainWait, logger: o.Logger}
	}
	o.Logger.Info("serving over stdio", "grant", d.grant.ID, "tools", len(d.grant.AllowedTools),
		"notAfter", d.grant.NotAfter.UTC().Format(time.RFC3339))
	err = srv.MCP().Run(ctx, srv.Transport(t))
	if ctx.Err() != nil {
		// Ended by a signal: a normal stop.
		d.stopped(&o, "signal")
		return nil
	}
	d.stopped(&o, "stdin-closed")
	return err
}

func newRunID() string {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "run-unknown"
	}
	return hex.EncodeToString(b)
}

// loadAuditKey reads the key serve signs the audit chain's head with: a
// private key, refused when it is only the public half.
func loadAuditKey(path string) (*audit.HeadKey, error) {
	k, err := audit.LoadHeadKey(path)
	if err != nil {
		return nil, err
	}
	if !k.CanSign() {
		return nil, fmt.Errorf("audit key %s is a public key: serve signs with the private key (audit verify --key takes the public one)", path)
	}
	return k, nil
}
