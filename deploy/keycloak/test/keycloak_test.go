//go:build keycloak

package keycloaktest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/auth"
	"github.com/pdmcp/pdmcp/auth/devidp"
	"github.com/pdmcp/pdmcp/auth/devpki"
	"github.com/pdmcp/pdmcp/gateway/reference"
	"github.com/pdmcp/pdmcp/gateway/reference/reftest"
	"github.com/pdmcp/pdmcp/internal/devstack"
	"github.com/pdmcp/pdmcp/internal/operator"
	wholestack "github.com/pdmcp/pdmcp/internal/stack"
	"github.com/pdmcp/pdmcp/internal/testutil"
	"github.com/pdmcp/pdmcp/server"
)

// The realm's names (deploy/keycloak/realm-pdmcp.json).
const (
	hostClient     = "mcp-host"
	adapterClient  = "mcp-adapter"
	gatewayAud     = "gateway-api"
	redirectURL    = "http://127.0.0.1:18124/callback"
	callbackPort   = 18124
	serverName     = "protected-documents"
	sharedDocument = "proposal-cirrus" // alice may read it, bob may not
)

// kcInfo is keycloak.json, written by keycloak.sh start.
type kcInfo = devstack.KeycloakInfo

func loadInfo(t *testing.T) *kcInfo {
	t.Helper()
	path := os.Getenv("KEYCLOAK_INFO")
	if path == "" {
		t.Fatal("KEYCLOAK_INFO is not set: run this test through deploy/keycloak/test/keycloak.sh run")
	}
	i, err := devstack.LoadKeycloakInfo(path)
	if err != nil {
		t.Fatalf("KEYCLOAK_INFO: %v", err)
	}
	return i
}

// users of the test: alice may read every document, bob part of them, dave
// is disabled during the test, erin signs in with offline_access.
var seedUsers = []operator.SeedUser{
	{Name: "alice", Documents: []string{"proposal-aurora", "proposal-borealis", "proposal-cirrus", "proposal-doldrum", "evaluation-criteria"}, Save: true},
	{Name: "bob", Documents: []string{"proposal-aurora", "evaluation-criteria"}},
	{Name: "dave", Documents: []string{"proposal-aurora"}},
	{Name: "erin", Documents: []string{"proposal-aurora"}},
}

func password(user string) string { return user + "-kc-test-password" }

// stack is pdmcp over HTTPS against Keycloak, with the reference Gateway
// bound to Keycloak as the provider.
type stack struct {
	kc      *kcInfo
	admin   *kcAdmin
	hc      *http.Client // trusts the development CA (Keycloak's and pdmcp's certificates)
	env     *reftest.Env
	st      *wholestack.Stack
	subject map[string]string // user name -> Keycloak user id (the token's sub)
	mcpURL  string
	audit   string
	secret  string // mcp-adapter's client secret, read from Keycloak
	log     *testutil.LogBuffer
}

func newStack(t *testing.T) *stack {
	t.Helper()
	kc := loadInfo(t)
	// pdmcp's certificate comes from the CA that issued Keycloak's.
	ca, err := devpki.LoadOrCreateCA(filepath.Dir(kc.CAFile), "pdmcp dev")
	if err != nil {
		t.Fatal(err)
	}
	s := &stack{kc: kc, subject: map[string]string{}, log: &testutil.LogBuffer{},
		hc: &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{TLSClientConfig: wholestack.TLSConfig(ca)}}}
	s.admin = newAdmin(t, kc, s.hc)

	// The realm's users, made through the admin API (the realm file has
	// none), and the adapter's secret, which Keycloak generated at import.
	identities := map[string]string{}
	for _, u := range seedUsers {
		s.subject[u.Name] = s.admin.ensureUser(t, u.Name, password(u.Name))
		identities[s.subject[u.Name]] = u.Name
	}
	s.secret = s.admin.clientSecret(t, adapterClient)

	// The Gateway, the service, the seed; Keycloak bound as the provider and
	// each user mapped by Keycloak's subject (the user id); pdmcp over HTTPS.
	s.env = reftest.Start(t, reference.Config{})
	s.st, err = wholestack.Start(context.Background(), wholestack.Options{Dir: t.TempDir(), CA: ca, Logger: slogTo(s.log),
		Version: "test", Gateway: &wholestack.Gateway{URL: s.env.URL, TrustFile: s.env.CAFile,
			AdminUser: reftest.AdminUser, AdminPasswordFile: s.env.AdminPasswordFile},
		ServiceName: "svc", SeedTag: "kc", SeedUsers: seedUsers, Identities: identities,
		Provider: &wholestack.Provider{Issuer: kc.Issuer, CAFile: kc.CAFile, ClientID: adapterClient,
			ClientSecret: s.secret, GatewayAudience: gatewayAud},
		HTTP: func(c *auth.HTTPConfig) {
			c.Provider.AllowedAlgs, c.Provider.JWKSRefreshMinSeconds = []string{"RS256"}, 1
		}})
	if err != nil {
		t.Fatalf("start the stack: %v", err)
	}
	t.Cleanup(s.st.Close)
	s.mcpURL, s.audit = s.st.MCPURL, s.st.AuditPath
	return s
}

// stop stops pdmcp, which revokes every caller's Gateway session.
func (s *stack) stop() { _ = s.st.StopMCP() }

// signIn is what the MCP TypeScript SDK's OAuth client does for a user:
// the unauthenticated request and its 401, the protected-resource metadata
// named in the challenge, the authorization server's metadata (the SDK's
// order of well-known URLs), the authorization code request with PKCE S256,
// state and the resource parameter, Keycloak's login form filled as a
// person would, and the code redeemed with the verifier.
type signInResult struct {
	AccessToken  string
	IDToken      string
	RefreshToken string
	ExpiresIn    int
	Scope        string
	metadataURL  string // the authorization-server metadata URL that answered
}

func (s *stack) signIn(t *testing.T, user string, scope string) (*signInResult, error) {
	t.Helper()
	ctx := context.Background()

	// 1. No token: 401 with the protected-resource metadata URL.
	req, _ := http.NewRequest(http.MethodPost, s.mcpURL, strings.NewReader(
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"sdk-like","version":"1"}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := s.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	challenge := resp.Header.Get("WWW-Authenticate")
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("unauthenticated initialize: HTTP %d, want 401", resp.StatusCode)
	}
	prmURL := authParam(challenge, "resource_metadata")
	challengeScope := authParam(challenge, "scope")
	if prmURL == "" {
		t.Fatalf("the 401 names no resource_metadata: %q", challenge)
	}

	// 2. Protected-resource metadata.
	var prm struct {
		Resource             string   `json:"resource"`
		AuthorizationServers []string `json:"authorization_servers"`
		ScopesSupported      []string `json:"scopes_supported"`
	}
	s.getJSON(t, prmURL, &prm)
	if prm.Resource != s.mcpURL || len(prm.AuthorizationServers) != 1 || prm.AuthorizationServers[0] != s.kc.Issuer {
		t.Fatalf("protected-resource metadata: %+v (want resource %s, authorization server %s)", prm, s.mcpURL, s.kc.Issuer)
	}

	// 3. The authorization server's metadata, tried in the SDK's order for
	// an issuer with a path: RFC 8414 with the path after the well-known
	// part, OpenID Connect the same way, then OpenID Connect appended.
	iss, _ := url.Parse(prm.AuthorizationServers[0])
	path := strings.TrimSuffix(iss.Path, "/")
	var asm struct {
		Issuer                string   `json:"issuer"`
		AuthorizationEndpoint string   `json:"authorization_endpoint"`
		TokenEndpoint         string   `json:"token_endpoint"`
		CodeChallengeMethods  []string `json:"code_challenge_methods_supported"`
		ScopesSupported       []string `json:"scopes_supported"`
	}
	res := &signInResult{}
	for _, p := range []string{"/.well-known/oauth-authorization-server" + path, "/.well-known/openid-configuration" + path, path + "/.well-known/openid-configuration"} {
		u := iss.Scheme + "://" + iss.Host + p
		r, err := s.hc.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		if r.StatusCode == http.StatusOK {
			err = json.NewDecoder(r.Body).Decode(&asm)
			r.Body.Close()
			if err != nil {
				t.Fatalf("%s: %v", u, err)
			}
			res.metadataURL = u
			break
		}
		r.Body.Close()
	}
	if res.metadataURL == "" || asm.Issuer != s.kc.Issuer || !slices.Contains(asm.CodeChallengeMethods, "S256") {
		t.Fatalf("authorization server metadata from %q: %+v", res.metadataURL, asm)
	}

	// 4. Authorization code with PKCE; the scope as the SDK picks it (the
	// challenge's, else the resource's).
	if scope == "" {
		scope = challengeScope
		if scope == "" {
			scope = strings.Join(prm.ScopesSupported, " ")
		}
	}
	verifier := randomString(t, 32)
	sum := sha256.Sum256([]byte(verifier))
	state := randomString(t, 16)
	q := url.Values{
		"response_type":         {"code"},
		"client_id":             {hostClient},
		"code_challenge":        {base64.RawURLEncoding.EncodeToString(sum[:])},
		"code_challenge_method": {"S256"},
		"redirect_uri":          {redirectURL},
		"state":                 {state},
		"scope":                 {scope},
		"resource":              {s.mcpURL},
	}
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Timeout: 60 * time.Second, Transport: s.hc.Transport, Jar: jar}
	code, err := devidp.Authorize(ctx, browser, asm.AuthorizationEndpoint+"?"+q.Encode(), redirectURL, user, password(user), state)
	if err != nil {
		return nil, err
	}

	// 5. The code for tokens, as a public client.
	form := url.Values{
		"grant_type":    {"authorization_code"},
		"code":          {code},
		"code_verifier": {verifier},
		"redirect_uri":  {redirectURL},
		"client_id":     {hostClient},
		"resource":      {s.mcpURL},
	}
	r, err := s.hc.PostForm(asm.TokenEndpoint, form)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	body, _ := io.ReadAll(r.Body)
	if r.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("token endpoint: HTTP %d: %s", r.StatusCode, body)
	}
	var tr struct {
		AccessToken  string `json:"access_token"`
		IDToken      string `json:"id_token"`
		RefreshToken string `json:"refresh_token"`
		ExpiresIn    int    `json:"expires_in"`
		Scope        string `json:"scope"`
	}
	if err := json.Unmarshal(body, &tr); err != nil {
		t.Fatal(err)
	}
	res.AccessToken, res.IDToken, res.RefreshToken, res.ExpiresIn, res.Scope = tr.AccessToken, tr.IDToken, tr.RefreshToken, tr.ExpiresIn, tr.Scope
	return res, nil
}

func (s *stack) mustSignIn(t *testing.T, user string) *signInResult {
	t.Helper()
	r, err := s.signIn(t, user, "")
	if err != nil {
		t.Fatalf("sign-in of %s: %v", user, err)
	}
	return r
}

func (s *stack) getJSON(t *testing.T, u string, v any) {
	t.Helper()
	r, err := s.hc.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	if r.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: HTTP %d", u, r.StatusCode)
	}
	if err := json.NewDecoder(r.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
}

// authParam reads one parameter of a WWW-Authenticate challenge.
func authParam(challenge, name string) string {
	i := strings.Index(challenge, name+`="`)
	if i < 0 {
		return ""
	}
	rest := challenge[i+len(name)+2:]
	return rest[:strings.IndexByte(rest, '"')]
}

func randomString(t *testing.T, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// connect opens an MCP session with the go-sdk client and a bearer token.
func (s *stack) connect(t *testing.T, token string) *mcp.ClientSession {
	t.Helper()
	cs, err := wholestack.Connect(context.Background(), s.hc, s.mcpURL, token, "keycloak-test", nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// read calls read_protected_document and returns its structured result.
func read(t *testing.T, cs *mcp.ClientSession, doc string) (map[string]any, bool) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "read_protected_document",
		Arguments: map[string]any{"documentId": doc}})
	if err != nil {
		t.Fatalf("read_protected_document: %v", err)
	}
	v := res.StructuredContent
	if res.IsError {
		// A refusal is carried in the text content only.
		r, ok := server.RefusalOf(res)
		if !ok {
			t.Fatalf("read_protected_document: an isError result that is not a refusal: %+v", res)
		}
		v = r
	}
	b, _ := json.Marshal(v)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return m, res.IsError
}

// bearerStatus sends one MCP request with token and returns the status and
// the challenge.
func (s *stack) bearerStatus(t *testing.T, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, s.mcpURL, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := s.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("WWW-Authenticate")
}

// auditClasses lists the classes of the auth-refused lines in the audit.
func (s *stack) auditLines(t *testing.T) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(s.audit)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

func (s *stack) lastRefusalClass(t *testing.T) string {
	t.Helper()
	lines := s.auditLines(t)
	for i := len(lines) - 1; i >= 0; i-- {
		if lines[i]["event"] == "auth-refused" {
			c, _ := lines[i]["class"].(string)
			return c
		}
	}
	return ""
}

// claims decodes a JWT's header and payload without checking anything: the
// test reports what Keycloak put there.
func claims(t *testing.T, token string) (header, payload map[string]any) {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("not a compact JWT (%d parts)", len(parts))
	}
	for i, dst := range []*map[string]any{&header, &payload} {
		b, err := base64.RawURLEncoding.DecodeString(parts[i])
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, dst); err != nil {
			t.Fatal(err)
		}
	}
	return header, payload
}

func audiences(v any) []string {
	switch a := v.(type) {
	case string:
		return []string{a}
	case []any:
		var out []string
		for _, x := range a {
			if s, ok := x.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// refresh redeems a refresh token as the host (a public client) would and
// returns the new access token.
func (s *stack) refresh(t *testing.T, refreshToken string) string {
	t.Helper()
	tr, st, body := s.refreshRaw(t, refreshToken)
	if st != http.StatusOK || tr.AccessToken == "" {
		t.Fatalf("refresh: HTTP %d: %s", st, body)
	}
	return tr.AccessToken
}

// refreshed is the token endpoint's answer to a refresh.
type refreshed struct {
	AccessToken  string `json:"access_token"`
	RefreshToken string `json:"refresh_token"`
}

// refreshRaw redeems a refresh token as the host would and returns the
// tokens, the status and the body (for refusals).
func (s *stack) refreshRaw(t *testing.T, refreshToken string) (refreshed, int, string) {
	t.Helper()
	r, err := s.hc.PostForm(s.kc.Issuer+"/protocol/openid-connect/token", url.Values{
		"grant_type": {"refresh_token"}, "refresh_token": {refreshToken}, "client_id": {hostClient}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	body, _ := io.ReadAll(r.Body)
	var tr refreshed
	_ = json.Unmarshal(body, &tr)
	return tr, r.StatusCode, string(body)
}

// exchange performs the token exchange pdmcp performs, as mcp-adapter, so
// the test can look at what Keycloak issues for the Gateway.
func (s *stack) exchange(t *testing.T, subjectToken string) (int, map[string]any) {
	t.Helper()
	form := url.Values{
		"grant_type":           {"urn:ietf:params:oauth:grant-type:token-exchange"},
		"subject_token":        {subjectToken},
		"subject_token_type":   {"urn:ietf:params:oauth:token-type:access_token"},
		"requested_token_type": {"urn:ietf:params:oauth:token-type:access_token"},
		"audience":             {gatewayAud},
		"scope":                {gatewayAud},
	}
	req, _ := http.NewRequest(http.MethodPost, s.kc.Issuer+"/protocol/openid-connect/token", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(adapterClient, s.secret)
	resp, err := s.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m
}

func (s *stack) principal(user string) string { return s.st.Principal(user) }

// claudeBin is Claude Code's CLI as testdata/realclients installs it.
func claudeBin(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("PDMCP_CLAUDE"); p != "" {
		return p
	}
	p, err := filepath.Abs("../../../testdata/realclients/node_modules/.bin/claude")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("Claude Code is not installed at %s (run npm ci in testdata/realclients, or set PDMCP_CLAUDE): %v", p, err)
	}
	return p
}

func runClaude(t *testing.T, bin, home, caFile string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = filepath.Join(home, "work")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "CLAUDE_CONFIG_DIR=" + filepath.Join(home, "config"),
		"NODE_EXTRA_CA_CERTS=" + caFile, "DISABLE_AUTOUPDATER=1", "DISABLE_TELEMETRY=1", "DISABLE_ERROR_REPORTING=1",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "ANTHROPIC_BASE_URL=http://127.0.0.1:9"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("claude %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
