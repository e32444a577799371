package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/audit"
	"github.com/pdmcp/pdmcp/auth"
	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/tlspolicy"
	"github.com/pdmcp/pdmcp/server"
)

// MaxRequestBytes bounds one HTTP request body: a save's text is at most
// 64 KiB, so 1 MiB leaves room for JSON escaping and nothing else.
const MaxRequestBytes = 1 << 20

// HTTPHandler is the whole HTTPS surface: the MCP endpoint behind the
// token check, and the protected-resource metadata.
type HTTPHandler struct {
	http.Handler
	Resource string
}

// NewHTTPHandler builds the handler for srv as cfg describes. A browser
// request from any origin but the served resource's own is refused; m may
// be nil (no metrics).
func NewHTTPHandler(srv *server.Server, cfg *auth.HTTPConfig, verifier auth.TokenVerifier, a *audit.Log, m *Metrics, log *slog.Logger) *HTTPHandler {
	getServer := func(*http.Request) *mcp.Server { return srv.MCP() }
	// A call's single answer goes back as one JSON body, not an SSE
	// stream (see mayAskHost for when a session keeps the stream).
	stateful := mcp.NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{
		Logger: log, MaxRequestBodyBytes: MaxRequestBytes, SessionTimeout: SessionIdleTimeout,
		JSONResponse: !srv.MayAskHost(),
	})
	// Refused requests are written through a.Refused, which counts a
	// flood of one kind into a summary a second instead of a line (and a
	// log line) each; it reports whether this one got its own line.
	refused := func(line audit.AuthRefused) bool {
		own, err := a.Refused(line)
		if err != nil {
			log.Error("audit write failed", "event", "auth-refused", "err", err)
		}
		return own
	}
	sessions := newMCPSessionLimiter(srv.MCP(), cfg.MaxSessionsPerUser, cfg.MaxSessions, func(r *http.Request, user string) {
		// The token was good; the session it named is another user's.
		m.AuthRefused(string(auth.ClassSessionMismatch), http.StatusForbidden)
		method, path := auth.RefusedRequest(r)
		traceID, spanID := audit.Trace(r.Context())
		refused(audit.AuthRefused{Class: string(auth.ClassSessionMismatch), Reason: auth.ReasonSessionUserMismatch,
			Status: http.StatusForbidden, Caller: server.CallerDigest(user), Method: method, Path: path, TS: time.Now(),
			TraceID: traceID, SpanID: spanID})
	})
	m.MCPSessions(sessions.Len)
	tracked := sessions.wrap(stateful)
	stateless := mcp.NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{
		Logger: log, MaxRequestBodyBytes: MaxRequestBytes, Stateless: true, JSONResponse: true,
	})
	mcpHandler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Protocol 2026-07-28 has no sessions and is served statelessly;
		// earlier revisions keep their session, bound to the verified user.
		if v := r.Header.Get("Mcp-Protocol-Version"); v >= server.NewestProtocol {
			stateless.ServeHTTP(w, r)
			return
		}
		tracked.ServeHTTP(w, r)
	})
	resource := cfg.Resource
	tracer := srv.Tracer()
	if tracer != nil {
		verifier = tracingVerifier{next: verifier, tracer: tracer}
	}
	mw := auth.Middleware(verifier, auth.MiddlewareOptions{
		ResourceMetadataURL: cfg.ResourceMetadataURL(),
		Scopes:              cfg.RequiredScopes,
		Logger:              log,
		Refused: func(r auth.RefusalRecord) bool {
			m.AuthRefused(string(r.Class), r.Status)
			return refused(audit.AuthRefused{Class: string(r.Class), Reason: r.Reason, Status: r.Status,
				Method: r.Method, Path: r.Path, TS: r.TS, TraceID: r.TraceID, SpanID: r.SpanID})
		},
	})
	limits := NewUserLimiter(UserLimitsOf(cfg), refused, m, log)
	mux := http.NewServeMux()
	var endpoint http.Handler = traced(mw(markSignedIn(limits.Wrap(jsonRPCShape(mcp.SupportedProtocolVersions(), tracer != nil, mcpHandler)))))
	if tracer != nil {
		// Outside the token check, so a refused request is traced too.
		endpoint = tracedHTTP(tracer, "/mcp", endpoint)
	}
	mux.Handle("/mcp", endpoint)
	mux.Handle(cfg.MetadataPath(), auth.MetadataHandler(resource, cfg.Provider.Issuer, cfg.RequiredScopes))
	return &HTTPHandler{Resource: resource,
		Handler: boundRequests(limitsOf(cfg.Connections, limits.Limits().BodyTimeout), recoverHTTP(log, m, hygiene(newOwnAddrs(resource), mux)))}
}

// hygiene applies what the MCP transport rules ask of a local server before
// anything else, the token check included: a Host or Origin that does not
// name this server is refused (DNS rebinding, cross-site requests; see
// ownAddrs), and request bodies are bounded.
func hygiene(own ownAddrs, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !own.check(w, r) {
			return
		}
		if r.ContentLength > MaxRequestBytes {
			http.Error(w, "Request Entity Too Large", http.StatusRequestEntityTooLarge)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, MaxRequestBytes)
		next.ServeHTTP(w, r)
	})
}

// jsonRPCShape answers a POST whose body is not one JSON object with a
// JSON-RPC error (parse error, or invalid request for a batch, which the
// protocol no longer allows), instead of plain text, so a client's JSON-RPC
// layer can read it. The server goes on serving. It also applies the
// header rules of 2026-07-28 the SDK does not (trimMCPHeaders,
// protocolHeaderMismatch) and refuses a revision not among supported (the
// server's, newest first) the way 2026-07-28 asks (unsupportedVersion).
// With noteIDs (tracing) it hands the message's JSON-RPC id on to the MCP
// request's span (server.NoteRequestID); a header of that name the client
// sent is always dropped.
func jsonRPCShape(supported []string, noteIDs bool, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		delete(r.Header, server.RequestIDHeader)
		trimMCPHeaders(r.Header)
		if r.Method != http.MethodPost {
			if requested, why := unsupportedVersion(r.Header, nil, supported); why != "" {
				writeUnsupportedVersion(w, nil, requested, why, supported)
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		var body []byte
		var env *envelope
		p, parsed := parsedBodyOf(r)
		if parsed {
			// The user limiter read and decoded it; r.Body reads it again.
			body, env = p.body, p.env
		} else {
			var err error
			if body, err = io.ReadAll(r.Body); err != nil {
				var tooBig *http.MaxBytesError
				if errors.As(err, &tooBig) {
					http.Error(w, "Request Entity Too Large", http.StatusRequestEntityTooLarge)
					return
				}
				if errors.Is(err, os.ErrDeadlineExceeded) {
					// boundRequests' body deadline passed.
					http.Error(w, "Request Timeout: the body did not arrive in time", http.StatusRequestTimeout)
					return
				}
				http.Error(w, "Bad Request", http.StatusBadRequest)
				return
			}
			env, _ = parseEnvelope(body)
		}
		var id json.RawMessage
		if env != nil {
			// The common body, decoded once: the same checks, read from
			// its envelope.
			if env.Method.n == 0 && env.Result.n == 0 && env.Error.n == 0 {
				writeRPCError(w, -32600, notAMessage)
				return
			}
			id = env.ID.raw
			if msg := headerMismatch(r.Header, env); msg != "" {
				writeRPCErrorID(w, id, codeHeaderMismatch, msg)
				return
			}
			if requested, why := unsupportedVersionOf(r.Header, env.metaVersion(), true, supported); why != "" {
				writeUnsupportedVersion(w, id, requested, why, supported)
				return
			}
		} else {
			trimmed := bytes.TrimSpace(body)
			switch {
			case !json.Valid(trimmed):
				writeRPCError(w, -32700, "parse error: the body is not JSON")
				return
			case len(trimmed) > 0 && trimmed[0] == '[':
				writeRPCError(w, -32600, "invalid request: JSON-RPC batches are not accepted; send one message per request")
				return
			case len(trimmed) == 0 || trimmed[0] != '{':
				writeRPCError(w, -32600, "invalid request: the body must be one JSON-RPC message object")
				return
			}
			var isMsg bool
			isMsg, id = messageShape(trimmed)
			if !isMsg {
				writeRPCError(w, -32600, notAMessage)
				return
			}
			if id, msg := protocolHeaderMismatch(r.Header, trimmed); msg != "" {
				writeRPCErrorID(w, id, codeHeaderMismatch, msg)
				return
			}
			if requested, why := unsupportedVersion(r.Header, trimmed, supported); why != "" {
				writeUnsupportedVersion(w, messageID(trimmed), requested, why, supported)
				return
			}
		}
		if noteIDs && len(id) > 0 {
			server.NoteRawRequestID(r.Header, id)
		}
		if !parsed {
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		next.ServeHTTP(w, r)
	})
}

// messageShape reports whether the object is a request, a notification or
// a response (an object with none of method, result and error is none of
// them, and would otherwise be taken as a response and answered 202), and
// its raw id, if it has one.
func messageShape(obj []byte) (bool, json.RawMessage) {
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method json.RawMessage `json:"method"`
		Result json.RawMessage `json:"result"`
		Error  json.RawMessage `json:"error"`
	}
	if json.Unmarshal(obj, &m) != nil {
		// Not this check's to judge (a method of the wrong type, say):
		// the SDK answers it.
		return true, nil
	}
	return m.Method != nil || m.Result != nil || m.Error != nil, m.ID
}

// notAMessage answers an object that is neither a request, a notification
// nor a response.
const notAMessage = "invalid request: a JSON-RPC message has a method (a request or notification) or a result or error (a response)"

// codeHeaderMismatch is the JSON-RPC error code protocol 2026-07-28 names
// for an HTTP header that disagrees with the message it carries (SEP-2243).
const codeHeaderMismatch = -32020

// trimMCPHeaders removes the optional whitespace around the values of the
// MCP headers (Mcp-Method, Mcp-Name, Mcp-Protocol-Version, Mcp-Param-…),
// which RFC 9110 says is not part of a field's value. HTTP/1.1 parsing
// already drops it; HTTP/2 hands values over as sent, and without this a
// value such as "  tools/list " would not match its body.
func trimMCPHeaders(h http.Header) {
	for k, vs := range h {
		if !strings.HasPrefix(k, "Mcp-") {
			continue
		}
		for i, v := range vs {
			vs[i] = strings.Trim(v, " \t")
		}
	}
}

// protocolHeaderMismatch checks a request that names its protocol revision
// in _meta (2026-07-28 on) against its Mcp-Protocol-Version header: the
// header must be there and say the same. Otherwise it returns the message's
// id and why, to be answered with codeHeaderMismatch. Without this check a
// mismatch would be routed by the header alone and answered as an
// unsupported revision.
func protocolHeaderMismatch(h http.Header, msg []byte) (json.RawMessage, string) {
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			Meta map[string]json.RawMessage `json:"_meta"`
		} `json:"params"`
	}
	if json.Unmarshal(msg, &m) != nil || m.Method == "" {
		return nil, "" // the SDK answers a malformed message
	}
	raw, ok := m.Params.Meta[metaProtocolVersion]
	var body string
	if !ok || json.Unmarshal(raw, &body) != nil {
		return nil, ""
	}
	if why := versionMismatch(h, body); why != "" {
		return m.ID, why
	}
	return nil, ""
}

// headerMismatch is protocolHeaderMismatch read from an envelope.
func headerMismatch(h http.Header, env *envelope) string {
	if m, ok := env.method(); !ok || m == "" {
		return ""
	}
	return versionMismatch(h, env.metaVersion())
}

// versionMismatch is why a message naming protocol body in its _meta (""
// for none) has the wrong Mcp-Protocol-Version header, or "".
func versionMismatch(h http.Header, body string) string {
	if body == "" {
		return ""
	}
	switch header := h.Get("Mcp-Protocol-Version"); {
	case header == "":
		return fmt.Sprintf("header mismatch: the message names protocol %q in _meta but has no Mcp-Protocol-Version header; send the header with the same value", body)
	case header != body:
		return fmt.Sprintf("header mismatch: Mcp-Protocol-Version header %q does not match the message's _meta protocol %q", header, body)
	}
	return ""
}

// metaProtocolVersion is the _meta key a 2026-07-28 request names its
// revision under.
const metaProtocolVersion = "io.modelcontextprotocol/protocolVersion"

func writeRPCError(w http.ResponseWriter, code int, msg string) {
	writeRPCErrorID(w, nil, code, msg)
}

// writeRPCErrorID answers 400 with a JSON-RPC error for the message with
// the given id (null when nil: the message's id could not be read).
func writeRPCErrorID(w http.ResponseWriter, id json.RawMessage, code int, msg string) {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	_ = json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": id,
		"error": map[string]any{"code": code, "message": msg}})
}

func runHTTP(ctx context.Context, o Options) error {
	cfg, err := auth.LoadHTTPConfig(o.HTTPConfigPath)
	if err != nil {
		return err
	}
	if err := auth.CheckServerCertificate(cfg.TLS.Certificate); err != nil {
		return err
	}
	pair, err := cfg.KeyPair()
	if err != nil {
		return err
	}
	d, err := open(ctx, &o, true, cfg.Tracing)
	if err != nil {
		return err
	}
	defer d.close()
	provider, err := cfg.NewProvider()
	if err != nil {
		return err
	}
	d.provider = provider
	probeProvider(ctx, provider, o.Logger)
	verifier, err := cfg.NewVerifier(provider, o.Now)
	if err != nil {
		return err
	}
	// The exchange ahead of need and the pool's evictions run on
	// goroutines of their own; a panic there is recovered where it
	// happened and reported here. metrics is set before anything is
	// served, so before any of them runs.
	var metrics *Metrics
	onPanic := func(what string) func(any) {
		return func(v any) { reportBackgroundPanic(o.Logger, metrics, what, v) }
	}
	ex, err := cfg.NewExchanger(provider, onPanic("the token exchange ahead of need"), o.Now)
	if err != nil {
		return err
	}
	pool, err := gateway.NewPool(gateway.PoolConfig{Minter: d.client, Objects: grant.Keys(d.grant, d.manifest),
		MaxCallers: cfg.MaxCallers, NotAfter: d.grant.NotAfter, Now: o.Now, Logger: o.Logger,
		OnPanic: onPanic("a Gateway session's revoke")})
	if err != nil {
		return err
	}
	sessions := server.NewPooledSessions(pool, ex)
	srv, metrics, stop, err := d.server(ctx, &o, sessions, pool.Len, "http")
	if err != nil {
		return err
	}
	defer stop()
	h := NewHTTPHandler(srv, cfg, verifier, d.audit, metrics, o.Logger)
	ln := o.Listener
	if ln == nil {
		if ln, err = net.Listen("tcp", cfg.ListenAddr()); err != nil {
			return fmt.Errorf("listen on %s: %w", cfg.ListenAddr(), err)
		}
	}
	conns := cfg.Connections
	tracker := newConnTracker(conns.Max-conns.SignedIn, conns.SignedIn, conns.SignedInPerUser)
	metrics.Connections(tracker)
	ln = tracker.listener(ln)
	// The header timeout bounds the TLS handshake too; the body and the
	// answer are bounded per request (boundRequests), so that an event
	// stream is not cut off by a whole-connection WriteTimeout.
	hs := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: conns.HeaderTimeout(),
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    MaxHeaderBytes,
		TLSConfig:         tlspolicy.Server(pair),
		ConnContext:       tracker.connContext,
		ErrorLog:          newHTTPErrorLog(o.Logger, time.Now),
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.ServeTLS(ln, "", "") }()
	o.Logger.Info("serving Streamable HTTP over TLS", "url", h.Resource, "grant", d.grant.ID,
		"maxCallers", cfg.MaxCallers, "maxConnections", conns.Max, "signedInConnections", conns.SignedIn, "notAfter", d.grant.NotAfter.UTC().Format(time.RFC3339))
	if o.Ready != nil {
		o.Ready(h.Resource)
	}
	select {
	case err := <-errc:
		d.stopped(&o, "listener-stopped")
		if !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	case <-ctx.Done():
	}
	d.stopped(&o, "signal")
	shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = hs.Shutdown(shutdown)
	o.Logger.Info("stopped; revoking every caller's Gateway session")
	return nil
}
