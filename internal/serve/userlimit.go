package serve

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pdmcp/pdmcp/audit"
	"github.com/pdmcp/pdmcp/auth"
	"github.com/pdmcp/pdmcp/server"
)

// Per-user limits of the HTTP transport, when mcp-http.json does not set
// them. They apply after the token check, on every protocol revision, so
// that one signed-in user cannot hold what the others need: a host runs a
// handful of calls at once and one listen stream per client, so the
// per-user numbers leave it room many times over, and the totals bound
// what the server holds for everyone (with the 1 MiB body bound, at most
// 64 MiB of request bodies).
const (
	// DefaultMaxRequestsPerUser and DefaultMaxRequests bound the requests
	// in flight (a listen stream and a session's GET stream excepted: they
	// have their own bounds).
	DefaultMaxRequestsPerUser = 16
	DefaultMaxRequests        = 256
	// DefaultMaxBodyBytesPerUser and DefaultMaxBodyBytes bound the request
	// body bytes being read or held by requests in flight. A body counts at
	// its Content-Length, or at MaxRequestBytes when it has none, until it
	// has been read; then at its size.
	DefaultMaxBodyBytesPerUser = 8 << 20
	DefaultMaxBodyBytes        = 64 << 20
	// DefaultBodyTimeout is how long a request's body may take to arrive
	// after the token check: a body from a host on this machine takes
	// milliseconds; one that has not arrived by then is cut off (408) and
	// its connection closed.
	DefaultBodyTimeout = 10 * time.Second
	// DefaultMaxListenStreamsPerUser and DefaultMaxListenStreams bound the
	// 2026-07-28 subscriptions/listen streams, as maxSessionsPerUser and
	// maxSessions bound the sessions (and their streams) of earlier
	// revisions.
	DefaultMaxListenStreamsPerUser = 8
	DefaultMaxListenStreams        = 256
)

// Retry-After values, in seconds, of the refusals: a request slot or body
// budget frees as soon as a call ends; a listen stream, or room on a full
// server, takes longer.
const (
	retryRequest = 1
	retryStream  = 5
	retryServer  = 5
)

// UserLimits are the per-user limits; a zero field takes its default.
type UserLimits struct {
	MaxRequestsPerUser, MaxRequests           int
	MaxBodyBytesPerUser, MaxBodyBytes         int64
	BodyTimeout                               time.Duration
	MaxListenStreamsPerUser, MaxListenStreams int
}

// UserLimitsOf takes the limits from mcp-http.json.
func UserLimitsOf(c *auth.HTTPConfig) UserLimits {
	return UserLimits{
		MaxRequestsPerUser: c.MaxRequestsPerUser, MaxRequests: c.MaxRequests,
		MaxBodyBytesPerUser: c.MaxBodyBytesPerUser, MaxBodyBytes: c.MaxBodyBytes,
		BodyTimeout:             time.Duration(c.BodyTimeoutSeconds) * time.Second,
		MaxListenStreamsPerUser: c.MaxListenStreamsPerUser, MaxListenStreams: c.MaxListenStreams,
	}
}

// withDefaults fills in the zero fields. A total left to its default is
// raised to the per-user value when that is set higher, so that a setting
// is never silently undercut.
func (l UserLimits) withDefaults() UserLimits {
	pick := func(v, def int64) int64 {
		if v > 0 {
			return v
		}
		return def
	}
	total := func(v, perUser, def int64) int64 {
		if v > 0 {
			return v
		}
		return max(def, perUser)
	}
	l.MaxRequestsPerUser = int(pick(int64(l.MaxRequestsPerUser), DefaultMaxRequestsPerUser))
	l.MaxRequests = int(total(int64(l.MaxRequests), int64(l.MaxRequestsPerUser), DefaultMaxRequests))
	l.MaxBodyBytesPerUser = pick(l.MaxBodyBytesPerUser, DefaultMaxBodyBytesPerUser)
	l.MaxBodyBytes = total(l.MaxBodyBytes, l.MaxBodyBytesPerUser, DefaultMaxBodyBytes)
	l.BodyTimeout = time.Duration(pick(int64(l.BodyTimeout), int64(DefaultBodyTimeout)))
	l.MaxListenStreamsPerUser = int(pick(int64(l.MaxListenStreamsPerUser), DefaultMaxListenStreamsPerUser))
	l.MaxListenStreams = int(total(int64(l.MaxListenStreams), int64(l.MaxListenStreamsPerUser), DefaultMaxListenStreams))
	return l
}

// The audit classes and reasons of the refusals (also the metrics' class
// label). The class names the limit; the reason says whether it was the
// user's own (429) or the server's (503).
const (
	ClassTooManyRequests = "too-many-requests"
	ClassTooManyBodies   = "too-many-bodies"
	ClassTooManyStreams  = "too-many-streams"
	ClassBodyTimeout     = "body-timeout"

	ReasonUserRequests   = "USER_REQUEST_LIMIT"
	ReasonServerRequests = "SERVER_REQUEST_LIMIT"
	ReasonUserBodies     = "USER_BODY_LIMIT"
	ReasonServerBodies   = "SERVER_BODY_LIMIT"
	ReasonUserStreams    = "USER_STREAM_LIMIT"
	ReasonServerStreams  = "SERVER_STREAM_LIMIT"
	ReasonBodyTimeout    = "BODY_TIMEOUT"
)

// codeLimited is the JSON-RPC error code of a refusal for a limit: the
// protocol names none, and -32000 is the start of the implementation's
// own range. The HTTP status (429, 503 or 408) and Retry-After are what a
// client acts on.
const codeLimited = -32000

// methodListen is the 2026-07-28 method whose answer is a stream open as
// long as the host runs.
const methodListen = "subscriptions/listen"

// userLoad is what one user holds.
type userLoad struct {
	requests  int
	bodyBytes int64
	listens   int
}

func (u *userLoad) zero() bool { return u.requests == 0 && u.bodyBytes == 0 && u.listens == 0 }

// UserLimiter holds each verified user, and everyone, within UserLimits:
// requests in flight, request body bytes, listen streams; and gives a body
// UserLimits.BodyTimeout to arrive. It stands after the token check and
// reads the body itself (under the budget and the deadline), so the
// handlers behind it get a body already in memory. Refusals answer 429
// (the user's limit) or 503 (the server's) with Retry-After, or 408 for a
// body that did not arrive in time. Each refusal goes to the audit through
// the record function (audit.Log.Refused: a burst is one line, the rest
// of it counted in a summary) and gets a log line when it got its own
// audit line.
//
// It keeps nothing per user once the user holds nothing.
type UserLimiter struct {
	lim    UserLimits
	record func(audit.AuthRefused) (own bool)
	m      *Metrics
	log    *slog.Logger

	mu    sync.Mutex
	users map[string]userLoad // held as values: no allocation per request
	all   userLoad
}

// NewUserLimiter makes a limiter. record writes a refusal's audit line
// and reports whether it got a line of its own (audit.Log.Refused); record,
// m and log may be nil (no audit, no metrics, no log).
func NewUserLimiter(lim UserLimits, record func(audit.AuthRefused) (own bool), m *Metrics, log *slog.Logger) *UserLimiter {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l := &UserLimiter{lim: lim.withDefaults(), record: record, m: m, log: log, users: map[string]userLoad{}}
	m.userLimits(l)
	return l
}

// Limits are the limits in force, defaults filled in.
func (l *UserLimiter) Limits() UserLimits { return l.lim }

// UserLoad is what the limiter counts at one moment.
type UserLoad struct {
	Requests  int   // requests in flight
	BodyBytes int64 // request body bytes reserved or held
	Listens   int   // listen streams open
	Users     int   // users holding anything
}

// Load is what everyone holds now.
func (l *UserLimiter) Load() UserLoad {
	l.mu.Lock()
	defer l.mu.Unlock()
	return UserLoad{Requests: l.all.requests, BodyBytes: l.all.bodyBytes, Listens: l.all.listens, Users: len(l.users)}
}

// refusal is why a request was refused, or the zero value.
type refusal struct {
	class, reason string
	status, retry int
}

func (rf refusal) refused() bool { return rf.status != 0 }

// take adds d to user's load (and everyone's) when that stays within the
// limits, or returns the refusal. The user's own limit is checked first:
// a user over it is told so (429) even when the server is full too.
func (l *UserLimiter) take(user string, d userLoad) refusal {
	l.mu.Lock()
	defer l.mu.Unlock()
	u := l.users[user]
	switch {
	case d.requests > 0 && u.requests+d.requests > l.lim.MaxRequestsPerUser:
		return refusal{ClassTooManyRequests, ReasonUserRequests, http.StatusTooManyRequests, retryRequest}
	case d.requests > 0 && l.all.requests+d.requests > l.lim.MaxRequests:
		return refusal{ClassTooManyRequests, ReasonServerRequests, http.StatusServiceUnavailable, retryServer}
	case d.bodyBytes > 0 && u.bodyBytes+d.bodyBytes > l.lim.MaxBodyBytesPerUser:
		return refusal{ClassTooManyBodies, ReasonUserBodies, http.StatusTooManyRequests, retryRequest}
	case d.bodyBytes > 0 && l.all.bodyBytes+d.bodyBytes > l.lim.MaxBodyBytes:
		return refusal{ClassTooManyBodies, ReasonServerBodies, http.StatusServiceUnavailable, retryServer}
	case d.listens > 0 && u.listens+d.listens > l.lim.MaxListenStreamsPerUser:
		return refusal{ClassTooManyStreams, ReasonUserStreams, http.StatusTooManyRequests, retryStream}
	case d.listens > 0 && l.all.listens+d.listens > l.lim.MaxListenStreams:
		return refusal{ClassTooManyStreams, ReasonServerStreams, http.StatusServiceUnavailable, retryServer}
	}
	l.addLocked(user, u, d)
	return refusal{}
}

// give takes d off user's load. It needs no check: it only lowers what is
// held (a reservation shrunk to what the body used, a request ended).
func (l *UserLimiter) give(user string, d userLoad) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.addLocked(user, l.users[user], userLoad{-d.requests, -d.bodyBytes, -d.listens})
}

func (l *UserLimiter) addLocked(user string, u userLoad, d userLoad) {
	u.requests += d.requests
	u.bodyBytes += d.bodyBytes
	u.listens += d.listens
	l.all.requests += d.requests
	l.all.bodyBytes += d.bodyBytes
	l.all.listens += d.listens
	if u.zero() {
		delete(l.users, user)
	} else {
		l.users[user] = u
	}
}

// Wrap puts next behind the limits. It must stand behind the token check
// (auth.Middleware): the user is the verified caller of the request.
func (l *UserLimiter) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, _ := auth.CallerIDFromContext(r.Context())
		// A session's GET stream lives as long as its host: the session
		// limiter bounds them (one per session), and counting them here
		// would take a request slot for good.
		if r.Method == http.MethodGet && r.Header.Get(sessionHeader) != "" {
			next.ServeHTTP(w, r)
			return
		}
		// A POST's body is reserved with its request slot, in one take:
		// take checks the request limits before the body ones, and either
		// refusal leaves a body announced (ContentLength not 0) unread.
		held := userLoad{requests: 1}
		if r.Method == http.MethodPost {
			reserve := r.ContentLength
			if reserve < 0 || reserve > MaxRequestBytes {
				reserve = MaxRequestBytes
			}
			held.bodyBytes = reserve
		}
		if rf := l.take(user, held); rf.refused() {
			l.refuse(w, r, user, rf, nil, r.ContentLength != 0)
			return
		}
		defer func() { l.give(user, held) }()
		if r.Method != http.MethodPost {
			next.ServeHTTP(w, r)
			return
		}
		body, rf, err := l.readBody(w, r)
		if err != nil {
			if rf.refused() {
				l.refuse(w, r, user, rf, nil, true)
				return
			}
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				http.Error(w, "Request Entity Too Large", http.StatusRequestEntityTooLarge)
				return
			}
			http.Error(w, "Bad Request", http.StatusBadRequest)
			return
		}
		// From now on the body is held at its size.
		if used := int64(len(body)); used < held.bodyBytes {
			l.give(user, userLoad{bodyBytes: held.bodyBytes - used})
			held.bodyBytes = used
		}
		// The body is decoded here once for every check of internal/serve
		// that reads it (jsonRPCShape too).
		env, parsed := parseEnvelope(body)
		if body != nil {
			setParsedBody(r, body, env)
		} else {
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		isListen := false
		if parsed {
			m, ok := env.method()
			isListen = ok && m == methodListen
		} else {
			_, isListen = listenRequest(body)
		}
		if isListen {
			id, _ := listenRequest(body)
			// A listen stream is open as long as the host runs: it counts
			// as a stream, not as a request in flight.
			if rf := l.take(user, userLoad{listens: 1}); rf.refused() {
				l.refuse(w, r, user, rf, id, false)
				return
			}
			l.give(user, userLoad{requests: 1})
			held.requests, held.listens = 0, 1
		}
		next.ServeHTTP(w, r)
	})
}

// readBody reads r's body within the body timeout. A body that does not
// arrive in time is a refusal (ClassBodyTimeout); other errors (a body
// over MaxRequestBytes, a broken connection) are returned as they are.
func (l *UserLimiter) readBody(w http.ResponseWriter, r *http.Request) ([]byte, refusal, error) {
	if r.ContentLength == 0 {
		return nil, refusal{}, nil
	}
	rc := http.NewResponseController(w)
	// Where the writer cannot set a deadline (a test's recorder), the
	// body is read without one.
	deadline := rc.SetReadDeadline(time.Now().Add(l.lim.BodyTimeout)) == nil
	body, err := io.ReadAll(r.Body)
	if err != nil {
		if isTimeout(err) {
			return nil, refusal{ClassBodyTimeout, ReasonBodyTimeout, http.StatusRequestTimeout, retryRequest}, err
		}
		return nil, refusal{}, err
	}
	if deadline {
		// The body is in: nothing more is read on this request, and a
		// listen stream must not be cut by a deadline meant for its body.
		_ = rc.SetReadDeadline(time.Time{})
	}
	return body, refusal{}, nil
}

func isTimeout(err error) bool {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// listenRequest reports whether body is a subscriptions/listen request,
// and its id. Member names are matched as encoding/json and the SDK may
// match them (case-insensitively), and any member so named that says
// subscriptions/listen makes it one: counting a request as a stream that
// is not one costs only its sender.
func listenRequest(body []byte) (json.RawMessage, bool) {
	var members map[string]json.RawMessage
	if json.Unmarshal(body, &members) != nil {
		return nil, false
	}
	listen := false
	var id json.RawMessage
	for k, v := range members {
		switch {
		case strings.EqualFold(k, "method"):
			var m string
			if json.Unmarshal(v, &m) == nil && m == methodListen {
				listen = true
			}
		case k == "id":
			id = v
		}
	}
	return id, listen
}

// refuse answers a refused request and records it. unread says the body was not read: on HTTP/1 the connection is
// then closed rather than drained (net/http would otherwise wait for up
// to 256 KiB of it, with no deadline).
func (l *UserLimiter) refuse(w http.ResponseWriter, r *http.Request, user string, rf refusal, id json.RawMessage, unread bool) {
	l.m.AuthRefused(rf.class, rf.status)
	if unread || rf.class == ClassBodyTimeout {
		if r.ProtoMajor == 1 {
			w.Header().Set("Connection", "close")
		}
		// Any read of what is left of the body fails at once.
		_ = http.NewResponseController(w).SetReadDeadline(time.Now())
	}
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Retry-After", strconv.Itoa(rf.retry))
	w.WriteHeader(rf.status)
	_ = json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": id,
		"error": map[string]any{"code": codeLimited, "message": refusalMessage(rf), "data": map[string]any{
			"class": rf.class, "reason": rf.reason, "retryAfterSeconds": rf.retry}}})

	caller := server.CallerDigest(user)
	method, path := auth.RefusedRequest(r)
	traceID, spanID := audit.Trace(r.Context())
	if l.record != nil && !l.record(audit.AuthRefused{Class: rf.class, Reason: rf.reason, Status: rf.status,
		Caller: caller, Method: method, Path: path, TS: time.Now(), TraceID: traceID, SpanID: spanID}) {
		return // counted into a summary, which has its own log line
	}
	l.log.LogAttrs(r.Context(), slog.LevelWarn, "request refused over a limit",
		slog.String("event", "auth-refused"), slog.String("class", rf.class), slog.String("reason", rf.reason),
		slog.Int("status", rf.status), slog.String("caller", caller), slog.String("method", method), slog.String("path", path))
}

func refusalMessage(rf refusal) string {
	switch rf.reason {
	case ReasonUserRequests:
		return "too many requests of yours are in flight; retry when one has been answered"
	case ReasonServerRequests:
		return "the server has too many requests in flight; retry shortly"
	case ReasonUserBodies:
		return "too many request bodies of yours are being sent or held; retry when one has been answered"
	case ReasonServerBodies:
		return "the server holds too many request bodies; retry shortly"
	case ReasonUserStreams:
		return "you have too many subscriptions/listen streams open; close one first"
	case ReasonServerStreams:
		return "the server has too many subscriptions/listen streams open; retry later"
	case ReasonBodyTimeout:
		return "the request body did not arrive in time; send it whole, promptly"
	}
	return "refused over a limit"
}

// userLimits reports what the limiter counts, as gauges.
func (m *Metrics) userLimits(l *UserLimiter) {
	if m == nil {
		return
	}
	for _, g := range []struct {
		name, help string
		v          func(UserLoad) float64
	}{
		{"pdmcp_http_requests_in_flight", "HTTP requests in flight after the token check (streams excepted).",
			func(u UserLoad) float64 { return float64(u.Requests) }},
		{"pdmcp_http_request_body_bytes", "Request body bytes being read or held after the token check.",
			func(u UserLoad) float64 { return float64(u.BodyBytes) }},
		{"pdmcp_http_listen_streams", "Open 2026-07-28 subscriptions/listen streams.",
			func(u UserLoad) float64 { return float64(u.Listens) }},
	} {
		_ = m.reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: g.name, Help: g.help},
			func() float64 { return g.v(l.Load()) }))
	}
}
