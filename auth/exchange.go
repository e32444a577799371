package auth

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/internal/noanswer"
)

// Token exchange (RFC 8693) constants.
const (
	GrantTypeTokenExchange = "urn:ietf:params:oauth:grant-type:token-exchange"
	TokenTypeAccessToken   = "urn:ietf:params:oauth:token-type:access_token"
)

// Codes of a failed exchange, in the adapter layer.
const (
	// CodeTokenExchangeRefused: the provider answered with an OAuth error;
	// its error and error_description are carried.
	CodeTokenExchangeRefused = "TOKEN_EXCHANGE_REFUSED"
	// CodeTokenExchangeUnavailable: the provider could not be reached, or
	// answered without an OAuth error body.
	CodeTokenExchangeUnavailable = "TOKEN_EXCHANGE_UNAVAILABLE"
	// CodeTokenExchangeBadResponse: the provider said yes with an answer
	// that is not an access token this server can use.
	CodeTokenExchangeBadResponse = "TOKEN_EXCHANGE_BAD_RESPONSE"
)

// ExchangeReuseMargin: a cached exchanged token is used until this long
// before it expires, so it never expires on its way to the Gateway.
const ExchangeReuseMargin = 30 * time.Second

// noExpiryLifetime is how long an exchanged token the provider gave no
// expires_in for is kept (never past the subject token's own expiry).
const noExpiryLifetime = time.Minute

const maxTokenResponse = 64 << 10

// At most maxAhead exchanges ahead of need (Exchanger.Ahead) are in flight
// at once, each given up after aheadTimeout.
const (
	maxAhead     = 8
	aheadTimeout = 10 * time.Second
)

// ExchangeError is a failed exchange. For TOKEN_EXCHANGE_REFUSED it carries
// the provider's HTTP status and its own error and error_description
// (shortened to printable text). It converts to an *api.Error of the
// adapter layer with errors.As, so the server reports it like any other
// refusal.
type ExchangeError struct {
	Code                string
	Status              int
	ProviderError       string
	ProviderDescription string
	cause               error
}

func (e *ExchangeError) Error() string {
	switch {
	case e.Code == CodeTokenExchangeRefused && e.ProviderDescription != "":
		return fmt.Sprintf("token exchange refused by the provider (HTTP %d): %s: %s", e.Status, e.ProviderError, e.ProviderDescription)
	case e.Code == CodeTokenExchangeRefused:
		return fmt.Sprintf("token exchange refused by the provider (HTTP %d): %s", e.Status, e.ProviderError)
	case e.cause != nil:
		return fmt.Sprintf("token exchange failed (%s): %v", e.Code, e.cause)
	default:
		return fmt.Sprintf("token exchange failed (%s)", e.Code)
	}
}

// Unwrap returns the local failure behind an unavailable provider or a bad
// answer.
func (e *ExchangeError) Unwrap() error { return e.cause }

// As fills an *api.Error: layer adapter, this error's code, and a detail
// that says what to do.
func (e *ExchangeError) As(target any) bool {
	t, ok := target.(**api.Error)
	if !ok {
		return false
	}
	out := &api.Error{Layer: api.LayerAdapter, Code: e.Code, Cause: e.cause}
	switch e.Code {
	case CodeTokenExchangeRefused:
		out.Status = e.Status
		reason := e.ProviderError
		if e.ProviderDescription != "" {
			reason += ": " + e.ProviderDescription
		}
		out.Detail = "the identity provider would not exchange the user's token for the Gateway (" + reason +
			"); sign in again, or ask the operator to allow the exchange"
	case CodeTokenExchangeUnavailable:
		out.Status = http.StatusServiceUnavailable
		out.Detail = "the identity provider could not be reached for the token exchange; try again shortly"
	default:
		out.Status = http.StatusBadGateway
		out.Detail = "the identity provider's answer to the token exchange was not a usable access token; report this to the operator"
	}
	*t = out
	return true
}

// ExchangedToken is a token the provider issued for the Gateway's
// audience. It prints as a placeholder, never as the token.
type ExchangedToken struct {
	AccessToken string
	TokenType   string
	Expiry      time.Time
}

func (t ExchangedToken) String() string   { return "ExchangedToken{redacted}" }
func (t ExchangedToken) GoString() string { return t.String() }

// LogValue keeps the token out of structured logs.
func (t ExchangedToken) LogValue() slog.Value {
	return slog.GroupValue(slog.Time("expiry", t.Expiry))
}

// ExchangerConfig configures an Exchanger.
type ExchangerConfig struct {
	Provider        *Provider
	ClientID        string
	ClientSecret    string
	GatewayAudience string
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// MaxEntries bounds the cache; 1024 when zero.
	MaxEntries int
	// OnPanic, when set, is told of a panic recovered in an exchange ahead
	// of need (Ahead), which runs on a goroutine of its own, to log and
	// count it. The exchange then fails, and a call waiting for it asks
	// for itself.
	OnPanic func(v any)
}

// Exchanger trades a caller's access token at the provider's token endpoint
// for one issued to the Gateway's audience, as this server's confidential
// client (RFC 8693). It asks for audience=<gatewayAudience> and
// scope=<gatewayAudience> (Keycloak only filters audiences that a scope
// brings in). Results are cached per caller and subject token and reused
// until ExchangeReuseMargin before they expire, and never past the subject
// token's own expiry. The subject token is sent to the token endpoint only.
type Exchanger struct {
	provider *Provider
	clientID string
	secret   string
	audience string
	now      func() time.Time
	max      int
	onPanic  func(v any)

	mu    sync.Mutex
	cache map[string]ExchangedToken
	// ahead are the exchanges started by Ahead and not yet answered, by
	// cache key.
	ahead map[string]*flight
}

// flight is one exchange ahead of need; done is closed once t or err is set.
type flight struct {
	done chan struct{}
	t    ExchangedToken
	err  error
}

// NewExchanger checks cfg and returns an Exchanger. It fetches nothing.
func NewExchanger(cfg ExchangerConfig) (*Exchanger, error) {
	switch {
	case cfg.Provider == nil:
		return nil, errors.New("exchanger: no provider")
	case cfg.ClientID == "":
		return nil, errors.New("exchanger: no client id")
	case cfg.ClientSecret == "":
		return nil, errors.New("exchanger: no client secret")
	case cfg.GatewayAudience == "":
		return nil, errors.New("exchanger: no gateway audience")
	}
	e := &Exchanger{
		provider: cfg.Provider, clientID: cfg.ClientID, secret: cfg.ClientSecret,
		audience: cfg.GatewayAudience, now: cfg.Now, max: cfg.MaxEntries, onPanic: cfg.OnPanic,
		cache: make(map[string]ExchangedToken), ahead: make(map[string]*flight),
	}
	if e.now == nil {
		e.now = time.Now
	}
	if e.max <= 0 {
		e.max = 1024
	}
	return e, nil
}

// Exchange returns a Gateway-audience token for caller, whose verified
// access token is subjectToken: from the cache while it is fresh, from the
// provider otherwise. A failure is an *ExchangeError.
func (e *Exchanger) Exchange(ctx context.Context, caller *Caller, subjectToken string) (ExchangedToken, error) {
	if caller == nil || subjectToken == "" {
		return ExchangedToken{}, errors.New("token exchange: no caller or no subject token")
	}
	key := cacheKey(caller.ID(), subjectToken)
	now := e.now()
	e.mu.Lock()
	t, ok := e.cache[key]
	f := e.ahead[key]
	e.mu.Unlock()
	if ok && now.Before(t.Expiry.Add(-ExchangeReuseMargin)) {
		return t, nil
	}
	if f != nil {
		// An exchange ahead of need is on its way: its answer is as good
		// as a new one. If it failed, this call asks itself, so that its
		// refusal is its own. The wait shows in a trace as exchange time.
		region := trace.StartRegion(ctx, TraceExchangeRegion)
		select {
		case <-f.done:
			region.End()
			if f.err == nil {
				return f.t, nil
			}
		case <-ctx.Done():
			region.End()
			return ExchangedToken{}, &ExchangeError{Code: CodeTokenExchangeUnavailable, cause: ctx.Err()}
		}
	}
	return e.exchange(ctx, caller, key, subjectToken)
}

// exchange asks the provider and caches the answer under key.
func (e *Exchanger) exchange(ctx context.Context, caller *Caller, key, subjectToken string) (ExchangedToken, error) {
	t, err := e.request(ctx, subjectToken)
	if err != nil {
		return ExchangedToken{}, err
	}
	// The exchanged token is not kept past the token it was exchanged
	// for: the provider may give it a fresh lifetime.
	if !caller.Expiry.IsZero() && caller.Expiry.Before(t.Expiry) {
		t.Expiry = caller.Expiry
	}
	e.store(key, t)
	return t, nil
}

// Ahead starts, in the background, the exchange a first tool call of
// caller would make, unless a fresh exchanged token is cached or on its way
// already (or maxAhead are), so that the call finds it ready instead of
// waiting for the provider. A failure is dropped: the call then asks
// itself and reports its own.
func (e *Exchanger) Ahead(caller *Caller, subjectToken string) {
	if caller == nil || subjectToken == "" {
		return
	}
	key := cacheKey(caller.ID(), subjectToken)
	now := e.now()
	e.mu.Lock()
	if t, ok := e.cache[key]; (ok && now.Before(t.Expiry.Add(-ExchangeReuseMargin))) || e.ahead[key] != nil ||
		len(e.ahead) >= maxAhead {
		e.mu.Unlock()
		return
	}
	f := &flight{done: make(chan struct{})}
	e.ahead[key] = f
	e.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), aheadTimeout)
		defer cancel()
		t, err := e.exchangeAhead(ctx, caller, key, subjectToken)
		e.mu.Lock()
		if e.ahead[key] == f {
			delete(e.ahead, key)
		}
		e.mu.Unlock()
		f.t, f.err = t, err
		close(f.done)
	}()
}

// errAheadPanicked is the failure of an exchange ahead of need that
// panicked; a call joining it asks for itself.
var errAheadPanicked = errors.New("token exchange ahead of need: a panic was recovered")

// exchangeAhead is exchange on Ahead's own goroutine, where a panic would
// end the process: it is recovered, told to OnPanic, and the exchange
// fails (its flight still ends, so no call waits on it forever).
func (e *Exchanger) exchangeAhead(ctx context.Context, caller *Caller, key, subjectToken string) (t ExchangedToken, err error) {
	defer func() {
		if v := recover(); v != nil {
			if e.onPanic != nil {
				e.onPanic(v)
			}
			t, err = ExchangedToken{}, errAheadPanicked
		}
	}()
	return e.exchange(ctx, caller, key, subjectToken)
}

// Forget drops every cached token of the caller with this ID, for example
// when the Gateway refused one or the caller's session ended.
func (e *Exchanger) Forget(callerID string) {
	prefix := callerID + "\x00"
	e.mu.Lock()
	defer e.mu.Unlock()
	for k := range e.cache {
		if strings.HasPrefix(k, prefix) {
			delete(e.cache, k)
		}
	}
	// An exchange ahead of need still in flight is not joined any more
	// (it may still land in the cache: a token the provider issued after
	// this call, not the one the Gateway refused).
	for k := range e.ahead {
		if strings.HasPrefix(k, prefix) {
			delete(e.ahead, k)
		}
	}
}

func (e *Exchanger) store(key string, t ExchangedToken) {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	for k, v := range e.cache {
		if !now.Before(v.Expiry) {
			delete(e.cache, k)
		}
	}
	for len(e.cache) >= e.max {
		// Drop the entry closest to expiry.
		keys := make([]string, 0, len(e.cache))
		for k := range e.cache {
			keys = append(keys, k)
		}
		oldest := slices.MinFunc(keys, func(a, b string) int { return e.cache[a].Expiry.Compare(e.cache[b].Expiry) })
		delete(e.cache, oldest)
	}
	e.cache[key] = t
}

// cacheKey is the caller's ID and a hash of the subject token: a caller who
// signs in again gets a fresh exchange, and the map never holds the
// subject token itself.
func cacheKey(callerID, subjectToken string) string {
	sum := sha256.Sum256([]byte(subjectToken))
	return callerID + "\x00" + base64.RawURLEncoding.EncodeToString(sum[:])
}

// request performs one exchange at the token endpoint.
func (e *Exchanger) request(ctx context.Context, subjectToken string) (ExchangedToken, error) {
	defer trace.StartRegion(ctx, TraceExchangeRegion).End()
	meta, err := e.provider.Metadata(ctx)
	if err != nil {
		return ExchangedToken{}, &ExchangeError{Code: CodeTokenExchangeUnavailable, cause: err}
	}
	form := url.Values{
		"grant_type":           {GrantTypeTokenExchange},
		"subject_token":        {subjectToken},
		"subject_token_type":   {TokenTypeAccessToken},
		"requested_token_type": {TokenTypeAccessToken},
		"audience":             {e.audience},
		"scope":                {e.audience},
	}
	basic := len(meta.TokenEndpointAuthMethods) == 0 ||
		slices.Contains(meta.TokenEndpointAuthMethods, "client_secret_basic") ||
		!slices.Contains(meta.TokenEndpointAuthMethods, "client_secret_post")
	if !basic {
		form.Set("client_id", e.clientID)
		form.Set("client_secret", e.secret)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, meta.TokenEndpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return ExchangedToken{}, &ExchangeError{Code: CodeTokenExchangeUnavailable, cause: err}
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	if basic {
		// RFC 6749 §2.3.1: the id and secret are form-encoded first.
		req.SetBasicAuth(url.QueryEscape(e.clientID), url.QueryEscape(e.secret))
	}
	resp, err := e.provider.Client().Do(req)
	if err != nil {
		return ExchangedToken{}, &ExchangeError{Code: CodeTokenExchangeUnavailable,
			cause: &noanswer.Error{Peer: "the OpenID provider", URL: meta.TokenEndpoint, Err: stripURLError(err)}}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxTokenResponse))
	if err != nil {
		return ExchangedToken{}, &ExchangeError{Code: CodeTokenExchangeUnavailable, cause: fmt.Errorf("reading the token response: %w", err)}
	}
	if resp.StatusCode != http.StatusOK {
		var oe struct {
			Error       string `json:"error"`
			Description string `json:"error_description"`
		}
		if json.Unmarshal(body, &oe) == nil && oe.Error != "" {
			return ExchangedToken{}, &ExchangeError{Code: CodeTokenExchangeRefused, Status: resp.StatusCode,
				ProviderError: printable(oe.Error, 64), ProviderDescription: printable(oe.Description, 200)}
		}
		return ExchangedToken{}, &ExchangeError{Code: CodeTokenExchangeUnavailable,
			cause: fmt.Errorf("POST %s: HTTP %d without an OAuth error", meta.TokenEndpoint, resp.StatusCode)}
	}
	return e.parse(body)
}

// parse checks a successful answer (RFC 8693 §2.2.1).
func (e *Exchanger) parse(body []byte) (ExchangedToken, error) {
	var r struct {
		AccessToken     string          `json:"access_token"`
		IssuedTokenType string          `json:"issued_token_type"`
		TokenType       string          `json:"token_type"`
		ExpiresIn       json.RawMessage `json:"expires_in"`
	}
	bad := func(format string, args ...any) (ExchangedToken, error) {
		return ExchangedToken{}, &ExchangeError{Code: CodeTokenExchangeBadResponse, cause: fmt.Errorf(format, args...)}
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return bad("the token response is not JSON")
	}
	if r.AccessToken == "" {
		return bad("the token response has no access_token")
	}
	if r.IssuedTokenType != TokenTypeAccessToken {
		return bad("the token response's issued_token_type is %q, not an access token", printable(r.IssuedTokenType, 80))
	}
	if r.TokenType == "" || strings.EqualFold(r.TokenType, "N_A") {
		return bad("the token response's token_type is %q", printable(r.TokenType, 20))
	}
	now := e.now()
	expiry := now.Add(noExpiryLifetime)
	if len(r.ExpiresIn) > 0 && string(r.ExpiresIn) != "null" {
		secs, err := strconv.ParseInt(strings.Trim(string(r.ExpiresIn), `"`), 10, 64)
		if err != nil || secs <= 0 {
			return bad("the token response's expires_in is not a positive number of seconds")
		}
		expiry = now.Add(time.Duration(secs) * time.Second)
	}
	return ExchangedToken{AccessToken: r.AccessToken, TokenType: r.TokenType, Expiry: expiry}, nil
}

// stripURLError keeps the transport failure but drops the *url.Error
// wrapper, whose text repeats the URL already named.
func stripURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// printable keeps at most n printable ASCII characters of s: the provider's
// words go into a refusal a model reads, and nothing else may ride along.
func printable(s string, n int) string {
	var b strings.Builder
	for _, r := range s {
		if b.Len() >= n {
			b.WriteString("...")
			break
		}
		if r >= 0x20 && r < 0x7f {
			b.WriteRune(r)
		}
	}
	return b.String()
}
