// Package reference is a reference Tricryption REST Gateway and key server,
// served as one http.Handler. It honours the contract in gateway/api, every
// check in the contract's order, strictly enough that a client test passing
// against it means something: unknown JSON fields, wrong proofs, stale clocks
// and over-wide scopes are refused as the contract says.
//
// It is for tests and for `pdmcp dev`, not for production: keys are kept in
// plain form in its SQLite file (mode 0600), sessions and the proof replay
// cache live in memory, and a restart ends every session while services,
// principals, keys, ACL entries, provider bindings and the key server's
// audit survive.
//
// Tests observe it through Counts, KeyServerAudit and SetFaults; the same
// controls are served under /api/v1/admin/test/ (admin Basic credentials) for
// tests that run it as another process.
package reference

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/internal/telemetry"
)

// Config configures a reference Gateway.
type Config struct {
	// DBPath is the SQLite file; it is created (mode 0600) when missing.
	DBPath string
	// AdminUser and AdminPassword are the HTTP Basic credentials of the
	// admin routes. Both are required.
	AdminUser     string
	AdminPassword string
	// Now is the Gateway's clock; nil means time.Now. Fault injection's
	// ClockSkew is added to it.
	Now func() time.Time
	// Logger receives one line per request (route, status, code) and
	// never a handle, proof, token or key. nil discards.
	Logger *slog.Logger
	// ServiceSessionTTL is how long a service session lives; 0 means 30
	// minutes.
	ServiceSessionTTL time.Duration
	// AllowHTTPLoopback accepts plain-HTTP requests whose connection comes
	// from a loopback address. Otherwise plain HTTP is refused 400.
	AllowHTTPLoopback bool
	// IdPHTTPTimeout bounds each fetch of a provider's discovery document
	// or JWKS; 0 means 10 seconds.
	IdPHTTPTimeout time.Duration
	// IdPRetryAfter is the Retry-After of an IDP_UNAVAILABLE answered
	// because the provider could not be reached; 0 means 2 seconds.
	IdPRetryAfter time.Duration
}

// Defaults of Config's zero values.
const (
	DefaultServiceSessionTTL = 30 * time.Minute
	DefaultIdPHTTPTimeout    = 10 * time.Second
	DefaultIdPRetryAfter     = 2 * time.Second
)

// Body limits: the crypto routes carry base64 of up to MaxDataBytes plus a
// margin, so that one byte over the limit is refused by the size check with
// a clear answer rather than by the reader.
const (
	smallBodyLimit  = 1 << 20
	cryptoBodyLimit = (api.MaxDataBytes+16+64)/3*4 + 4 + 64<<10
)

// Gateway is a reference Gateway and key server. It is safe for
// concurrent use.
type Gateway struct {
	cfg       Config
	log       *slog.Logger
	store     *store
	sessions  *sessionTable
	replay    *replayCache
	faults    *faultState
	counts    *counter
	providers *providerCache
	routes    map[string]route
}

// Open opens (or creates) the Gateway's database and returns the Gateway.
func Open(ctx context.Context, cfg Config) (*Gateway, error) {
	if cfg.AdminUser == "" || cfg.AdminPassword == "" {
		return nil, errors.New("reference gateway: AdminUser and AdminPassword are required")
	}
	if cfg.ServiceSessionTTL <= 0 {
		cfg.ServiceSessionTTL = DefaultServiceSessionTTL
	}
	if cfg.IdPHTTPTimeout <= 0 {
		cfg.IdPHTTPTimeout = DefaultIdPHTTPTimeout
	}
	if cfg.IdPRetryAfter <= 0 {
		cfg.IdPRetryAfter = DefaultIdPRetryAfter
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	st, err := openStore(ctx, cfg.DBPath)
	if err != nil {
		return nil, err
	}
	g := &Gateway{
		cfg:      cfg,
		log:      log,
		store:    st,
		sessions: newSessionTable(),
		replay:   newReplayCache(),
		faults:   newFaultState(),
		counts:   newCounter(),
	}
	// The provider keys' age is read on the Gateway's clock, so a test that
	// moves it by hand also ages the keys (and a withdrawn key is dropped).
	g.providers = newProviderCache(cfg.IdPHTTPTimeout, g.now)
	g.routes = g.routeTable()
	return g, nil
}

// Close closes the database and lets go of requests held by an injected
// Delay. In-memory sessions are forgotten.
func (g *Gateway) Close() error {
	g.faults.close()
	return g.store.close()
}

// KeyServerAudit is the key server's own audit, oldest first: one row per
// decision it made.
func (g *Gateway) KeyServerAudit(ctx context.Context) ([]AuditRow, error) {
	return g.store.audit(ctx)
}

// now is the Gateway's clock: the configured clock plus the injected skew.
func (g *Gateway) now() time.Time {
	base := time.Now
	if g.cfg.Now != nil {
		base = g.cfg.Now
	}
	return base().Add(g.faults.clockSkew())
}

// authKind is how a route's caller proves who it is.
type authKind int

const (
	// authLogin: the service sign-in checks its own assertion and proof.
	authLogin authKind = iota
	authService
	authScoped
	authAnySession
	authAdmin
	authAdminOrService
)

// route is one operation.
type route struct {
	auth  authKind
	limit int64
	// control marks the test-control routes: they are not counted and
	// faults do not touch them.
	control bool
	// emptyOK lets the body be empty (routes whose request has no field).
	emptyOK bool
	handle  func(ctx context.Context, c *call) (any, error)
}

func (g *Gateway) routeTable() map[string]route {
	return map[string]route{
		api.RouteServiceLogin: {auth: authLogin, limit: smallBodyLimit, handle: g.serviceLogin},
		api.RouteScoped:       {auth: authService, limit: smallBodyLimit, handle: g.mintScoped},
		api.RouteWiden:        {auth: authScoped, limit: smallBodyLimit, handle: g.widen},
		api.RouteRevoke:       {auth: authAnySession, limit: smallBodyLimit, emptyOK: true, handle: g.revoke},

		api.RouteEncrypt: {auth: authScoped, limit: cryptoBodyLimit, handle: g.encrypt},
		api.RouteDecrypt: {auth: authScoped, limit: cryptoBodyLimit, handle: g.decrypt},

		api.RouteACLGet:    {auth: authScoped, limit: smallBodyLimit, handle: g.aclGet},
		api.RouteACLGrant:  {auth: authScoped, limit: smallBodyLimit, handle: g.aclGrant},
		api.RouteACLUpdate: {auth: authScoped, limit: smallBodyLimit, handle: g.aclUpdate},
		api.RouteACLRevoke: {auth: authScoped, limit: smallBodyLimit, handle: g.aclRevoke},
		api.RouteKeyExpire: {auth: authScoped, limit: smallBodyLimit, handle: g.keyExpire},
		api.RouteKeyRemove: {auth: authScoped, limit: smallBodyLimit, handle: g.keyRemove},

		api.RouteAdminRegisterService: {auth: authAdmin, limit: smallBodyLimit, handle: g.registerService},
		api.RouteAdminCreatePrincipal: {auth: authAdminOrService, limit: smallBodyLimit, handle: g.createPrincipal},
		api.RouteAdminDeletePrincipal: {auth: authAdminOrService, limit: smallBodyLimit, handle: g.deletePrincipal},
		api.RouteAdminGetPrincipal:    {auth: authAdminOrService, limit: smallBodyLimit, handle: g.getPrincipal},
		api.RouteAdminBindProvider:    {auth: authAdmin, limit: smallBodyLimit, handle: g.bindProvider},
		api.RouteAdminMapIdentity:     {auth: authAdminOrService, limit: smallBodyLimit, handle: g.mapIdentity},
		api.RouteAdminUnmapIdentity:   {auth: authAdminOrService, limit: smallBodyLimit, handle: g.unmapIdentity},
		api.RouteAdminRevokeSessions:  {auth: authAdmin, limit: smallBodyLimit, emptyOK: true, handle: g.revokeSessions},

		api.RouteAdminTestFaults:              {auth: authAdmin, limit: smallBodyLimit, control: true, emptyOK: true, handle: g.controlFaults},
		api.RouteAdminTestCounts:              {auth: authAdmin, limit: smallBodyLimit, control: true, emptyOK: true, handle: g.controlCounts},
		api.RouteAdminTestDropServiceSessions: {auth: authAdmin, limit: smallBodyLimit, control: true, emptyOK: true, handle: g.controlDrop},
	}
}

// call is one request on its way through the checks.
type call struct {
	r   *http.Request
	w   http.ResponseWriter
	rt  route
	now time.Time
	// service is the caller's service session (service routes, and admin
	// routes called with a service session).
	service *serviceSession
	// scoped is the caller's scoped session (scoped routes).
	scoped *scopedSession
	// admin is set when the caller presented the admin's credentials.
	admin bool
}

// errAnswerDropped tells ServeHTTP that the handler already dropped the
// connection on purpose (fault injection) and nothing is to be written.
var errAnswerDropped = errors.New("answer dropped by fault injection")

// ServeHTTP answers one request: counted, then faults, then transport,
// route, authentication and the route's own checks.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	rt, known := g.routes[path]
	if !rt.control {
		g.counts.add(path)
		if err := g.faults.wait(r.Context(), path); err != nil {
			return // the client went away while we waited
		}
		if status, fail := g.faults.takeFailure(path); fail {
			g.refuse(w, r, gatewayError(api.CodeInjectedFault, status,
				"the Gateway failed this request on purpose (fault injection); retry if the operation is safe to repeat"))
			return
		}
		if g.faults.takeSessionGone(path) {
			g.refuse(w, r, gatewayError(api.CodeSessionMissing, http.StatusUnauthorized,
				"the handle names no session of this Gateway; mint a scoped session first"))
			return
		}
	}
	if e := g.checkTransport(r); e != nil {
		g.refuse(w, r, e)
		return
	}
	if !known {
		g.refuse(w, r, gatewayError(api.CodeNotFound, http.StatusNotFound,
			"there is no such route on this Gateway; check the path against the contract"))
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		g.refuse(w, r, gatewayError(api.CodeBadRequest, http.StatusMethodNotAllowed,
			"every Gateway operation is a POST; send the request as a POST"))
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, rt.limit)
	c := &call{r: r, w: w, rt: rt, now: g.now()}
	if e := g.authenticate(c); e != nil {
		g.refuse(w, r, e)
		return
	}
	if c.scoped != nil && (path == api.RouteEncrypt || path == api.RouteDecrypt) {
		if err := g.faults.waitActingAs(r.Context(), c.scoped.principal); err != nil {
			return
		}
	}
	// The caller's W3C trace context, if it sent one, rides the context to
	// the key server's audit row (AuditRow.TraceID). A malformed header is
	// ignored, as the W3C rules say.
	ctx := propagation.TraceContext{}.Extract(r.Context(), telemetry.HeaderCarrier(r.Header))
	res, err := rt.handle(ctx, c)
	switch {
	case errors.Is(err, errAnswerDropped):
		g.log.Info("answer dropped by fault injection", "route", path)
	case err != nil:
		var ae *api.Error
		if !errors.As(err, &ae) {
			g.log.Error("internal error", "route", path, "err", err)
			ae = gatewayError(api.CodeInternal, http.StatusInternalServerError,
				"the reference Gateway failed internally; see its log, then retry")
		}
		g.refuse(w, r, ae)
	default:
		if wt, ok := res.(writerTo); ok {
			g.writeStream(w, wt)
		} else {
			g.writeJSON(w, http.StatusOK, res)
		}
		g.log.Debug("answered", "route", path, "status", http.StatusOK)
	}
}

// checkTransport refuses plain HTTP unless it is allowed and comes from a
// loopback address.
func (g *Gateway) checkTransport(r *http.Request) *api.Error {
	if r.TLS != nil {
		return nil
	}
	if g.cfg.AllowHTTPLoopback && isLoopback(r.RemoteAddr) {
		return nil
	}
	return gatewayError(api.CodeBadRequest, http.StatusBadRequest,
		"this Gateway answers HTTPS only; call its https:// address")
}

func isLoopback(remoteAddr string) bool {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// requestURL is the URL the client called, as the proof's htu names it.
func requestURL(r *http.Request) string {
	scheme := "https"
	if r.TLS == nil {
		scheme = "http"
	}
	return scheme + "://" + r.Host + r.URL.Path
}

// authenticate runs the route's session (or admin) and proof checks.
func (g *Gateway) authenticate(c *call) *api.Error {
	switch c.rt.auth {
	case authLogin:
		return nil
	case authService:
		return g.authService(c)
	case authScoped:
		return g.authScoped(c)
	case authAnySession:
		return g.authAnySession(c)
	case authAdmin:
		return g.authAdmin(c)
	case authAdminOrService:
		if scheme, _ := splitAuthorization(c.r); strings.EqualFold(scheme, "DPoP") {
			return g.authService(c)
		}
		return g.authAdmin(c)
	}
	return gatewayError(api.CodeInternal, http.StatusInternalServerError, "the route has no authentication; report this")
}

// splitAuthorization returns the scheme and credentials of the single
// Authorization header ("" when it is absent or repeated).
func splitAuthorization(r *http.Request) (scheme, rest string) {
	vals := r.Header.Values("Authorization")
	if len(vals) != 1 {
		return "", ""
	}
	scheme, rest, _ = strings.Cut(strings.TrimSpace(vals[0]), " ")
	return scheme, strings.TrimSpace(rest)
}

// sessionHandle is the handle of "Authorization: DPoP <handle>".
func sessionHandle(r *http.Request) (string, *api.Error) {
	scheme, handle := splitAuthorization(r)
	if !strings.EqualFold(scheme, "DPoP") || handle == "" {
		return "", gatewayError(api.CodeSessionMissing, http.StatusUnauthorized,
			"send one Authorization: DPoP header with a session handle; sign in or mint a session first")
	}
	return handle, nil
}

func (g *Gateway) authService(c *call) *api.Error {
	handle, e := sessionHandle(c.r)
	if e != nil {
		return e
	}
	s, e := g.sessions.lookupService(handle, c.now)
	if e != nil {
		return e
	}
	if e := g.checkProof(c.r, handle, s.jkt, c.now); e != nil {
		return e
	}
	c.service = s
	return nil
}

func (g *Gateway) authScoped(c *call) *api.Error {
	handle, e := sessionHandle(c.r)
	if e != nil {
		return e
	}
	s, e := g.sessions.lookupScoped(handle, c.now)
	if e != nil {
		return e
	}
	if e := g.checkProof(c.r, handle, s.jkt, c.now); e != nil {
		return e
	}
	c.scoped = s
	return nil
}

func (g *Gateway) authAnySession(c *call) *api.Error {
	handle, e := sessionHandle(c.r)
	if e != nil {
		return e
	}
	if g.sessions.isScopedHandle(handle) {
		return g.authScoped(c)
	}
	if g.sessions.isServiceHandle(handle) {
		return g.authService(c)
	}
	return gatewayError(api.CodeSessionMissing, http.StatusUnauthorized,
		"the handle names no session of this Gateway; sign in or mint a session first")
}

func (g *Gateway) authAdmin(c *call) *api.Error {
	user, pass, ok := c.r.BasicAuth()
	if ok && equalSecret(user, g.cfg.AdminUser) && equalSecret(pass, g.cfg.AdminPassword) {
		c.admin = true
		return nil
	}
	c.w.Header().Set("WWW-Authenticate", `Basic realm="pdmcp reference gateway admin"`)
	return gatewayError(api.CodeAdminAuthRequired, http.StatusUnauthorized,
		"this route needs the Gateway admin's HTTP Basic credentials; send them or use the operator's bootstrap")
}

// equalSecret compares in time independent of where the strings differ.
func equalSecret(a, b string) bool {
	ha, hb := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(ha[:], hb[:]) == 1
}

// decode reads the request's JSON body into v, refusing unknown fields,
// trailing data and bodies over the route's limit. An empty body is
// refused, except on routes whose request has no field.
func (c *call) decode(v any) error {
	body := bufio.NewReader(c.r.Body)
	first, err := firstByte(body)
	if errors.Is(err, io.EOF) {
		if c.rt.emptyOK {
			return nil
		}
		return gatewayError(api.CodeBadRequest, http.StatusBadRequest,
			"the request body is empty; send the JSON object this route takes")
	}
	if err == nil && first != '{' {
		return gatewayError(api.CodeBadRequest, http.StatusBadRequest,
			"the request body is not a JSON object; send the JSON object this route takes")
	}
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err == nil {
		err = dec.Decode(v)
	}
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return gatewayError(api.CodeBadRequest, http.StatusBadRequest,
			fmt.Sprintf("the request body is over this route's limit of %d bytes; send less", tooBig.Limit))
	}
	if err != nil {
		return gatewayError(api.CodeBadRequest, http.StatusBadRequest,
			"the request body is not the JSON this route takes ("+jsonProblem(err)+"); fix the request")
	}
	if dec.More() {
		return gatewayError(api.CodeBadRequest, http.StatusBadRequest,
			"the request body holds more than one JSON value; send exactly one object")
	}
	return nil
}

// firstByte peeks at the first byte that is not JSON white space.
func firstByte(r *bufio.Reader) (byte, error) {
	for {
		b, err := r.Peek(1)
		if err != nil {
			return 0, err
		}
		switch b[0] {
		case ' ', '\t', '\r', '\n':
			if _, err := r.ReadByte(); err != nil {
				return 0, err
			}
		default:
			return b[0], nil
		}
	}
}

// jsonProblem says what was wrong with a body without quoting its values.
func jsonProblem(err error) string {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		return "field " + typeErr.Field + " has the wrong type"
	case errors.As(err, &syntaxErr):
		return "malformed JSON at byte " + strconv.FormatInt(syntaxErr.Offset, 10)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return "unknown field " + strings.TrimPrefix(err.Error(), "json: unknown field ")
	default:
		return "malformed JSON"
	}
}

// Answers.

func gatewayError(code string, status int, detail string) *api.Error {
	return &api.Error{Layer: api.LayerGateway, Code: code, Status: status, Detail: detail}
}

func keyServerError(code string, status int, detail string) *api.Error {
	return &api.Error{Layer: api.LayerKeyServer, Code: code, Status: status, Detail: detail}
}

func (g *Gateway) setHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Date", g.now().UTC().Format(http.TimeFormat))
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
}

func (g *Gateway) writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		g.log.Error("encode answer", "err", err)
		status = http.StatusInternalServerError
		body = []byte(`{"error":{"layer":"gateway","code":"INTERNAL","status":500,"detail":"the reference Gateway could not encode its answer; report this"}}`)
	}
	body = append(body, '\n')
	g.setHeaders(w)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	if _, err := w.Write(body); err != nil {
		g.log.Debug("write answer", "err", err)
	}
}

// writerTo is an answer that writes itself (large crypto answers, streamed
// rather than built in memory twice).
type writerTo interface {
	size() int64
	io.WriterTo
}

func (g *Gateway) writeStream(w http.ResponseWriter, v writerTo) {
	g.setHeaders(w)
	w.Header().Set("Content-Length", strconv.FormatInt(v.size(), 10))
	w.WriteHeader(http.StatusOK)
	if _, err := v.WriteTo(w); err != nil {
		g.log.Debug("write answer", "err", err)
	}
}

func (g *Gateway) refuse(w http.ResponseWriter, r *http.Request, e *api.Error) {
	if e.Code == api.CodeIdPUnavailable {
		secs := int64((e.RetryAfter + time.Second - 1) / time.Second)
		if secs < 1 {
			secs = 1
		}
		w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	}
	g.log.Info("refused", "route", r.URL.Path, "status", e.Status, "layer", e.Layer, "code", e.Code)
	g.writeJSON(w, e.Status, api.ErrorBody{Error: *e})
}

// Random identifiers.

func randomBytes(n int) []byte {
	b := make([]byte, n)
	// crypto/rand.Read never returns an error (Go 1.24+); it crashes the
	// program instead if the system's source fails.
	_, _ = rand.Read(b)
	return b
}

func randomHandle(kind string) string {
	return kind + base64.RawURLEncoding.EncodeToString(randomBytes(32))
}

func randomTTag() string { return base64.StdEncoding.EncodeToString(randomBytes(24)) }

func randomLink() string { return hex.EncodeToString(randomBytes(16)) }
