package auth

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
	oteltrace "go.opentelemetry.io/otel/trace"
)

// The runtime/trace regions of a bearer token's check and of a token
// exchange at the provider (pdmcp bench --trace).
const (
	TraceVerifyRegion   = "auth.verify"
	TraceExchangeRegion = "auth.exchange"
)

// RefusalRecord is the audit line for a refused request. It holds nothing
// from the token or from any header: not the subject, not the key id; and
// nothing of the request as sent (see RefusedRequest).
type RefusalRecord struct {
	Event  string    `json:"event"` // always "auth-refused"
	Class  Class     `json:"class"`
	Reason string    `json:"reason"`
	Status int       `json:"status"`
	Method string    `json:"method"`
	Path   string    `json:"path"`
	TS     time.Time `json:"ts"`
	// TraceID and SpanID name the trace span active in the request's
	// context, if any (W3C hex), so the audit line joins the trace.
	TraceID string `json:"traceId,omitempty"`
	SpanID  string `json:"spanId,omitempty"`
}

// RefusedRequest is how a refusal's record and log line name the request:
// its method if it is a standard one, else "OTHER"; and the route the
// server's mux matched (Request.Pattern, without its method or host), else
// "other". Neither is what the sender wrote, which could be anything, of
// any length.
func RefusedRequest(r *http.Request) (method, path string) {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		method = r.Method
	default:
		method = "OTHER"
	}
	// A pattern is "[METHOD ][HOST]/PATH"; neither a method nor a host
	// holds a slash.
	path = "other"
	if i := strings.IndexByte(r.Pattern, '/'); i >= 0 {
		path = r.Pattern[i:]
	}
	return method, path
}

// MiddlewareOptions configure Middleware.
type MiddlewareOptions struct {
	// ResourceMetadataURL is named in every challenge (see MetadataURL).
	ResourceMetadataURL string
	// Scopes are required of every token (on top of what the Verifier
	// requires) and named in every challenge's scope parameter.
	Scopes []string
	// Audit receives one record per refused request; nil for none.
	Audit func(RefusalRecord)
	// Refused, when set, takes the place of Audit and decides which
	// refusals get the middleware's own log line: those it reports own.
	// The rest it is expected to count and log in aggregate (as
	// audit.Log.Refused does), so a flood of refusals, which costs its
	// sender nothing, does not cost a log line each either.
	Refused func(RefusalRecord) (own bool)
	// Logger gets one line per refused request (per own refusal when
	// Refused is set); slog.Default() when nil.
	Logger *slog.Logger
	// Now stamps the records; time.Now when nil.
	Now func() time.Time
	// Accepted, when set, is told of every accepted request's caller and
	// token before the request goes on (for work ahead of need, such as
	// the token exchange); it must not block.
	Accepted func(c *Caller, accessToken string)
}

// TokenVerifier is what Middleware needs of a Verifier.
type TokenVerifier interface {
	Verify(ctx context.Context, token string) (*Caller, error)
}

// Middleware authenticates every request with verifier.
//
// A refused request is answered here: 401 with
// `WWW-Authenticate: Bearer error="invalid_token", error_description="<class>", resource_metadata="<url>"`
// (without error and error_description when no token was sent at all,
// RFC 6750 §3.1), 403 with error="insufficient_scope" for a scope
// shortfall, 400 with error="invalid_request" for a token sent in the query
// or in several Authorization headers; every challenge also names the
// required scope. The body is a short JSON object with the class and
// reason. One log line and one audit record are written per refusal, or,
// with MiddlewareOptions.Refused, per refusal it reports own.
//
// An accepted request proceeds with the Caller and the raw access token in
// its context (CallerFromContext, AccessTokenFromContext) and with the
// go-sdk's TokenInfo set through the SDK's own RequireBearerToken, so the
// streamable handler copies it into req.Extra.TokenInfo and binds each
// session to TokenInfo.UserID (the Caller's ID).
func Middleware(verifier TokenVerifier, opts MiddlewareOptions) func(http.Handler) http.Handler {
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	scopes := slices.Clone(opts.Scopes)
	skew := DefaultClockSkew
	if v, ok := verifier.(interface{ ClockSkew() time.Duration }); ok {
		skew = v.ClockSkew()
	}

	refuseRequest := func(w http.ResponseWriter, r *http.Request, te *TokenError) {
		status := te.Status()
		if status == http.StatusServiceUnavailable {
			// No challenge: nothing about the token is wrong. Retry-After
			// says when the provider's keys are tried again.
			w.Header().Set("Retry-After", strconv.Itoa(int(ProviderRetryAfter/time.Second)))
		} else {
			w.Header().Set("WWW-Authenticate", challenge(te, opts.ResourceMetadataURL, scopes))
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(status)
		body := map[string]string{"class": string(te.Class), "reason": te.Reason}
		if e := te.oauthError(); e != "" {
			body["error"] = e
		}
		_ = json.NewEncoder(w).Encode(body)

		method, path := RefusedRequest(r)
		rec := RefusalRecord{
			Event: "auth-refused", Class: te.Class, Reason: te.Reason, Status: status,
			Method: method, Path: path, TS: now().UTC().Truncate(time.Second),
		}
		if sc := oteltrace.SpanContextFromContext(r.Context()); sc.IsValid() {
			rec.TraceID, rec.SpanID = sc.TraceID().String(), sc.SpanID().String()
		}
		switch {
		case opts.Refused != nil:
			if !opts.Refused(rec) {
				return
			}
		case opts.Audit != nil:
			opts.Audit(rec)
		}
		attrs := []slog.Attr{
			slog.String("event", "auth-refused"),
			slog.String("class", string(te.Class)),
			slog.String("reason", te.Reason),
			slog.Int("status", status),
			slog.String("method", method),
			slog.String("path", path),
		}
		if te.Class == ClassProviderUnavailable && te.cause != nil {
			// The provider's failure names its URL and the network error,
			// nothing from the request; the operator needs it.
			attrs = append(attrs, slog.String("provider_error", te.cause.Error()))
		}
		logger.LogAttrs(r.Context(), slog.LevelWarn, "request refused", attrs...)
	}

	// The SDK's middleware is the only way to put a TokenInfo where the
	// streamable handler reads it. It runs after the decision is made
	// here and only hands on what this middleware verified.
	// The TokenInfo is made once, by the handler below, which puts it in
	// the context with the caller; here it is only handed on.
	fromContext := func(ctx context.Context, _ string, _ *http.Request) (*sdkauth.TokenInfo, error) {
		v := verifiedFromContext(ctx)
		if v == nil || v.info == nil {
			return nil, sdkauth.ErrInvalidToken
		}
		return v.info, nil
	}
	// The SDK checks the expiry again against the wall clock; the margin
	// keeps it from disagreeing with the decision just made.
	sdk := sdkauth.RequireBearerToken(fromContext, &sdkauth.RequireBearerTokenOptions{ClockSkew: skew + time.Minute})

	// The SDK's check reads the token from the Authorization header again,
	// splitting the whole token, only to hand it to fromContext, which has
	// no use for it. So the request it checks carries a stand-in header
	// (built once, only read), and the handler behind it gets the
	// request's own header back.
	standIn := http.Header{"Authorization": {"bearer verified"}}
	restore := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if v := verifiedFromContext(r.Context()); v != nil && v.header != nil {
				r.Header = v.header
			}
			next.ServeHTTP(w, r)
		})
	}

	return func(next http.Handler) http.Handler {
		inner := sdk(restore(next))
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			token, te := bearerToken(r)
			if te != nil {
				refuseRequest(w, r, te)
				return
			}
			region := trace.StartRegion(r.Context(), TraceVerifyRegion)
			caller, err := verifier.Verify(r.Context(), token)
			region.End()
			if err != nil {
				if !errors.As(err, &te) {
					te = refuse(ClassInvalid, ReasonVerifierFailed)
				}
				refuseRequest(w, r, te)
				return
			}
			for _, s := range scopes {
				if !slices.Contains(caller.Scopes, s) {
					refuseRequest(w, r, refuse(ClassInsufficientScope, ReasonScopeMissing))
					return
				}
			}
			if opts.Accepted != nil {
				opts.Accepted(caller, token)
			}
			vr := &verifiedRequest{caller: caller, token: token, info: tokenInfo(caller, token), header: r.Header}
			r = r.WithContext(context.WithValue(r.Context(), verifiedKey{}, vr))
			r.Header = standIn
			inner.ServeHTTP(w, r)
		})
	}
}

// tokenInfo is the go-sdk's TokenInfo of an accepted request. Its Scopes
// are the caller's: the Caller is the request's own (Verify returns a copy
// each time), and neither is changed once made.
func tokenInfo(c *Caller, token string) *sdkauth.TokenInfo {
	return &sdkauth.TokenInfo{
		Scopes:     c.Scopes,
		Expiration: c.Expiry,
		UserID:     c.ID(),
		Extra:      map[string]any{tokenInfoKey: Credential{Caller: c, token: token}},
	}
}

// bearerToken takes the token from the one Authorization header, in the
// form the SDK's middleware reads it too ("Bearer" and the token, nothing
// else). A request without such a header has no token; a token in the
// query is never taken (RFC 9700, MCP: header only).
func bearerToken(r *http.Request) (string, *TokenError) {
	// An empty query has no access_token; parsing it would only allocate.
	if r.URL.RawQuery != "" && r.URL.Query().Has("access_token") {
		return "", refuse(ClassMalformed, ReasonTokenInQuery)
	}
	values := r.Header.Values("Authorization")
	switch len(values) {
	case 0:
		return "", refuse(ClassNoToken, ReasonNoToken)
	case 1:
	default:
		return "", refuse(ClassMalformed, ReasonMultipleAuthHeaders)
	}
	scheme, token, n := twoFields(values[0])
	if n == 0 || !strings.EqualFold(scheme, "bearer") {
		// Another scheme (Basic, DPoP) is no bearer token at all.
		return "", refuse(ClassNoToken, ReasonNoToken)
	}
	if n != 2 {
		return "", refuse(ClassMalformed, ReasonBadAuthHeader)
	}
	return token, nil
}

// twoFields is strings.Fields(v)'s first two fields and how many it has
// (3 for three or more), without making the slice for a value of ASCII,
// the form every header value a client sends takes.
func twoFields(v string) (first, second string, n int) {
	// The common value, a scheme and a token of printable ASCII with one
	// space between, is checked at one comparison a byte; any other takes
	// the general walk.
	if sp := strings.IndexByte(v, ' '); sp > 0 && plainField(v[:sp]) && plainField(v[sp+1:]) {
		return v[:sp], v[sp+1:], 2
	}
	var f [2]string
	for i := 0; i < len(v); i++ {
		if v[i] >= utf8.RuneSelf {
			fields := strings.Fields(v)
			copy(f[:], fields)
			return f[0], f[1], min(len(fields), 3)
		}
	}
	for i := 0; i < len(v); {
		if asciiSpace(v[i]) {
			i++
			continue
		}
		j := i
		for j < len(v) && !asciiSpace(v[j]) {
			j++
		}
		if n == 2 {
			return f[0], f[1], 3
		}
		f[n] = v[i:j]
		n++
		i = j
	}
	return f[0], f[1], n
}

// plainField reports whether s is one field as strings.Fields splits
// one: not empty, and printable ASCII other than the space throughout.
func plainField(s string) bool {
	// Eight bytes at a time (a token is a kilobyte or more): a byte below
	// '!' or above '~' (past ASCII included) sets its high bit in less or
	// in more (the "has less" and "has more" tests of a word's bytes).
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; i+8 <= len(s); i += 8 {
		x := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
			uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
		less := (x - ones*'!') &^ x
		more := x + ones*(0x7f-'~') | x
		if (less|more)&highs != 0 {
			return false
		}
	}
	for ; i < len(s); i++ {
		if c := s[i]; c-'!' > '~'-'!' {
			return false
		}
	}
	return s != ""
}

// asciiSpace is strings.Fields' white space among ASCII bytes.
func asciiSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

// challenge builds the WWW-Authenticate value for a refusal.
func challenge(te *TokenError, metadataURL string, scopes []string) string {
	var params []string
	if e := te.oauthError(); e != "" {
		params = append(params, `error=`+quote(e))
		if te.Class != ClassInsufficientScope {
			params = append(params, `error_description=`+quote(string(te.Class)))
		}
	}
	if te.Class == ClassInsufficientScope && len(scopes) > 0 {
		params = append(params, `scope=`+quote(strings.Join(scopes, " ")))
	}
	if metadataURL != "" {
		params = append(params, `resource_metadata=`+quote(metadataURL))
	}
	if te.Class != ClassInsufficientScope && len(scopes) > 0 {
		params = append(params, `scope=`+quote(strings.Join(scopes, " ")))
	}
	if len(params) == 0 {
		return "Bearer"
	}
	return "Bearer " + strings.Join(params, ", ")
}

// quote makes an RFC 7230 quoted-string.
func quote(s string) string {
	s = strings.ReplaceAll(s, `\`, `\\`)
	return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"`
}
