package gateway

import (
	"bytes"
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	rtrace "runtime/trace"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/proof"
	"github.com/pdmcp/pdmcp/internal/fileerr"
	"github.com/pdmcp/pdmcp/internal/jsonb64"
	"github.com/pdmcp/pdmcp/internal/noanswer"
	"github.com/pdmcp/pdmcp/internal/safefile"
)

// maxResponseBytes bounds an answer read into memory: a decrypt of the
// largest plaintext is about 22 MiB of JSON.
const maxResponseBytes = 64 << 20

// TraceRequestRegion is the runtime/trace region of one Gateway request,
// from sending it to its answer read (pdmcp bench --trace).
const TraceRequestRegion = "gateway.request"

// TraceRouteLog is the runtime/trace log category that names the route of
// the Gateway request whose region it is logged in.
const TraceRouteLog = "gateway.route"

// maxIdleConnsPerHost is how many idle connections to the Gateway are kept
// for reuse: several times the pool's default maxCallers, each user's call
// making one request at a time.
const maxIdleConnsPerHost = 64

// serviceRenewMargin is how long before its expiry (on the Gateway's clock)
// the service session is renewed instead of used.
const serviceRenewMargin = 5 * time.Second

// ErrNoServiceCredentials is the cause when a call needs the service
// session but the client was built without the service's credentials.
var ErrNoServiceCredentials = errors.New("gateway client has no service credentials")

// Client talks to one Gateway. It is safe for concurrent use; one Client
// holds one service session, shared by every caller.
type Client struct {
	base    string // scheme://host[:port][/path], no trailing slash
	http    *http.Client
	timeout time.Duration
	log     *slog.Logger
	// tracer makes each request's span; nil when not tracing.
	tracer trace.Tracer
	// prefix is the service's principal prefix as config.json names it;
	// every minted session is checked against it.
	prefix string

	// The service's credentials; nil when the client only runs admin routes.
	cert     *x509.Certificate
	loginKey crypto.Signer
	sender   *proof.Key

	// offset is the Gateway's clock minus ours, in nanoseconds, as measured
	// from the latest answer's Date header.
	offset atomic.Int64

	// signLock lets one sign-in run at a time; a channel so that a waiter
	// can give up when its context ends.
	signLock chan struct{}

	mu  sync.Mutex
	svc *serviceSession

	// The principal and identity routes, on the service session.
	principalRoutes
}

// serviceSession is the service's own session with the Gateway.
type serviceSession struct {
	handle    string
	expiresAt time.Time
	prefix    string
	systemID  int64
	serviceID string
}

// live reports whether the session can still be used at the Gateway time now.
func (s *serviceSession) live(now time.Time) bool {
	return s != nil && now.Before(s.expiresAt.Add(-serviceRenewMargin))
}

// New checks cfg, loads the credentials it names and returns a client. It
// sends nothing: the service signs in on the first call that needs it.
func New(cfg Config) (*Client, error) {
	u, err := parseBaseURL(cfg.BaseURL, cfg.AllowHTTPLoopback)
	if err != nil {
		return nil, fmt.Errorf("gateway URL: %w", err)
	}
	c := &Client{
		base:     u.String(),
		timeout:  cfg.Timeout,
		log:      cfg.Logger,
		tracer:   cfg.Tracer,
		prefix:   cfg.Prefix,
		signLock: make(chan struct{}, 1),
	}
	c.principalRoutes = c.serviceCall
	if c.timeout < 0 {
		return nil, fmt.Errorf("gateway timeout %s is negative", cfg.Timeout)
	}
	if c.timeout == 0 {
		c.timeout = DefaultTimeout
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if err := c.loadCredentials(cfg); err != nil {
		return nil, err
	}
	if c.http, err = httpClient(cfg); err != nil {
		return nil, err
	}
	return c, nil
}

// loadCredentials takes the service's certificate, login key and sender key
// from cfg, as files or loaded, all three or none.
func (c *Client) loadCredentials(cfg Config) error {
	var err error
	if c.cert, err = fileOrLoaded("service certificate", "certificate", cfg.ServiceCertFile, cfg.ServiceCert, LoadCertificate); err != nil {
		return err
	}
	if c.loginKey, err = fileOrLoaded("service login key", "key", cfg.LoginKeyFile, cfg.LoginKey, LoadLoginKey); err != nil {
		return err
	}
	sender, err := fileOrLoaded("service sender key", "key", cfg.SenderKeyFile, cfg.SenderKey, LoadSenderKey)
	if err != nil {
		return err
	}
	have := 0
	for _, ok := range []bool{c.cert != nil, c.loginKey != nil, sender != nil} {
		if ok {
			have++
		}
	}
	switch have {
	case 0:
		return nil
	case 3:
	default:
		return errors.New("service credentials: give the certificate, the login key and the sender key together, or none of them")
	}
	if !sameKey(c.loginKey, c.cert) {
		return errors.New("service login key does not belong to the service certificate")
	}
	if sender.PublicKey.Equal(c.loginKey.Public()) {
		// The certificate's key proves who the service is; the sender key
		// binds its session. Keeping them apart is the contract's design.
		return errors.New("service sender key must differ from the login key")
	}
	if c.sender, err = proof.FromECDSA(sender); err != nil {
		return fmt.Errorf("service sender key: %w", err)
	}
	return nil
}

// fileOrLoaded gives a credential read from file by load, or loaded as
// given; both is an error. what names the credential in errors, noun its
// kind.
func fileOrLoaded[T comparable](what, noun, file string, loaded T, load func(string) (T, error)) (T, error) {
	var zero T
	switch {
	case file != "" && loaded != zero:
		return zero, fmt.Errorf("%s: give a file or a loaded %s, not both", what, noun)
	case file != "":
		v, err := load(file)
		if err != nil {
			return zero, fmt.Errorf("%s: %w", what, err)
		}
		return v, nil
	default:
		return loaded, nil
	}
}

// httpClient builds the HTTP client: cfg.HTTPClient as given, or one that
// trusts only TrustFile (or the system roots without one). Neither follows
// redirects: a redirected request would carry our proof to another URL.
func httpClient(cfg Config) (*http.Client, error) {
	var hc http.Client
	if cfg.HTTPClient != nil {
		if cfg.TrustFile != "" {
			return nil, errors.New("gateway trust: give TrustFile or HTTPClient, not both")
		}
		hc = *cfg.HTTPClient
	} else {
		tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if cfg.TrustFile != "" {
			// The only CAs trusted for the Gateway: a file group or others
			// can write could add one.
			pem, err := safefile.ReadConfig(cfg.TrustFile, 0)
			if err != nil {
				return nil, fmt.Errorf("gateway trust file: %w", err)
			}
			if err := fileerr.CheckEmpty(cfg.TrustFile, pem, "the CA certificates the Gateway is trusted by, in PEM form"); err != nil {
				return nil, fmt.Errorf("gateway trust file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("gateway trust file %s: no PEM certificates in it", cfg.TrustFile)
			}
			tlsCfg.RootCAs = pool
		}
		base, ok := http.DefaultTransport.(*http.Transport)
		if !ok {
			return nil, errors.New("http.DefaultTransport is not an *http.Transport")
		}
		tr := base.Clone()
		tr.TLSClientConfig = tlsCfg
		// The default keeps two idle connections per host: with more
		// users' calls in flight than that, each surplus connection was
		// closed when its call ended and the next call dialled and shook
		// hands again. Keep as many as calls are likely in flight.
		tr.MaxIdleConnsPerHost = maxIdleConnsPerHost
		hc.Transport = tr
	}
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &hc, nil
}

// String names the client without any of its secrets.
func (c *Client) String() string { return "gateway client for " + c.base }

// GoString is String, so that %#v prints no secret either.
func (c *Client) GoString() string { return c.String() }

// Format prints String for every verb.
func (c *Client) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, c.String()) }

// ClockOffset is the Gateway's clock minus this machine's, as measured from
// the Date header of the latest answer (zero before any).
func (c *Client) ClockOffset() time.Duration { return time.Duration(c.offset.Load()) }

// GatewayNow is this client's estimate of the Gateway's clock.
func (c *Client) GatewayNow() time.Time { return time.Now().Add(c.ClockOffset()) }

// measureClock updates the clock offset from an answer's Date header. The
// header has whole seconds, so the Gateway's time at the answer is taken as
// the middle of that second, and ours as the middle of the exchange.
func (c *Client) measureClock(date string, sent, received time.Time) {
	if date == "" {
		return
	}
	t, err := http.ParseTime(date)
	if err != nil {
		return
	}
	mid := sent.Add(received.Sub(sent) / 2)
	c.offset.Store(int64(t.Add(500 * time.Millisecond).Sub(mid)))
}

// Prefix is the service's principal prefix, once signed in ("" before).
func (c *Client) Prefix() string { return c.signedIn().prefix }

// SystemID is the service's system id, once signed in (0 before).
func (c *Client) SystemID() int64 { return c.signedIn().systemID }

// ServiceID is the service's id at the Gateway, once signed in ("" before).
func (c *Client) ServiceID() string { return c.signedIn().serviceID }

// signedIn is a copy of the service session, the zero value before the
// service has signed in.
func (c *Client) signedIn() serviceSession {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.svc == nil {
		return serviceSession{}
	}
	return *c.svc
}

// request is one operation to send.
type request struct {
	route string
	body  any
	// build makes the body per attempt from the full URL and the Gateway
	// time (the sign-in assertion); body is ignored when it is set.
	build func(url string, now time.Time) (any, error)
	out   any // decoded from a 200 answer; nil only checks it is JSON

	handle string // "Authorization: DPoP <handle>" when set
	// prove signs the request's proof; nil sends none (admin routes).
	prove func(method, url, handle string, now time.Time) (string, error)

	basic          bool // HTTP Basic with user and password
	user, password string

	relogin bool // recorded as part of a service re-sign-in

	// raw, when set, gives the body's JSON per attempt as a reader and its
	// length (the crypto routes encode their base64 while it is sent);
	// body is then ignored.
	raw func() (io.Reader, int64)
	// field, when set, names the one large base64 member of a 200 answer
	// (the crypto routes'): it is decoded as the answer is read, never
	// held as text.
	field *streamedField
}

// streamedField is a 200 answer's large base64 member, decoded while the
// answer is read. seen is false when the answer had no such member, or
// spelled its name with escapes (it is then decoded with the rest).
type streamedField struct {
	name     string
	sizeHint int
	data     []byte
	seen     bool
}

// readBody reads an answer of at most maxResponseBytes (+1, to tell a
// longer one). An answer that says its length is read into a buffer of
// exactly that size: a 22 MB crypto answer is not grown by doubling.
func readBody(resp *http.Response) ([]byte, error) {
	if n := resp.ContentLength; n > 0 && n <= maxResponseBytes {
		buf := make([]byte, n)
		if _, err := io.ReadFull(resp.Body, buf); err != nil {
			return nil, err
		}
		return buf, nil
	}
	return io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
}

// do sends r, and once more when its proof was refused as stale: the
// refusal's Date header has re-measured the clock by then.
func (c *Client) do(ctx context.Context, r *request) error {
	var payload []byte
	if r.build == nil && r.raw == nil {
		var err error
		if payload, err = json.Marshal(r.body); err != nil {
			return fmt.Errorf("encode %s request: %w", r.route, err)
		}
	}
	err := c.send(ctx, r, payload)
	if r.prove != nil && isRefusal(err, api.CodeProofStale) {
		c.log.LogAttrs(ctx, slog.LevelInfo, "gateway proof stale; retrying with the re-measured clock",
			slog.String("route", r.route), slog.Duration("clockOffset", c.ClockOffset()))
		err = c.send(ctx, r, payload)
	}
	return err
}

// send makes one HTTP exchange, records and logs it, and maps its outcome.
func (c *Client) send(ctx context.Context, r *request, payload []byte) error {
	url := c.base + r.route
	now := c.GatewayNow()
	if r.build != nil {
		body, err := r.build(url, now)
		if err != nil {
			return fmt.Errorf("build %s request: %w", r.route, err)
		}
		if payload, err = json.Marshal(body); err != nil {
			return fmt.Errorf("encode %s request: %w", r.route, err)
		}
	}
	var reqBody io.Reader = bytes.NewReader(payload)
	length := int64(len(payload))
	if r.raw != nil {
		reqBody, length = r.raw()
	}
	rctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, url, reqBody)
	if err != nil {
		return fmt.Errorf("build %s request: %w", r.route, err)
	}
	req.ContentLength = length
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if r.handle != "" {
		req.Header.Set("Authorization", "DPoP "+r.handle)
	}
	if r.prove != nil {
		p, err := r.prove(http.MethodPost, url, r.handle, now)
		if err != nil {
			return err
		}
		req.Header.Set("DPoP", p)
	}
	if r.basic {
		req.SetBasicAuth(r.user, r.password)
	}

	span := c.startSpan(ctx, r.route, req)
	start := time.Now()
	region := rtrace.StartRegion(ctx, TraceRequestRegion)
	if rtrace.IsEnabled() {
		rtrace.Log(ctx, TraceRouteLog, r.route)
	}
	resp, err := c.http.Do(req)
	// The request is sent: drop its body, which resp.Request would keep
	// alive while the answer (as large, for the crypto routes) is read.
	req.Body, req.GetBody, payload = nil, nil, nil
	var body []byte
	tooLarge := false
	var unreadable error // an answer read in full that is not the JSON promised
	if err == nil {
		if r.field != nil && resp.StatusCode == http.StatusOK {
			var res jsonb64.Result
			res, err = jsonb64.Read(resp.Body, r.field.name, r.field.sizeHint, maxResponseBytes)
			switch {
			case errors.Is(err, jsonb64.ErrTooLarge):
				err, tooLarge = nil, true
			case errors.Is(err, jsonb64.ErrFormat):
				unreadable, err = err, nil
			case err == nil:
				body = res.Rest
				r.field.data, r.field.seen = res.Data, res.Seen
			}
		} else {
			body, err = readBody(resp)
			tooLarge = len(body) > maxResponseBytes
		}
		_ = resp.Body.Close()
	}
	region.End()
	end := time.Now()

	status := 0
	var result error
	if resp != nil {
		status = resp.StatusCode
		c.measureClock(resp.Header.Get("Date"), start, end)
	}
	switch {
	case err != nil:
		result = unreachable(err, url)
	case tooLarge:
		result = badResponse(status, fmt.Errorf("answer is over %d bytes", maxResponseBytes))
	case unreadable != nil:
		result = badResponse(status, fmt.Errorf("answer is not the expected JSON: %w", unreadable))
	default:
		result = interpret(resp, body, r.out)
	}

	code := ""
	var ae *api.Error
	if errors.As(result, &ae) {
		code = ae.Code
		if code == api.CodeBadResponse {
			ae.URL = url
		}
	}
	latency := end.Sub(start)
	endSpan(span, status, code)
	if rec := recorderFrom(ctx); rec != nil {
		rec.add(Request{Route: r.route, Status: status, Code: code, Latency: latency, ServiceRelogin: r.relogin})
	}
	level := slog.LevelDebug
	switch code {
	case "":
	case api.CodeUnreachable, api.CodeBadResponse:
		level = slog.LevelWarn
	default:
		level = slog.LevelInfo
	}
	c.log.LogAttrs(ctx, level, "gateway request",
		slog.String("route", r.route), slog.Int("status", status), slog.String("code", code),
		slog.Duration("latency", latency), slog.Bool("serviceRelogin", r.relogin))
	return result
}

// interpret maps an answer: 200 decodes into out, a status of 400 or more
// is the refusal in its body, anything else is not what the contract says.
func interpret(resp *http.Response, body []byte, out any) error {
	status := resp.StatusCode
	switch {
	case status == http.StatusOK:
		if out == nil {
			if !json.Valid(body) {
				return badResponse(status, errors.New("answer is not JSON"))
			}
			return nil
		}
		if err := json.Unmarshal(body, out); err != nil {
			return badResponse(status, fmt.Errorf("answer is not the expected JSON: %w", err))
		}
		return nil
	case status >= 400:
		var eb api.ErrorBody
		if err := json.Unmarshal(body, &eb); err != nil {
			return badResponse(status, fmt.Errorf("refusal body is not JSON: %w", err))
		}
		if eb.Error.Code == "" {
			return badResponse(status, errors.New("refusal body names no code"))
		}
		e := eb.Error
		e.Status = status
		if e.Layer != api.LayerKeyServer {
			// Only the Gateway and its key server answer here; anything
			// else is the Gateway speaking.
			e.Layer = api.LayerGateway
		}
		e.RetryAfter = retryAfter(resp.Header.Get("Retry-After"), resp.Header.Get("Date"))
		return &e
	default:
		return badResponse(status, fmt.Errorf("unexpected HTTP status %d", status))
	}
}

// retryAfter reads a Retry-After header: seconds, or an HTTP date taken
// relative to the answer's own Date.
func retryAfter(v, date string) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil {
		if n < 0 {
			return 0
		}
		return time.Duration(n) * time.Second
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0
	}
	ref := time.Now()
	if d, err := http.ParseTime(date); err == nil {
		ref = d
	}
	if d := at.Sub(ref); d > 0 {
		return d
	}
	return 0
}

// unreachable is the refusal for a request to url that got no answer. The
// detail goes to the model, so it classifies the cause without naming
// hosts; the cause, in the operator's text, names url ([api.Error.Error]).
func unreachable(err error, url string) *api.Error {
	detail := "the Gateway could not be reached; try again later, and if it persists ask the operator to check gatewayUrl"
	var cause error = &noanswer.Error{Peer: "the Gateway", URL: url, Err: err}
	var certErr *tls.CertificateVerificationError
	var unknownCA x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		detail = "the Gateway did not answer in time; try again later"
	case errors.Is(err, context.Canceled):
		detail = "the request to the Gateway was cancelled"
	case errors.As(err, &certErr), errors.As(err, &unknownCA), errors.As(err, &hostErr):
		detail = "the Gateway's TLS certificate is not trusted; do not retry, ask the operator to check trustFile"
		// It answered, with a certificate not trusted: no "did not answer".
		cause = &untrustedError{url: url, err: err}
	}
	return &api.Error{Layer: api.LayerGateway, Code: api.CodeUnreachable, Detail: detail, Cause: cause, URL: url}
}

// untrustedError is a Gateway whose TLS certificate this client does not
// trust: it answered, so it is not worded as one that did not.
type untrustedError struct {
	url string
	err error
}

func (e *untrustedError) Error() string {
	return fmt.Sprintf("the Gateway at %s is not trusted: %s; check trustFile", e.url, noanswer.Reason(e.err))
}

func (e *untrustedError) Unwrap() error { return e.err }

// badResponse is the refusal for an answer this client cannot read.
func badResponse(status int, cause error) *api.Error {
	return &api.Error{Layer: api.LayerGateway, Code: api.CodeBadResponse, Status: status,
		Detail: "the Gateway's answer could not be read; do not retry, report it to the operator", Cause: cause}
}

// isRefusal reports whether err is the Gateway's refusal with code.
func isRefusal(err error, code string) bool {
	var ae *api.Error
	return errors.As(err, &ae) && ae.Code == code && ae.Layer == api.LayerGateway
}
