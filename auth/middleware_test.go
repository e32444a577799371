package auth

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwa"
	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/internal/testutil"
)

// resourceFixture is a resource server over real TLS on 127.0.0.1 whose
// /mcp is behind Middleware, with its log and audit captured.
type resourceFixture struct {
	*verifierFixture
	srv         *httptest.Server
	metadataURL string

	mu     sync.Mutex
	log    bytes.Buffer
	audits []RefusalRecord
}

type safeWriter struct {
	mu  *sync.Mutex
	buf *bytes.Buffer
}

func (w safeWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

// newResourceFixture mounts inner (a handler that reports what it saw when
// nil) behind the middleware.
func newResourceFixture(t *testing.T, inner http.Handler) *resourceFixture {
	t.Helper()
	f := &resourceFixture{verifierFixture: newVerifierFixture(t)}
	// The verifier here uses the wall clock: the SDK's own check behind
	// the middleware does too.
	f.clock = testutil.NewClock(time.Now())
	v, err := NewVerifier(VerifierConfig{
		Provider: f.p.provider(t), Audience: testAudience, AllowedAlgs: []string{"RS256", "ES256"},
		RequiredScopes: []string{"openid"}, JWKSRefreshMin: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	f.v = v
	if inner == nil {
		inner = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c, _ := CallerFromContext(r.Context())
			tok, _ := AccessTokenFromContext(r.Context())
			ti := sdkauth.TokenInfoFromContext(r.Context())
			writeJSON(w, http.StatusOK, map[string]any{
				"caller": c.ID(), "userID": ti.UserID, "scopes": ti.Scopes,
				"tokenMatches": tok == strings.Fields(r.Header.Get("Authorization"))[1],
			})
		})
	}
	logger := slog.New(slog.NewJSONHandler(safeWriter{&f.mu, &f.log}, nil))
	mux := http.NewServeMux()
	f.srv = httptest.NewUnstartedServer(mux)
	f.srv.StartTLS()
	t.Cleanup(f.srv.Close)
	resource := f.srv.URL + "/mcp"
	f.metadataURL, err = MetadataURL(resource)
	if err != nil {
		t.Fatal(err)
	}
	mw := Middleware(f.v, MiddlewareOptions{
		ResourceMetadataURL: f.metadataURL,
		Scopes:              []string{"openid"},
		Logger:              logger,
		Audit: func(r RefusalRecord) {
			f.mu.Lock()
			f.audits = append(f.audits, r)
			f.mu.Unlock()
		},
	})
	mux.Handle("/mcp", mw(inner))
	mp, _ := MetadataPath(resource)
	mux.Handle(mp, MetadataHandler(resource, f.p.issuer(), []string{"openid"}))
	return f
}

func (f *resourceFixture) do(t *testing.T, method, path string, header http.Header) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, f.srv.URL+path, strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

func bearer(tok string) http.Header { return http.Header{"Authorization": {"Bearer " + tok}} }

func TestMiddlewareRefusals(t *testing.T) {
	f := newResourceFixture(t, nil)
	now := time.Now()
	other := newRSAKey(t, "rsa-1")
	claims := func(edit func(map[string]any)) map[string]any {
		c := f.claims()
		c["exp"] = now.Add(5 * time.Minute).Unix()
		c["iat"], c["nbf"] = now.Unix(), now.Unix()
		if edit != nil {
			edit(c)
		}
		return c
	}
	at := func(edit func(map[string]any)) string {
		return sign(t, f.rsa, jwa.RS256, atHeader("rsa-1"), claims(edit))
	}

	type want struct {
		status    int
		class     Class
		challenge string // the exact WWW-Authenticate value
	}
	invalid := func(class Class) want {
		return want{http.StatusUnauthorized, class,
			fmt.Sprintf(`Bearer error="invalid_token", error_description="%s", resource_metadata="%s", scope="openid"`, class, f.metadataURL)}
	}
	tests := []struct {
		name   string
		method string
		path   string
		header func() http.Header
		want   want
	}{
		{"no Authorization header", "POST", "/mcp", func() http.Header { return nil },
			want{401, ClassNoToken, fmt.Sprintf(`Bearer resource_metadata="%s", scope="openid"`, f.metadataURL)}},
		{"Basic credentials", "POST", "/mcp", func() http.Header { return http.Header{"Authorization": {"Basic dXNlcjpwYXNz"}} },
			want{401, ClassNoToken, fmt.Sprintf(`Bearer resource_metadata="%s", scope="openid"`, f.metadataURL)}},
		{"session id but no token", "POST", "/mcp", func() http.Header { return http.Header{"Mcp-Session-Id": {"37D66RCY665Z7BCXZB77XP6R3D"}} },
			want{401, ClassNoToken, fmt.Sprintf(`Bearer resource_metadata="%s", scope="openid"`, f.metadataURL)}},
		{"expired", "POST", "/mcp", func() http.Header {
			return bearer(at(func(c map[string]any) { c["exp"] = now.Add(-time.Hour).Unix() }))
		}, invalid(ClassExpired)},
		{"not yet valid", "GET", "/mcp", func() http.Header {
			return bearer(at(func(c map[string]any) { c["nbf"] = now.Add(time.Hour).Unix() }))
		}, invalid(ClassNotYetValid)},
		{"wrong audience (a Gateway token)", "POST", "/mcp", func() http.Header {
			return bearer(at(func(c map[string]any) { c["aud"] = "gateway-api" }))
		}, invalid(ClassWrongAudience)},
		{"wrong issuer", "POST", "/mcp", func() http.Header {
			return bearer(at(func(c map[string]any) { c["iss"] = "https://127.0.0.1:1/realms/x" }))
		}, invalid(ClassWrongIssuer)},
		{"bad signature", "POST", "/mcp", func() http.Header {
			return bearer(sign(t, other, jwa.RS256, atHeader("rsa-1"), claims(nil)))
		}, invalid(ClassBadSignature)},
		{"unknown key", "DELETE", "/mcp", func() http.Header {
			return bearer(sign(t, other, jwa.RS256, atHeader("rsa-unknown"), claims(nil)))
		}, invalid(ClassUnknownKey)},
		{"ID token", "POST", "/mcp", func() http.Header {
			return bearer(sign(t, f.rsa, jwa.RS256, map[string]any{"typ": "JWT", "kid": "rsa-1"},
				claims(func(c map[string]any) { c["typ"] = "ID"; c["azp"] = "mcp-host"; c["nonce"] = "abc" })))
		}, invalid(ClassNotAnAccessToken)},
		{"alg none", "POST", "/mcp", func() http.Header {
			return bearer(unsigned(t, map[string]any{"alg": "none", "typ": "at+jwt", "kid": "rsa-1"}, claims(nil)))
		}, invalid(ClassInvalid)},
		{"malformed", "POST", "/mcp", func() http.Header { return bearer("definitely-not-a-jwt") }, invalid(ClassMalformed)},
		{"Bearer with two words", "POST", "/mcp", func() http.Header {
			return http.Header{"Authorization": {"Bearer abc def"}}
		}, invalid(ClassMalformed)},
		{"claim missing", "POST", "/mcp", func() http.Header {
			return bearer(at(func(c map[string]any) { delete(c, "sub") }))
		}, invalid(ClassClaimMissing)},
		{"insufficient scope", "POST", "/mcp", func() http.Header {
			return bearer(at(func(c map[string]any) { c["scope"] = "profile" }))
		}, want{http.StatusForbidden, ClassInsufficientScope,
			fmt.Sprintf(`Bearer error="insufficient_scope", scope="openid", resource_metadata="%s"`, f.metadataURL)}},
		{"token in the query", "POST", "/mcp?access_token=" + at(nil), func() http.Header { return nil },
			want{http.StatusBadRequest, ClassMalformed,
				fmt.Sprintf(`Bearer error="invalid_request", error_description="malformed", resource_metadata="%s", scope="openid"`, f.metadataURL)}},
		{"two Authorization headers", "POST", "/mcp", func() http.Header {
			return http.Header{"Authorization": {"Bearer " + at(nil), "Bearer " + at(nil)}}
		}, want{http.StatusBadRequest, ClassMalformed,
			fmt.Sprintf(`Bearer error="invalid_request", error_description="malformed", resource_metadata="%s", scope="openid"`, f.metadataURL)}},
	}

	var secrets []string // every token sent, and what is inside them
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f.mu.Lock()
			f.log.Reset()
			f.audits = nil
			f.mu.Unlock()

			h := tc.header()
			for _, v := range h.Values("Authorization") {
				secrets = append(secrets, strings.Fields(v)[1:]...)
			}
			if _, q, ok := strings.Cut(tc.path, "access_token="); ok {
				secrets = append(secrets, q)
			}
			resp, body := f.do(t, tc.method, tc.path, h)
			if resp.StatusCode != tc.want.status {
				t.Fatalf("status %d, want %d (body %s)", resp.StatusCode, tc.want.status, body)
			}
			if got := resp.Header.Values("WWW-Authenticate"); len(got) != 1 || got[0] != tc.want.challenge {
				t.Errorf("WWW-Authenticate\n got %q\nwant %q", got, tc.want.challenge)
			}
			var b map[string]string
			if err := json.Unmarshal(body, &b); err != nil || b["class"] != string(tc.want.class) {
				t.Errorf("body %s", body)
			}

			f.mu.Lock()
			logText, audits := f.log.String(), f.audits
			f.mu.Unlock()
			lines := strings.Split(strings.TrimSpace(logText), "\n")
			if len(lines) != 1 {
				t.Fatalf("%d log lines, want 1: %s", len(lines), logText)
			}
			var line map[string]any
			if err := json.Unmarshal([]byte(lines[0]), &line); err != nil {
				t.Fatal(err)
			}
			if line["event"] != "auth-refused" || line["class"] != string(tc.want.class) || line["status"] != float64(tc.want.status) ||
				line["method"] != tc.method || line["path"] != "/mcp" || line["reason"] == "" {
				t.Errorf("log line %s", lines[0])
			}
			if len(audits) != 1 {
				t.Fatalf("%d audit records, want 1", len(audits))
			}
			a := audits[0]
			if a.Event != "auth-refused" || a.Class != tc.want.class || a.Status != tc.want.status || a.Method != tc.method ||
				a.Path != "/mcp" || a.Reason == "" || a.TS.IsZero() || a.TS.Location() != time.UTC {
				t.Errorf("audit record %+v", a)
			}
			aj, _ := json.Marshal(a)
			for _, s := range append([]string{testSubject, "rsa-1", "rsa-unknown", "mcp-host", "Bearer", "Basic", "dXNlcjpwYXNz", "37D66RCY"}, secretsOf(secrets)...) {
				if strings.Contains(logText, s) || strings.Contains(string(aj), s) || strings.Contains(string(body), s) {
					t.Errorf("%q appears in the log, audit record or body", s)
				}
			}
		})
	}
}

// secretsOf returns each token and each of its non-trivial segments.
func secretsOf(tokens []string) []string {
	var out []string
	for _, tok := range tokens {
		out = append(out, tok)
		for _, seg := range strings.Split(tok, ".") {
			if len(seg) >= 8 {
				out = append(out, seg)
			}
		}
	}
	return out
}

func TestMiddlewareAccepts(t *testing.T) {
	f := newResourceFixture(t, nil)
	now := time.Now()
	c := f.claims()
	c["exp"], c["iat"], c["nbf"] = now.Add(5*time.Minute).Unix(), now.Unix(), now.Unix()
	kc := f.keycloakClaims()
	kc["exp"], kc["iat"], kc["nbf"] = c["exp"], c["iat"], c["nbf"]
	for name, tok := range map[string]string{
		"RFC 9068":  sign(t, f.rsa, jwa.RS256, atHeader("rsa-1"), c),
		"Keycloak":  sign(t, f.rsa, jwa.RS256, map[string]any{"typ": "JWT", "kid": "rsa-1"}, kc),
		"EC, P-256": sign(t, f.ec, jwa.ES256, atHeader("ec-1"), c),
	} {
		t.Run(name, func(t *testing.T) {
			resp, body := f.do(t, "POST", "/mcp", http.Header{"Authorization": {"bearer " + tok}})
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			var got struct {
				Caller, UserID string
				Scopes         []string
				TokenMatches   bool
			}
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatal(err)
			}
			want := f.p.issuer() + "|" + testSubject
			if got.Caller != want || got.UserID != want || !got.TokenMatches || strings.Join(got.Scopes, " ") != "openid profile" {
				t.Errorf("handler saw %+v", got)
			}
		})
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.log.Len() != 0 || len(f.audits) != 0 {
		t.Errorf("accepted requests were logged as refusals: %s %v", f.log.String(), f.audits)
	}
}

// TestMiddlewareWithStreamableHandler runs the go-sdk's streamable handler
// behind the middleware: a tool sees the caller in req.Extra.TokenInfo, and
// a session started by one user is refused to another user's token.
func TestMiddlewareWithStreamableHandler(t *testing.T) {
	server := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "0"}, nil)
	type whoOut struct {
		UserID string `json:"userId"`
	}
	mcp.AddTool(server, &mcp.Tool{Name: "whoami"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, whoOut, error) {
		if req.Extra == nil || req.Extra.TokenInfo == nil {
			return nil, whoOut{}, fmt.Errorf("no token info")
		}
		return nil, whoOut{UserID: req.Extra.TokenInfo.UserID}, nil
	})
	f := newResourceFixture(t, mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, &mcp.StreamableHTTPOptions{JSONResponse: true}))

	now := time.Now()
	tokenFor := func(sub string) string {
		c := f.claims()
		c["sub"] = sub
		c["exp"], c["iat"], c["nbf"] = now.Add(5*time.Minute).Unix(), now.Unix(), now.Unix()
		return sign(t, f.rsa, jwa.RS256, atHeader("rsa-1"), c)
	}
	alice, bob := tokenFor("alice"), tokenFor("bob")

	// Through the SDK's own client, with alice's token on every request.
	client := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "0"}, nil)
	// A copy: srv.Client() is shared, and the raw request below must not
	// go through alice's transport.
	httpClient := *f.srv.Client()
	httpClient.Transport = bearerTransport{token: alice, base: httpClient.Transport}
	cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: f.srv.URL + "/mcp", HTTPClient: &httpClient}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "whoami"})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(res.StructuredContent)
	if want := fmt.Sprintf(`{"userId":%q}`, f.p.issuer()+"|alice"); string(got) != want {
		t.Fatalf("tool saw %s, want %s", got, want)
	}

	// Alice's session, presented with bob's token, is refused by the SDK.
	sessionID := cs.ID()
	if sessionID == "" {
		t.Fatal("no session id")
	}
	call := func(tok string) (int, string) {
		h := http.Header{}
		if tok != "" {
			h = bearer(tok)
		}
		h.Set("Mcp-Session-Id", sessionID)
		h.Set("Content-Type", "application/json")
		h.Set("Accept", "application/json, text/event-stream")
		h.Set("Mcp-Protocol-Version", cs.InitializeResult().ProtocolVersion)
		req, _ := http.NewRequest("POST", f.srv.URL+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"whoami","arguments":{}}}`))
		req.Header = h
		resp, err := f.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	// Alice's own token on her session works from a plain request too...
	if code, body := call(alice); code != http.StatusOK || !strings.Contains(body, "|alice") {
		t.Fatalf("alice on her session: %d %s", code, body)
	}
	// ...bob's token on alice's session is refused by the SDK...
	if code, body := call(bob); code != http.StatusForbidden || !strings.Contains(body, "session user mismatch") {
		t.Fatalf("bob on alice's session: %d %s", code, body)
	}
	// ...and the session id alone is no credential.
	if code, _ := call(""); code != http.StatusUnauthorized {
		t.Fatalf("session id without a token: %d", code)
	}
}

type bearerTransport struct {
	token string
	base  http.RoundTripper
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

// TestChallengeLeadsToMetadata follows a host's first step: the 401's
// resource_metadata URL serves metadata whose resource is exactly the URL
// that was called, naming the provider.
func TestChallengeLeadsToMetadata(t *testing.T) {
	f := newResourceFixture(t, nil)
	resp, _ := f.do(t, "POST", "/mcp", nil)
	ch := resp.Header.Get("WWW-Authenticate")
	_, rest, ok := strings.Cut(ch, `resource_metadata="`)
	if !ok {
		t.Fatalf("no resource_metadata in %q", ch)
	}
	u, _, _ := strings.Cut(rest, `"`)
	mresp, err := f.srv.Client().Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer mresp.Body.Close()
	var m struct {
		Resource             string   `json:"resource"`
		AuthorizationServers []string `json:"authorization_servers"`
	}
	if err := json.NewDecoder(mresp.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	if m.Resource != f.srv.URL+"/mcp" || len(m.AuthorizationServers) != 1 || m.AuthorizationServers[0] != f.p.issuer() {
		t.Errorf("metadata %+v", m)
	}
}
