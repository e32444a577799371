package serve_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/auth/devidp"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/reference"
	"github.com/pdmcp/pdmcp/gateway/reference/reftest"
	"github.com/pdmcp/pdmcp/internal/mcptest"
	"github.com/pdmcp/pdmcp/internal/serve"
	"github.com/pdmcp/pdmcp/server"
	"github.com/pdmcp/pdmcp/server/refusal"
)

func TestHTTPUsersEachActAsThemselves(t *testing.T) {
	hs := newHTTPStack(t, 8)
	alice := hs.connect(t, hs.token(t, "alice", "pw-a"))
	bob := hs.connect(t, hs.token(t, "bob", "pw-b"))
	carol := hs.connect(t, hs.token(t, "carol", "pw-c"))

	var wg sync.WaitGroup
	type result struct {
		m     map[string]any
		isErr bool
	}
	results := map[string]result{}
	var mu sync.Mutex
	for name, cs := range map[string]*mcp.ClientSession{"alice": alice, "bob": bob, "carol": carol} {
		for _, doc := range []string{"proposal-aurora", "proposal-cirrus"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				m, e := mcptest.Call(t, cs, "read_protected_document", map[string]any{"documentId": doc})
				mu.Lock()
				results[name+"/"+doc] = result{m, e}
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	want := map[string]string{
		"alice/proposal-aurora": "", "alice/proposal-cirrus": "",
		"bob/proposal-aurora": "", "bob/proposal-cirrus": "ACL_DENIED",
		"carol/proposal-aurora": "ACL_DENIED", "carol/proposal-cirrus": "ACL_DENIED",
	}
	for k, code := range want {
		r := results[k]
		if code == "" {
			if r.isErr || !strings.Contains(r.m["text"].(string), "Supplier proposal") {
				t.Errorf("%s: %v", k, r.m)
			}
			continue
		}
		if !r.isErr || r.m["layer"] != "keyserver" || r.m["code"] != code {
			t.Errorf("%s: got %v, want keyserver %s", k, r.m, code)
		}
	}
	// Each user's own session and key: three distinct holder keys, each
	// acting as that user's principal, in the audit.
	jkts := map[string]string{}
	for _, m := range hs.auditLines(t) {
		if m["tool"] == "read_protected_document" && m["jkt"] != nil {
			actingAs := m["actingAs"].(string)
			if prev, ok := jkts[actingAs]; ok && prev != m["jkt"] {
				t.Errorf("%s used two holder keys", actingAs)
			}
			jkts[actingAs] = m["jkt"].(string)
		}
	}
	if len(jkts) != 3 {
		t.Errorf("holder keys by principal: %v, want three", jkts)
	}
	seen := map[string]bool{}
	for _, j := range jkts {
		if seen[j] {
			t.Error("two users share a holder key")
		}
		seen[j] = true
	}
	// Stopping the server (SIGTERM or SIGINT in pdmcp serve) revokes every
	// user's session.
	revokes := hs.env.Gateway.Count(api.RouteRevoke)
	hs.stop()
	if got := hs.env.Gateway.Count(api.RouteRevoke) - revokes; got != 3 {
		t.Errorf("revokes at shutdown: %d, want 3 (one per user)", got)
	}
}

func TestHTTPSavesAreKeptApartPerUser(t *testing.T) {
	hs := newHTTPStack(t, 8)
	alice := hs.connect(t, hs.token(t, "alice", "pw-a"))
	args := map[string]any{"destinationId": "evaluation-summary", "text": "alice's summary", "idempotencyKey": "same-key"}
	a, isErr := mcptest.Call(t, alice, "save_protected_result", args)
	if isErr {
		t.Fatal(a)
	}
	// bob has no entry on the destination's key: his save with the same
	// key is his own call, refused by the key server, not alice's receipt.
	bob := hs.connect(t, hs.token(t, "bob", "pw-b"))
	b, isErr := mcptest.Call(t, bob, "save_protected_result", args)
	if !isErr || b["layer"] != "keyserver" {
		t.Fatalf("bob's save with alice's idempotencyKey: %v", b)
	}
	again, isErr := mcptest.Call(t, alice, "save_protected_result", args)
	if isErr || again["replayed"] != true || again["version"] != a["version"] {
		t.Fatalf("alice's retry: %v", again)
	}
}

func TestHTTPSessionIDWithAnotherUsersTokenIsRefused(t *testing.T) {
	hs := newHTTPStack(t, 8)
	alice, bob := hs.token(t, "alice", "pw-a"), hs.token(t, "bob", "pw-b")
	sid := hs.initialize(t, alice)
	if resp := hs.rpc(t, bob, sid, `{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}`); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("bob on alice's session: %d, want 403", resp.StatusCode)
	}
}

func TestHTTPRefusedRequestsAndMetadata(t *testing.T) {
	hs := newHTTPStack(t, 8)
	resp, err := hs.hc.Post(hs.url, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	challenge := resp.Header.Get("WWW-Authenticate")
	if resp.StatusCode != 401 || !strings.Contains(challenge, `resource_metadata="`) {
		t.Fatalf("no token: %d %q", resp.StatusCode, challenge)
	}
	metaURL := challenge[strings.Index(challenge, `resource_metadata="`)+len(`resource_metadata="`):]
	metaURL = metaURL[:strings.Index(metaURL, `"`)]
	mresp, err := hs.hc.Get(metaURL)
	if err != nil {
		t.Fatal(err)
	}
	var meta map[string]any
	_ = json.NewDecoder(mresp.Body).Decode(&meta)
	mresp.Body.Close()
	if meta["resource"] != hs.url {
		t.Errorf("metadata resource %v, want %s", meta["resource"], hs.url)
	}
	if servers, _ := meta["authorization_servers"].([]any); len(servers) != 1 || servers[0] != hs.issuer {
		t.Errorf("authorization_servers %v, want [%s]", meta["authorization_servers"], hs.issuer)
	}

	// An ID token is not an access token; a tampered token is refused.
	tok := hs.token(t, "alice", "pw-a")
	for name, bad := range map[string]string{"tampered": tok[:len(tok)-4] + "AAAA", "garbage": "not-a-token"} {
		req, _ := http.NewRequest("POST", hs.url, strings.NewReader(`{}`))
		req.Header.Set("Authorization", "Bearer "+bad)
		resp, err := hs.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 || !strings.Contains(resp.Header.Get("WWW-Authenticate"), `error="invalid_token"`) {
			t.Errorf("%s token: %d %q", name, resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
		}
	}
	hs.stop()
	b, _ := os.ReadFile(hs.audit)
	if !strings.Contains(string(b), `"event":"auth-refused","class":"no-token"`) ||
		!strings.Contains(string(b), `"class":"bad-signature"`) || !strings.Contains(string(b), `"class":"malformed"`) {
		t.Errorf("audit lacks auth-refused lines:\n%s", b)
	}
	for _, where := range []string{string(b), hs.stderr.String()} {
		if strings.Contains(where, tok[20:60]) {
			t.Error("a token reached the audit file or the log")
		}
	}
}

func TestHTTPOriginAndHost(t *testing.T) {
	hs := newHTTPStack(t, 8)
	tok := hs.token(t, "alice", "pw-a")
	do := func(mutate func(*http.Request)) int {
		req, _ := http.NewRequest("POST", hs.url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		mutate(req)
		resp, err := hs.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := do(func(r *http.Request) { r.Header.Set("Origin", "https://evil.example") }); got != 403 {
		t.Errorf("foreign Origin: %d, want 403", got)
	}
	if got := do(func(r *http.Request) { r.Host = "evil.example" }); got != 403 {
		t.Errorf("foreign Host: %d, want 403", got)
	}
	if got := do(func(r *http.Request) {
		r.Body = io.NopCloser(bytes.NewReader(make([]byte, serve.MaxRequestBytes+1)))
		r.ContentLength = serve.MaxRequestBytes + 1
	}); got != 413 {
		t.Errorf("oversized body: %d, want 413", got)
	}
}

func TestHTTPEvictionReloginAndIdPUnavailable(t *testing.T) {
	hs := newHTTPStack(t, 2)
	alice := hs.connect(t, hs.token(t, "alice", "pw-a"))
	bob := hs.connect(t, hs.token(t, "bob", "pw-b"))
	carol := hs.connect(t, hs.token(t, "carol", "pw-c"))
	read := func(cs *mcp.ClientSession) (map[string]any, bool) {
		return mcptest.Call(t, cs, "read_protected_document", map[string]any{"documentId": "proposal-aurora"})
	}
	if m, e := read(alice); e {
		t.Fatal(m)
	}
	if m, e := read(bob); e {
		t.Fatal(m)
	}
	revokes := hs.env.Gateway.Count(api.RouteRevoke)
	read(carol) // a third caller: alice, the least recent, is evicted
	if hs.env.Gateway.Count(api.RouteRevoke) != revokes+1 {
		t.Errorf("no session was revoked when a third caller came with maxCallers 2")
	}
	mints := hs.env.Gateway.Count(api.RouteScoped)
	if m, e := read(alice); e {
		t.Fatalf("alice after eviction: %v", m)
	}
	if hs.env.Gateway.Count(api.RouteScoped) != mints+1 {
		t.Error("alice was not served by a new session on her return")
	}

	// The Gateway dropped the service session: one sign-in, then on.
	hs.env.Gateway.DropServiceSessions()
	dave := hs.connect(t, hs.token(t, "dave", "pw-d"))
	m, e := read(dave)
	if !e || m["code"] != "IDENTITY_NOT_MAPPED" || m["layer"] != "gateway" {
		t.Fatalf("an unmapped user: %v", m)
	}
	if m, e := read(alice); e {
		t.Fatalf("alice after dave's refusal: %v", m)
	}
	b, _ := os.ReadFile(hs.audit)
	if !strings.Contains(string(b), `"serviceRelogin":true`) {
		t.Error("no audit line says serviceRelogin: true")
	}

	// dave's refusal is final: within the pool's RefusedFor his next call
	// is answered it again, with nothing sent to the Gateway.
	mints = hs.env.Gateway.Count(api.RouteScoped)
	if m, e := read(dave); !e || m["code"] != "IDENTITY_NOT_MAPPED" || hs.env.Gateway.Count(api.RouteScoped) != mints {
		t.Fatalf("an unmapped user's second call: %v, %d mints sent", m, hs.env.Gateway.Count(api.RouteScoped)-mints)
	}

	// A long IDP_UNAVAILABLE is returned with retryAfter for a fresh mint:
	// bob's, whose session alice's return ended.
	hs.env.Gateway.SetFaults(reference.Faults{IdPUnavailable: 30 * time.Second})
	bob2 := hs.connect(t, hs.token(t, "bob", "pw-b"))
	m, e = read(bob2)
	if !e || m["code"] != "IDP_UNAVAILABLE" {
		t.Fatalf("IDP_UNAVAILABLE: %v", m)
	}
	if ra, _ := m["retryAfter"].(float64); ra < 1 {
		t.Errorf("no retryAfter in %v", m)
	}
	hs.env.Gateway.SetFaults(reference.Faults{})
}

// TestHTTPEveryProtocolRevision connects a go-sdk client speaking each
// revision the SDK supports: the session-less newest one goes to the
// stateless handler, the others keep a session bound to the user.
func TestHTTPEveryProtocolRevision(t *testing.T) {
	hs := newHTTPStack(t, 8)
	tok := hs.token(t, "alice", "pw-a")
	for _, v := range mcp.SupportedProtocolVersions() {
		t.Run(v, func(t *testing.T) {
			cs := hs.dial(t, "rev-"+v, hs.as(tok, nil), nil, &mcp.ClientSessionOptions{ProtocolVersion: v})
			if got := cs.InitializeResult().ProtocolVersion; got != v {
				t.Errorf("negotiated %s, asked for %s", got, v)
			}
			m, isErr := mcptest.Call(t, cs, "read_protected_document", map[string]any{"documentId": "evaluation-criteria"})
			if isErr {
				t.Fatalf("read over %s: %v", v, m)
			}
		})
	}
}

func TestHTTPOperationsEndpoints(t *testing.T) {
	hs := newHTTPStack(t, 8)
	alice := hs.connect(t, hs.token(t, "alice", "pw-a"))
	if m, isErr := mcptest.Call(t, alice, "read_protected_document", map[string]any{"documentId": "proposal-aurora"}); isErr {
		t.Fatal(m)
	}
	mcptest.Call(t, alice, "read_protected_document", map[string]any{"documentId": "nope"})
	// A tool name is the model's own text: one this build does not offer
	// must not become a label on the unauthenticated /metrics (it could
	// carry document text, and each new name is a new series).
	const madeUp = "copy_of_secret_words_in_a_tool_name"
	if m, isErr := mcptest.Call(t, alice, madeUp, map[string]any{}); !isErr || m["code"] != string(refusal.ToolNotInGrant) {
		t.Fatalf("made-up tool: %v", m)
	}
	resp, err := hs.hc.Post(hs.url, "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	get := func(path string) string {
		resp, err := http.Get(hs.opsURL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d", path, resp.StatusCode)
		}
		return string(b)
	}
	var health map[string]any
	if err := json.Unmarshal([]byte(get("/healthz")), &health); err != nil || health["status"] != "ok" || health["version"] != "test" {
		t.Errorf("healthz: %v %v", health, err)
	}
	metrics := get("/metrics")
	for _, want := range []string{
		`pdmcp_tool_calls_total{code="",layer="",outcome="ok",tool="read_protected_document"} 1`,
		`pdmcp_tool_calls_total{code="DOCUMENT_NOT_IN_GRANT",layer="adapter",outcome="refused",tool="read_protected_document"} 1`,
		`pdmcp_http_refusals_total{class="no-token",status="401"} 1`,
		`pdmcp_gateway_sessions 1`,
		`pdmcp_gateway_request_seconds_count{route="/api/v1/crypto/decrypt",status="2xx"} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(metrics, "alice") || strings.Contains(metrics, "proposal-aurora") {
		t.Error("metrics name a user or a document")
	}
	if strings.Contains(metrics, madeUp) {
		t.Error("metrics carry a tool name the model made up")
	}
	if want := `pdmcp_tool_calls_total{code="TOOL_NOT_IN_GRANT",layer="adapter",outcome="refused",tool="unknown"} 1`; !strings.Contains(metrics, want) {
		t.Errorf("metrics lack %s", want)
	}
}

func TestHTTPMalformedAndBatchKeepServing(t *testing.T) {
	hs := newHTTPStack(t, 8)
	tok := hs.token(t, "alice", "pw-a")
	post := func(body string) (int, string) {
		resp, b := hs.post(t, tok, "", "2025-11-25", body)
		return resp.StatusCode, b
	}
	for name, body := range map[string]string{
		"malformed": `{"jsonrpc":"2.0","id":1,"method":`,
		"batch": `[{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"b","version":"1"}}},` +
			`{"jsonrpc":"2.0","id":2,"method":"tools/list"}]`,
	} {
		status, b := post(body)
		var rpc struct {
			JSONRPC string `json:"jsonrpc"`
			Error   struct {
				Code int `json:"code"`
			} `json:"error"`
		}
		if status != 400 || json.Unmarshal([]byte(b), &rpc) != nil || rpc.JSONRPC != "2.0" || rpc.Error.Code == 0 {
			t.Errorf("%s: %d %s, want a JSON-RPC error", name, status, b)
		}
	}
	cs := hs.connect(t, tok)
	if m, isErr := mcptest.Call(t, cs, "list_approved_documents", map[string]any{}); isErr {
		t.Fatalf("the server stopped serving after bad requests: %v", m)
	}
}

func TestHTTPServerNamesItsBuild(t *testing.T) {
	hs := newHTTPStack(t, 8)
	cs := hs.connect(t, hs.token(t, "alice", "pw-a"))
	res := cs.InitializeResult()
	if res.ServerInfo.Name != server.Name || res.ServerInfo.Version != "test" {
		t.Errorf("serverInfo %+v", res.ServerInfo)
	}
	if !strings.Contains(res.Instructions, server.Name+" test") {
		t.Errorf("instructions do not name the build: %q", res.Instructions)
	}
}

// TestHTTPGoSDKOAuthClient starts from a bare 401 with the go-sdk's own
// OAuth client: it discovers the metadata and the provider, runs the code
// flow with PKCE against the development provider (the sign-in form filled
// by a script, as a person would in a browser), then calls tools as that
// user; another user's client is refused what the key server refuses them.
func TestHTTPGoSDKOAuthClient(t *testing.T) {
	hs := newHTTPStack(t, 8)
	connect := func(user, password string) *mcp.ClientSession {
		return mcptest.ConnectOAuth(t, hs.url, mcptest.SignIn{Issuer: hs.issuer, ClientID: devidp.DefaultHostClientID,
			RedirectURL: "http://127.0.0.1:18124/callback", User: user, Password: password, HC: hs.hc})
	}
	alice := connect("alice", "pw-a")
	if m, isErr := mcptest.Call(t, alice, "read_protected_document", map[string]any{"documentId": "proposal-cirrus"}); isErr {
		t.Fatalf("alice: %v", m)
	}
	bob := connect("bob", "pw-b")
	m, isErr := mcptest.Call(t, bob, "read_protected_document", map[string]any{"documentId": "proposal-cirrus"})
	if !isErr || m["layer"] != "keyserver" || m["code"] != "ACL_DENIED" {
		t.Fatalf("bob on a document he may not read: %v", m)
	}
}

// TestHTTPRefusedExchangedTokenIsNotReused: after the Gateway refuses an
// exchanged token (SUBJECT_TOKEN_REFUSED), the next call exchanges afresh
// instead of presenting the cached one again.
func TestHTTPRefusedExchangedTokenIsNotReused(t *testing.T) {
	hs := newHTTPStack(t, 8)
	ctx := context.Background()
	caPEM, _ := os.ReadFile(hs.caFile)
	admin := hs.env.Client(t).Admin(reftest.AdminUser, reftest.AdminPassword)
	bind := func(client string) {
		if err := admin.BindProvider(ctx, api.BindProviderRequest{ServiceID: hs.svc.ServiceID, Issuer: hs.issuer,
			Audience: devidp.DefaultGatewayAudience, AllowedClient: client, CAPEM: string(caPEM)}); err != nil {
			t.Fatal(err)
		}
	}
	bob := hs.connect(t, hs.token(t, "bob", "pw-b"))
	bind("some-other-client")
	m, isErr := mcptest.Call(t, bob, "read_protected_document", map[string]any{"documentId": "proposal-aurora"})
	if !isErr || m["code"] != "SUBJECT_TOKEN_REFUSED" {
		t.Fatalf("with the provider bound to another client: %v", m)
	}
	bind(devidp.DefaultAdapterClientID)
	before := hs.exchanges.Load()
	if m, isErr := mcptest.Call(t, bob, "read_protected_document", map[string]any{"documentId": "proposal-aurora"}); isErr {
		t.Fatalf("after the binding is fixed: %v", m)
	}
	if got := hs.exchanges.Load() - before; got != 1 {
		t.Errorf("token exchanges after the refusal: %d, want 1 (the refused token must not be reused)", got)
	}
}

// TestHTTPListLineNamesThePooledSession: over HTTP, a list after a read
// names the caller's pooled Gateway session, as the read does.
func TestHTTPListLineNamesThePooledSession(t *testing.T) {
	hs := newHTTPStack(t, 8)
	alice := hs.connect(t, hs.token(t, "alice", "pw-a"))
	if m, isErr := mcptest.Call(t, alice, "read_protected_document", map[string]any{"documentId": "proposal-aurora"}); isErr {
		t.Fatal(m)
	}
	if m, isErr := mcptest.Call(t, alice, "list_approved_documents", map[string]any{}); isErr {
		t.Fatal(m)
	}
	hs.stop()
	lines := hs.auditLines(t)
	byTool := map[string]map[string]any{}
	for _, m := range lines {
		if m["event"] == "tool" {
			byTool[m["tool"].(string)] = m
		}
	}
	read, list := byTool["read_protected_document"], byTool["list_approved_documents"]
	if read == nil || list == nil {
		t.Fatalf("audit lacks the read or the list:\n%v", lines)
	}
	for _, k := range []string{"actingAs", "jkt", "handleDigest"} {
		if s, _ := read[k].(string); s == "" || list[k] != read[k] {
			t.Errorf("%s: read %v, list %v", k, read[k], list[k])
		}
	}
}

// TestHTTPSlowSaveDoesNotBlockAnotherUser: while the Gateway holds bob's
// encrypt, alice's save runs to its receipt; bob's save is still waiting
// when alice's returns, and ends once the Gateway lets it go.
func TestHTTPSlowSaveDoesNotBlockAnotherUser(t *testing.T) {
	hs := newHTTPStack(t, 8)
	alice := hs.connect(t, hs.token(t, "alice", "pw-a"))
	bob := hs.connect(t, hs.token(t, "bob", "pw-b"))
	// Held until the faults change: the order below does not depend on
	// how fast the machine is.
	hs.env.Gateway.SetFaults(reference.Faults{Delay: time.Hour, DelayActingAs: hs.svc.Prefix + "t.bob"})
	t.Cleanup(func() { hs.env.Gateway.SetFaults(reference.Faults{}) })

	encrypts := hs.env.Gateway.Count(api.RouteEncrypt)
	bobDone := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, err := bob.CallTool(context.Background(), &mcp.CallToolParams{Name: "save_protected_result",
			Arguments: map[string]any{"destinationId": "evaluation-summary", "text": "bob's summary", "idempotencyKey": "b-1"}})
		if err != nil {
			res = nil
		}
		bobDone <- res
	}()
	for hs.env.Gateway.Count(api.RouteEncrypt) == encrypts {
		time.Sleep(time.Millisecond)
	}

	a, isErr := mcptest.Call(t, alice, "save_protected_result",
		map[string]any{"destinationId": "evaluation-summary", "text": "alice's summary", "idempotencyKey": "a-1"})
	if isErr || a["version"] != float64(1) {
		t.Fatalf("alice's save while bob's encrypt is held: %v", a)
	}
	select {
	case <-bobDone:
		t.Fatal("bob's save ended before alice's, though the Gateway still held his encrypt")
	default:
	}

	hs.env.Gateway.SetFaults(reference.Faults{})
	res := <-bobDone
	if res == nil {
		t.Fatal("bob's save failed at the protocol level")
	}
	m := mcptest.Result(t, res)
	// bob has no entry on the destination's key: the key server says so.
	if !res.IsError || m["layer"] != "keyserver" {
		t.Fatalf("bob's save after the hold: %v", m)
	}
}
