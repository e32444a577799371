package devidp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"golang.org/x/oauth2"
)

// ErrLoginRefused is returned by Login when the provider shows the sign-in
// form again, which it does for a wrong username or password.
var ErrLoginRefused = errors.New("devidp: sign-in refused")

// AuthorizationError is an error the authorization endpoint sent back to the
// redirect URI (RFC 6749 section 4.1.2.1).
type AuthorizationError struct {
	Code        string // the error parameter, such as invalid_scope
	Description string // error_description, possibly empty
}

func (e *AuthorizationError) Error() string {
	if e.Description == "" {
		return "devidp: authorization refused: " + e.Code
	}
	return "devidp: authorization refused: " + e.Code + ": " + e.Description
}

// LoginParams are the inputs of Login.
type LoginParams struct {
	Issuer      string // the provider's issuer URL
	ClientID    string // a public client, such as the provider's host client
	RedirectURL string // a loopback redirect URI; nothing needs to listen there
	Username    string
	Password    string
	Scopes      []string // ["openid"] when empty
	// Resource is sent as the RFC 8707 resource parameter when set, as MCP
	// hosts do. This provider ignores it.
	Resource string
}

// maxPageBytes bounds what Login reads of any response.
const maxPageBytes = 1 << 20

// maxRedirects bounds the redirects Login follows between two of its steps.
const maxRedirects = 10

// Login signs a user in with the authorization code flow, the way a script
// drives a browser: it reads the provider's discovery document, builds the
// authorization URL with PKCE S256 and a random state, GETs it (following
// redirects to the sign-in form), fills the form's username and password and
// POSTs it, stops at the redirect to RedirectURL without requesting it, checks
// the state and the RFC 9207 issuer, and redeems the code with the verifier.
// No callback listener is needed. hc must trust the provider's TLS
// certificate; its CheckRedirect is not used.
//
// A wrong password gives an error wrapping ErrLoginRefused; an error redirect
// from the provider gives an *AuthorizationError; a refused code redemption
// gives the *oauth2.RetrieveError of x/oauth2.
func Login(ctx context.Context, hc *http.Client, lp LoginParams) (*oauth2.Token, error) {
	if hc == nil {
		return nil, errors.New("devidp: Login needs an HTTP client that trusts the provider")
	}
	if lp.Issuer == "" || lp.ClientID == "" || lp.RedirectURL == "" || lp.Username == "" {
		return nil, errors.New("devidp: Login needs Issuer, ClientID, RedirectURL and Username")
	}
	issuerURL, err := url.Parse(lp.Issuer)
	if err != nil || issuerURL.Scheme != "https" {
		return nil, fmt.Errorf("devidp: Login: issuer %q is not an https URL", lp.Issuer)
	}
	target, err := url.Parse(lp.RedirectURL)
	if err != nil || target.Host == "" {
		return nil, fmt.Errorf("devidp: Login: redirect URL %q is not absolute", lp.RedirectURL)
	}

	meta, err := fetchMetadata(ctx, hc, lp.Issuer)
	if err != nil {
		return nil, err
	}
	scopes := lp.Scopes
	if len(scopes) == 0 {
		scopes = []string{"openid"}
	}
	cfg := &oauth2.Config{
		ClientID:    lp.ClientID,
		RedirectURL: lp.RedirectURL,
		Scopes:      scopes,
		Endpoint: oauth2.Endpoint{
			AuthURL:   meta.AuthorizationEndpoint,
			TokenURL:  meta.TokenEndpoint,
			AuthStyle: oauth2.AuthStyleInParams, // a public client has no secret
		},
	}
	verifier := oauth2.GenerateVerifier()
	state, err := randomString(16)
	if err != nil {
		return nil, err
	}
	opts := []oauth2.AuthCodeOption{oauth2.S256ChallengeOption(verifier)}
	if slices.Contains(scopes, "openid") {
		nonce, err := randomString(16)
		if err != nil {
			return nil, err
		}
		opts = append(opts, oauth2.SetAuthURLParam("nonce", nonce))
	}
	if lp.Resource != "" {
		opts = append(opts, oauth2.SetAuthURLParam("resource", lp.Resource))
	}

	res, err := AuthorizeResponse(ctx, hc, cfg.AuthCodeURL(state, opts...), lp.RedirectURL, lp.Username, lp.Password, state)
	if err != nil {
		return nil, err
	}
	// RFC 9207: the answer must come from the issuer the request went to;
	// a provider that advertises iss must send it.
	if (res.Iss != "" || meta.IssParameterSupported) && res.Iss != lp.Issuer {
		return nil, fmt.Errorf("devidp: Login: the authorization response names issuer %q, want %q", res.Iss, lp.Issuer)
	}
	code := res.Code
	tok, err := cfg.Exchange(context.WithValue(ctx, oauth2.HTTPClient, hc), code, oauth2.VerifierOption(verifier))
	if err != nil {
		return nil, fmt.Errorf("devidp: Login: redeem code: %w", err)
	}
	return tok, nil
}

// Authorize does what a person does in a browser for one authorization
// request: it opens authURL (an authorization endpoint URL with its
// parameters), fills this provider's sign-in form with username and
// password, and returns the code from the redirect to redirectURL, whose
// state must equal state. Nothing needs to listen at redirectURL. It is for
// scripted sign-ins in tests and for OAuth clients' code fetchers; those
// that check RFC 9207's iss use AuthorizeResponse.
func Authorize(ctx context.Context, hc *http.Client, authURL, redirectURL, username, password, state string) (string, error) {
	res, err := AuthorizeResponse(ctx, hc, authURL, redirectURL, username, password, state)
	if err != nil {
		return "", err
	}
	return res.Code, nil
}

// AuthorizationResponse is what the redirect to the client carried.
type AuthorizationResponse struct {
	Code string
	// Iss is the RFC 9207 issuer parameter ("" when the provider sent none).
	Iss string
}

// AuthorizeResponse is Authorize, returning the issuer parameter with the
// code.
func AuthorizeResponse(ctx context.Context, hc *http.Client, authURL, redirectURL, username, password, state string) (*AuthorizationResponse, error) {
	code, iss, err := authorize(ctx, hc, authURL, redirectURL, username, password, state)
	if err != nil {
		return nil, err
	}
	return &AuthorizationResponse{Code: code, Iss: iss}, nil
}

func authorize(ctx context.Context, hc *http.Client, authURL, redirectURL, username, password, state string) (string, string, error) {
	if hc == nil {
		return "", "", errors.New("devidp: Authorize needs an HTTP client that trusts the provider")
	}
	target, err := url.Parse(redirectURL)
	if err != nil || target.Host == "" {
		return "", "", fmt.Errorf("devidp: redirect URL %q is not absolute", redirectURL)
	}
	authU, err := url.Parse(authURL)
	if err != nil || authU.Scheme != "https" {
		return "", "", errors.New("devidp: the authorization URL is not https")
	}
	issuerURL := authU
	// A copy of the client that stops at the redirect to the loopback URI.
	browser := *hc
	browser.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if sameEndpoint(req.URL, target) {
			return http.ErrUseLastResponse
		}
		if len(via) >= maxRedirects {
			return errors.New("too many redirects")
		}
		return nil
	}

	page, err := get(ctx, &browser, authURL)
	if err != nil {
		return "", "", err
	}
	if page.callback != nil && !sameEndpoint(page.callback, target) {
		return "", "", fmt.Errorf("devidp: redirected to %s, not to the redirect URL", where(page.callback))
	}
	if page.callback == nil {
		form, err := parseLoginForm(page.body, page.url)
		if err != nil {
			return "", "", err
		}
		// The password goes only to the provider's own host.
		if form.action.Scheme != "https" || form.action.Host != issuerURL.Host {
			return "", "", fmt.Errorf("devidp: the sign-in form posts to %s, not to the issuer's host", where(form.action))
		}
		form.values.Set("username", username)
		form.values.Set("password", password)
		if page, err = post(ctx, &browser, form.action.String(), form.values); err != nil {
			return "", "", err
		}
		if page.callback != nil && !sameEndpoint(page.callback, target) {
			return "", "", fmt.Errorf("devidp: redirected to %s, not to the redirect URL", where(page.callback))
		}
		if page.callback == nil {
			if msg := pageError(page.body); msg != "" {
				return "", "", fmt.Errorf("%w: %s", ErrLoginRefused, msg)
			}
			return "", "", fmt.Errorf("devidp: the sign-in did not redirect to %s (status %d)", redirectURL, page.status)
		}
	}

	q := page.callback.Query()
	if code := q.Get("error"); code != "" {
		return "", "", &AuthorizationError{Code: code, Description: q.Get("error_description")}
	}
	if q.Get("state") != state {
		return "", "", errors.New("devidp: the redirect carries the wrong state")
	}
	code := q.Get("code")
	if code == "" {
		return "", "", errors.New("devidp: the redirect carries no code")
	}
	return code, q.Get("iss"), nil
}

// metadata is the part of a discovery document Login uses.
type metadata struct {
	Issuer                        string   `json:"issuer"`
	AuthorizationEndpoint         string   `json:"authorization_endpoint"`
	TokenEndpoint                 string   `json:"token_endpoint"`
	CodeChallengeMethodsSupported []string `json:"code_challenge_methods_supported"`
	IssParameterSupported         bool     `json:"authorization_response_iss_parameter_supported"`
}

func fetchMetadata(ctx context.Context, hc *http.Client, issuer string) (*metadata, error) {
	u := strings.TrimSuffix(issuer, "/") + "/.well-known/openid-configuration"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("devidp: Login: %w", err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("devidp: Login: discovery: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("devidp: Login: discovery answered %d", resp.StatusCode)
	}
	var m metadata
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxPageBytes)).Decode(&m); err != nil {
		return nil, fmt.Errorf("devidp: Login: discovery: %w", err)
	}
	switch {
	case m.Issuer != issuer:
		return nil, fmt.Errorf("devidp: Login: discovery names issuer %q, want %q", m.Issuer, issuer)
	case m.AuthorizationEndpoint == "" || m.TokenEndpoint == "":
		return nil, errors.New("devidp: Login: discovery lacks the authorization or token endpoint")
	case !slices.Contains(m.CodeChallengeMethodsSupported, "S256"):
		// The MCP authorization rules refuse such a provider; so does Login.
		return nil, errors.New("devidp: Login: the provider does not advertise PKCE S256")
	}
	return &m, nil
}

// page is where one step of Login ended: either the redirect to the loopback
// URI (callback set) or a page from the provider.
type page struct {
	callback *url.URL
	url      *url.URL
	status   int
	body     string
}

func get(ctx context.Context, c *http.Client, u string) (*page, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("devidp: Login: %w", err)
	}
	return do(c, req)
}

func post(ctx context.Context, c *http.Client, u string, form url.Values) (*page, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, fmt.Errorf("devidp: Login: %w", err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return do(c, req)
}

func do(c *http.Client, req *http.Request) (*page, error) {
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("devidp: Login: %s %s: %w", req.Method, where(req.URL), err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxPageBytes))
	if err != nil {
		return nil, fmt.Errorf("devidp: Login: read %s: %w", where(resp.Request.URL), err)
	}
	p := &page{url: resp.Request.URL, status: resp.StatusCode, body: string(body)}
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		loc, err := resp.Location()
		if err != nil {
			return nil, fmt.Errorf("devidp: Login: redirect without a usable Location: %w", err)
		}
		p.callback = loc
		return p, nil
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("devidp: Login: %s answered %d: %s", where(resp.Request.URL), resp.StatusCode, snippet(p.body))
	}
	return p, nil
}

// sameEndpoint reports whether u is the redirect URI target, ignoring the
// query the provider adds.
func sameEndpoint(u, target *url.URL) bool {
	return u.Scheme == target.Scheme && u.Host == target.Host && u.Path == target.Path
}

// loginForm is the sign-in form found on a page.
type loginForm struct {
	action *url.URL
	values url.Values
}

// parseLoginForm finds the form with a password field and collects its
// hidden inputs. It reads plain HTML like this provider's; it is not a
// general HTML parser.
func parseLoginForm(body string, base *url.URL) (*loginForm, error) {
	formRe := regexp.MustCompile(`(?is)<form\b([^>]*)>(.*?)</form>`)
	inputRe := regexp.MustCompile(`(?is)<input\b([^>]*)>`)
	for _, m := range formRe.FindAllStringSubmatch(body, -1) {
		attrs := parseAttrs(m[1])
		if !strings.EqualFold(attrs["method"], "post") {
			continue
		}
		values := url.Values{}
		hasPassword := false
		for _, in := range inputRe.FindAllStringSubmatch(m[2], -1) {
			a := parseAttrs(in[1])
			switch {
			case a["name"] == "password":
				hasPassword = true
			case strings.EqualFold(a["type"], "hidden") && a["name"] != "":
				values.Set(a["name"], a["value"])
			}
		}
		if !hasPassword {
			continue
		}
		action, err := base.Parse(attrs["action"])
		if err != nil {
			return nil, fmt.Errorf("devidp: Login: sign-in form action: %w", err)
		}
		return &loginForm{action: action, values: values}, nil
	}
	return nil, fmt.Errorf("devidp: Login: no sign-in form at %s: %s", where(base), snippet(body))
}

func parseAttrs(s string) map[string]string {
	attrRe := regexp.MustCompile(`(?is)([a-z][a-z0-9_:-]*)\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+))`)
	out := map[string]string{}
	for _, m := range attrRe.FindAllStringSubmatch(s, -1) {
		out[strings.ToLower(m[1])] = html.UnescapeString(m[2] + m[3] + m[4])
	}
	return out
}

// pageError returns the text of the page's alert, which this provider's form
// shows after a wrong password.
func pageError(body string) string {
	m := regexp.MustCompile(`(?is)<[a-z]+\b[^>]*role="alert"[^>]*>(.*?)</`).FindStringSubmatch(body)
	if m == nil {
		return ""
	}
	return strings.TrimSpace(html.UnescapeString(m[1]))
}

// where names a URL in an error without its query, which may carry a code.
func where(u *url.URL) string {
	return u.Scheme + "://" + u.Host + u.Path
}

// snippet shortens a provider's page for an error message.
func snippet(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}
