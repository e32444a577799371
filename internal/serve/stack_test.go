package serve_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/auth"
	"github.com/pdmcp/pdmcp/auth/devidp"
	"github.com/pdmcp/pdmcp/auth/devpki"
	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/reference"
	"github.com/pdmcp/pdmcp/gateway/reference/reftest"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/crashpoint"
	"github.com/pdmcp/pdmcp/internal/handofftest"
	"github.com/pdmcp/pdmcp/internal/mcptest"
	"github.com/pdmcp/pdmcp/internal/operator"
	"github.com/pdmcp/pdmcp/internal/serve"
	"github.com/pdmcp/pdmcp/internal/stack"
	"github.com/pdmcp/pdmcp/internal/telemetry"
	"github.com/pdmcp/pdmcp/internal/testutil"
)

// httpStack is the HTTP transport end to end in one process, built by
// internal/stack: a reference Gateway, the development OpenID provider,
// the seeded data with users alice (every document), bob (aurora and the
// criteria) and carol (nothing), and serve.Run serving Streamable HTTP over
// TLS on 127.0.0.1.
type httpStack struct {
	env    *reftest.Env
	st     *stack.Stack
	idp    *devidp.Provider
	issuer string
	caFile string
	hc     *http.Client // trusts the dev CA only
	url    string
	opsURL string
	// exchanges counts token-exchange requests at the provider.
	exchanges atomic.Int64
	audit     string
	stderr    *testutil.LogBuffer
	svc       *gateway.ServiceConfig
	// httpExtra is added to mcp-http.json's members (",\"name\":value").
	httpExtra string
	manifst   string
	// gatewayTimeout, when set, is serve.Options.GatewayTimeout.
	gatewayTimeout time.Duration
	// crashPoint, when set, is serve.Options.CrashPoint.
	crashPoint func(crashpoint.Point)
	// grantCheck, when set, is serve.Options.GrantCheckInterval.
	grantCheck time.Duration
	// hangup, when set, is serve.Options.Hangup (SIGHUP delivered by hand).
	hangup chan os.Signal
	// idpDown makes the provider drop every connection unanswered, as a
	// provider that cannot be reached.
	idpDown atomic.Bool
	// tracing, when set, is serve.Options.Tracing.
	tracing *telemetry.Tracing
}

// stackOption changes what newHTTPStack serves: it may replace the
// manifest and the grant's launch options, after the seed.
type stackOption func(t *testing.T, hs *httpStack, data string, lo *grant.LaunchOptions)

func newHTTPStack(t *testing.T, maxCallers int, opts ...stackOption) *httpStack {
	t.Helper()
	return newHTTPStackAt(t, nil, maxCallers, opts...)
}

// newHTTPStackAt is newHTTPStack with every clock that decides an outcome
// (the Gateway's, the provider's, serve's) reading clock, when it is set.
func newHTTPStackAt(t *testing.T, clock *testutil.Clock, maxCallers int, opts ...stackOption) *httpStack {
	t.Helper()
	dir := t.TempDir()
	var now func() time.Time
	if clock != nil {
		now = clock.Now
	}
	hs := &httpStack{env: reftest.Start(t, reference.Config{Now: now}), stderr: &testutil.LogBuffer{}}
	ca, err := devpki.LoadOrCreateCA(filepath.Join(dir, "ca"), "test")
	if err != nil {
		t.Fatal(err)
	}
	var lo grant.LaunchOptions
	// dave signs in at the provider but is never mapped at the Gateway.
	hs.st, err = stack.Start(context.Background(), stack.Options{Dir: dir, CA: ca, Version: "test",
		Gateway: &stack.Gateway{URL: hs.env.URL, TrustFile: hs.env.CAFile, AdminUser: reftest.AdminUser,
			AdminPasswordFile: hs.env.AdminPasswordFile},
		ServiceName: "svc", SeedTag: "t", SeedUsers: []operator.SeedUser{
			{Name: "alice", Documents: []string{"proposal-aurora", "proposal-borealis", "proposal-cirrus", "proposal-doldrum", "evaluation-criteria"}, Save: true},
			{Name: "bob", Documents: []string{"proposal-aurora", "evaluation-criteria"}},
			{Name: "carol"},
		},
		DevIdP: stack.DevIdP{Users: []devidp.User{{Username: "alice", Password: "pw-a"}, {Username: "bob", Password: "pw-b"},
			{Username: "carol", Password: "pw-c"}, {Username: "dave", Password: "pw-d"}}, Handler: hs.countExchanges, Now: now},
		Identities: map[string]string{"alice": "alice", "bob": "bob", "carol": "carol"},
		Prepare: func(_ context.Context, st *stack.Stack) error {
			hs.svc, hs.manifst = st.Service, st.ManifestPath
			lo = grant.LaunchOptions{ManifestPath: st.ManifestPath, AllApproved: true, CallerIdentity: true,
				TTL: time.Hour, Out: st.GrantPath}
			if clock != nil {
				lo.Now = clock.Now()
			}
			for _, o := range opts {
				o(t, hs, st.Data, &lo)
			}
			return nil
		},
		Grant: func(l *grant.LaunchOptions) { *l = lo },
		HTTP: func(c *auth.HTTPConfig) {
			c.MaxCallers, c.Provider.JWKSRefreshMinSeconds = maxCallers, 1
			if hs.httpExtra != "" {
				if err := json.Unmarshal([]byte("{"+strings.TrimPrefix(hs.httpExtra, ",")+"}"), c); err != nil {
					t.Fatalf("mcp-http.json members %s: %v", hs.httpExtra, err)
				}
			}
		},
		Serve: func(o *serve.Options) {
			o.GatewayTimeout, o.Logger = hs.gatewayTimeout, slog.New(slog.NewTextHandler(hs.stderr, nil))
			o.OpsAddr, o.OpsReady = "127.0.0.1:0", func(u string) { hs.opsURL = u }
			o.CrashPoint = hs.crashPoint
			o.GrantCheckInterval = hs.grantCheck
			o.Now, o.Hangup = now, hs.hangup
			o.Tracing = hs.tracing
		},
	})
	if err != nil {
		t.Fatalf("start the stack: %v", err)
	}
	t.Cleanup(hs.st.Close)
	hs.idp, hs.issuer, hs.caFile, hs.hc = hs.st.IdP, hs.st.Provider.Issuer, ca.CertPEM, hs.st.HC
	hs.url, hs.audit = hs.st.MCPURL, hs.st.AuditPath
	return hs
}

// countExchanges counts the token exchanges the provider is asked for.
func (hs *httpStack) countExchanges(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hs.idpDown.Load() {
			if hj, ok := w.(http.Hijacker); ok {
				if conn, _, err := hj.Hijack(); err == nil {
					conn.Close()
					return
				}
			}
			panic(http.ErrAbortHandler)
		}
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/token") {
			_ = r.ParseForm()
			if strings.HasSuffix(r.PostForm.Get("grant_type"), "token-exchange") {
				hs.exchanges.Add(1)
			}
		}
		h.ServeHTTP(w, r)
	})
}

// stop stops pdmcp, which revokes every user's Gateway session.
func (hs *httpStack) stop() { _ = hs.st.StopMCP() }

// token gets a user's access token through the real code flow.
func (hs *httpStack) token(t *testing.T, user, password string) string {
	t.Helper()
	tok, err := devidp.Login(context.Background(), hs.hc, devidp.LoginParams{Issuer: hs.issuer, ClientID: devidp.DefaultHostClientID,
		RedirectURL: "http://127.0.0.1:18124/callback", Username: user, Password: password, Resource: hs.url})
	if err != nil {
		t.Fatalf("login %s: %v", user, err)
	}
	return tok.AccessToken
}

// connect connects the go-sdk client with a bearer token.
func (hs *httpStack) connect(t *testing.T, token string) *mcp.ClientSession {
	t.Helper()
	return hs.dial(t, "http-test", hs.as(token, nil), nil, nil)
}

// as is an HTTP client that trusts the stack and sends token on every
// request, through base (the stack's own transport when nil).
func (hs *httpStack) as(token string, base http.RoundTripper) *http.Client {
	if base == nil {
		base = hs.hc.Transport
	}
	return stack.BearerClient(token, base)
}

// dial connects a go-sdk client named name over hc, with the client and
// session options given (nil for the SDK's defaults); the session is
// closed when the test ends.
func (hs *httpStack) dial(t *testing.T, name string, hc *http.Client, copts *mcp.ClientOptions, sopts *mcp.ClientSessionOptions) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: name, Version: "1"}, copts)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: hs.url, HTTPClient: hc}, sopts)
	if err != nil {
		t.Fatalf("connect %s: %v", name, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// post sends one JSON-RPC message as a host would, with token, on MCP
// session sid ("" for none), naming protocol revision proto; it returns
// the response, its body read (up to 1 MiB) and closed, and the body.
func (hs *httpStack) post(t *testing.T, token, sid, proto, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", hs.url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", proto)
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
	}
	resp, err := hs.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp, string(b)
}

// auditLines reads every line of the stack's audit file.
func (hs *httpStack) auditLines(t *testing.T) []map[string]any {
	t.Helper()
	return mcptest.AuditLines(t, hs.audit)
}

// withHTTPConfig adds members to mcp-http.json.
func withHTTPConfig(members string) stackOption {
	return func(_ *testing.T, hs *httpStack, _ string, _ *grant.LaunchOptions) { hs.httpExtra += members }
}

// rpc posts one JSON-RPC message as a 2025-11-25 host would, on session sid
// ("" for none), and returns the response.
func (hs *httpStack) rpc(t *testing.T, token, sid, body string) *http.Response {
	t.Helper()
	resp, _ := hs.post(t, token, sid, "2025-11-25", body)
	return resp
}

const initBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"loop","version":"1"}}}`

// initialize opens an MCP session and never ends it, as hosts that send
// no DELETE do.
func (hs *httpStack) initialize(t *testing.T, token string) string {
	t.Helper()
	resp := hs.rpc(t, token, "", initBody)
	sid := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != 200 || sid == "" {
		t.Fatalf("initialize: %d, session %q", resp.StatusCode, sid)
	}
	return sid
}

// metric reads one unlabelled value from /metrics.
func (hs *httpStack) metric(t *testing.T, name string) float64 {
	t.Helper()
	v, ok := hs.scrape(t, name)
	if !ok {
		t.Fatalf("/metrics has no %s", name)
	}
	return v
}

// scrape reads one series from /metrics (its name with its labels, as the
// text format prints them), and whether it is there.
func (hs *httpStack) scrape(t *testing.T, series string) (float64, bool) {
	t.Helper()
	resp, err := http.Get(hs.opsURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f, true
		}
	}
	return 0, false
}

// withSteps serves the hand-off world instead of the seed's documents:
// alice is the patient, bob the doctor, carol the nurse, each signed in
// through the provider and acting as themselves.
func withSteps(w **handofftest.World, o handofftest.Options) stackOption {
	return func(t *testing.T, hs *httpStack, data string, lo *grant.LaunchOptions) {
		o.Patient, o.Doctor, o.Nurse = "t.alice", "t.bob", "t.carol"
		*w = handofftest.BuildWith(t, hs.svc, hs.env.ServiceClient(t, hs.svc), filepath.Join(data, "steps"), o)
		hs.manifst = (*w).Manifest
		lo.ManifestPath = (*w).Manifest
		lo.AllApproved = false
		lo.Documents = []string{handofftest.DocID, handofftest.PlainDocID}
		lo.Tools = []string{grant.ToolListApprovedDocuments, grant.ToolReadProtectedDocument, grant.ToolHandOff,
			grant.ToolCloseStep, grant.ToolReadProtectedFragment, grant.ToolSaveProtectedFragment}
		lo.Steps = []string{handofftest.StepReferral, handofftest.StepByNurse}
	}
}
