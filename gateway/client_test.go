package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/proof"
)

func TestTrustFileOnly(t *testing.T) {
	g := newFakeGateway(t)
	other := newTestCA(t, "other-ca")

	cases := []struct {
		name      string
		trustFile string
		wantErr   bool
	}{
		{"the gateway's CA", g.ca.file, false},
		{"another CA", other.file, true},
		// Without a trust file the system roots are used, and they do not
		// hold the test CA.
		{"system roots", "", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := g.config()
			cfg.TrustFile = tc.trustFile
			c, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			err = c.SignIn(t.Context())
			if !tc.wantErr {
				if err != nil {
					t.Fatalf("SignIn: %v", err)
				}
				return
			}
			ae := asAPIError(t, err)
			if ae.Code != api.CodeUnreachable || ae.Layer != api.LayerGateway || ae.Status != 0 {
				t.Fatalf("got %+v, want gateway GATEWAY_UNREACHABLE status 0", ae)
			}
			var certErr *tls.CertificateVerificationError
			var unknownCA x509.UnknownAuthorityError
			if !errors.As(err, &certErr) && !errors.As(err, &unknownCA) {
				t.Fatalf("cause %v is not a certificate verification failure", ae.Cause)
			}
			// It answered, with a certificate not trusted: named at its
			// URL, and not as a Gateway that did not answer.
			if want := "the Gateway at " + cfg.BaseURL + api.RouteServiceLogin + " is not trusted: "; !strings.HasPrefix(err.Error(), want) ||
				!strings.HasSuffix(err.Error(), "; check trustFile (GATEWAY_UNREACHABLE)") {
				t.Fatalf("text %q, want %q...; check trustFile (GATEWAY_UNREACHABLE)", err, want)
			}
		})
	}
	if n := g.loginCount(); n != 1 {
		t.Fatalf("the gateway saw %d sign-ins, want 1 (only the trusting client gets through)", n)
	}
}

func TestTrustFileMustHoldCertificates(t *testing.T) {
	g := newFakeGateway(t)
	cfg := g.config()
	cfg.TrustFile = g.certFile + ".missing"
	if _, err := New(cfg); err == nil {
		t.Fatal("New accepted a trust file that does not exist")
	}
	cfg.TrustFile = g.loginKeyFile // PEM, but no certificate
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "no PEM certificates") {
		t.Fatalf("New with a key as trust file: %v, want a 'no PEM certificates' error", err)
	}
}

func TestBaseURLSchemes(t *testing.T) {
	cases := []struct {
		url       string
		allowHTTP bool
		ok        bool
	}{
		{"https://gateway.example:8443", false, true},
		{"https://gateway.example/base/", false, true},
		{"HTTPS://127.0.0.1:8443", false, true},
		{"http://127.0.0.1:8080", false, false},
		{"http://127.0.0.1:8080", true, true},
		{"http://localhost:8080", true, true},
		{"http://[::1]:8080", true, true},
		{"http://127.1.2.3:8080", true, true},
		{"http://gateway.example:8080", true, false},
		{"http://10.0.0.1:8080", true, false},
		{"http://localhost.example.com", true, false},
		{"ftp://127.0.0.1", true, false},
		{"https://user:pw@gateway.example", false, false},
		{"https://gateway.example/?a=b", false, false},
		{"https://gateway.example/#frag", false, false},
		{"gateway.example:8443", false, false},
		{"/just/a/path", false, false},
		{"", false, false},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s/allowHTTP=%v", tc.url, tc.allowHTTP), func(t *testing.T) {
			_, err := New(Config{BaseURL: tc.url, AllowHTTPLoopback: tc.allowHTTP})
			if (err == nil) != tc.ok {
				t.Fatalf("New(%q, allowHTTP=%v) error = %v, want ok=%v", tc.url, tc.allowHTTP, err, tc.ok)
			}
		})
	}
}

func TestPlainHTTPOnLoopbackWhenAllowed(t *testing.T) {
	var sawTLS []bool
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		sawTLS = append(sawTLS, r.TLS != nil)
		mu.Unlock()
		writeJSON(w, http.StatusOK, api.Principal{Name: "xa.test.alice"})
	}))
	defer srv.Close()

	if _, err := New(Config{BaseURL: srv.URL}); err == nil {
		t.Fatal("plain http was accepted without AllowHTTPLoopback")
	}
	c, err := New(Config{BaseURL: srv.URL, AllowHTTPLoopback: true})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Admin(testAdminUser, testAdminPassword).GetPrincipal(t.Context(), "xa.test.alice")
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if p.Name != "xa.test.alice" || len(sawTLS) != 1 || sawTLS[0] {
		t.Fatalf("got %+v over TLS=%v, want the principal over plain http", p, sawTLS)
	}
}

func TestNewRejectsBadCredentials(t *testing.T) {
	g := newFakeGateway(t)
	_, otherLogin, otherSender, err := GenerateServiceCredentials(t.TempDir(), "other")
	if err != nil {
		t.Fatal(err)
	}
	loginAsSender, err := LoadLoginKey(g.loginKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"cert missing", func(c *Config) { c.ServiceCertFile = "" }, "together"},
		{"sender missing", func(c *Config) { c.SenderKeyFile = "" }, "together"},
		{"login key of another cert", func(c *Config) { c.LoginKeyFile = otherLogin }, "does not belong"},
		{"sender key is the login key", func(c *Config) { c.SenderKeyFile = g.loginKeyFile }, "must differ"},
		{"file and loaded key", func(c *Config) { c.LoginKey = loginAsSender }, "not both"},
		{"sender not a key", func(c *Config) { c.SenderKeyFile = g.certFile }, "sender key"},
		{"trust file and http client", func(c *Config) { c.HTTPClient = http.DefaultClient }, "not both"},
		{"negative timeout", func(c *Config) { c.Timeout = -time.Second }, "negative"},
		{"ok with another sender", func(c *Config) { c.SenderKeyFile = otherSender }, ""},
		{"ok without any service credentials", func(c *Config) {
			c.ServiceCertFile, c.LoginKeyFile, c.SenderKeyFile = "", "", ""
		}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := g.config()
			tc.edit(&cfg)
			_, err := New(cfg)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestSignInNeedsCredentials(t *testing.T) {
	g := newFakeGateway(t)
	c, err := New(Config{BaseURL: g.srv.URL, TrustFile: g.ca.file})
	if err != nil {
		t.Fatal(err)
	}
	rec := &Recorder{}
	_, err = c.Mint(WithRecorder(t.Context(), rec), MintRequest{ActingAs: "xa.test.alice"})
	if !errors.Is(err, ErrNoServiceCredentials) {
		t.Fatalf("Mint without credentials: %v, want ErrNoServiceCredentials", err)
	}
	if n := len(rec.Requests()); n != 0 {
		t.Fatalf("%d requests sent without credentials, want none", n)
	}
}

func TestLoadedCredentials(t *testing.T) {
	g := newFakeGateway(t)
	cert, err := LoadCertificate(g.certFile)
	if err != nil {
		t.Fatal(err)
	}
	login, err := LoadLoginKey(g.loginKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	sender, err := LoadSenderKey(g.senderKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{BaseURL: g.srv.URL, TrustFile: g.ca.file, ServiceCert: cert, LoginKey: login, SenderKey: sender})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SignIn(t.Context()); err != nil {
		t.Fatal(err)
	}
	if c.Prefix() != "xa.test." || c.SystemID() != 7 || c.ServiceID() != "svc-1" {
		t.Fatalf("after sign-in: prefix %q system %d service %q", c.Prefix(), c.SystemID(), c.ServiceID())
	}
}

func TestSignInOnceForConcurrentCallers(t *testing.T) {
	g := newFakeGateway(t)
	c := g.client(t)
	if c.Prefix() != "" || c.SystemID() != 0 || c.ServiceID() != "" {
		t.Fatal("service identity known before sign-in")
	}
	const callers = 8
	var wg sync.WaitGroup
	errs := make([]error, callers)
	for i := range callers {
		wg.Go(func() { _, errs[i] = c.Mint(t.Context(), MintRequest{ActingAs: "xa.test.alice", TTL: time.Minute}) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if n := g.loginCount(); n != 1 {
		t.Fatalf("%d sign-ins for %d concurrent callers, want 1", n, callers)
	}
	if c.Prefix() != "xa.test." {
		t.Fatalf("prefix %q after sign-in", c.Prefix())
	}
}

func TestReloginOnceOnServiceSessionExpired(t *testing.T) {
	g := newFakeGateway(t)
	c := g.client(t)
	mint := func(rec *Recorder) error {
		_, err := c.Mint(WithRecorder(t.Context(), rec), MintRequest{ActingAs: "xa.test.alice"})
		return err
	}
	first := &Recorder{}
	if err := mint(first); err != nil {
		t.Fatal(err)
	}
	want := []Request{{Route: api.RouteServiceLogin, Status: 200}, {Route: api.RouteScoped, Status: 200}}
	if got := stripLatency(first.Requests()); !slices.Equal(got, want) {
		t.Fatalf("first mint sent %+v, want %+v", got, want)
	}
	if first.ServiceRelogin() {
		t.Fatal("the first sign-in was recorded as a relogin")
	}

	// The Gateway dropped the service session: one relogin, one retry.
	g.dropServiceSessions()
	second := &Recorder{}
	if err := mint(second); err != nil {
		t.Fatalf("mint after the session was dropped: %v", err)
	}
	want = []Request{
		{Route: api.RouteScoped, Status: 401, Code: api.CodeServiceSessionExpired},
		{Route: api.RouteServiceLogin, Status: 200, ServiceRelogin: true},
		{Route: api.RouteScoped, Status: 200, ServiceRelogin: true},
	}
	if got := stripLatency(second.Requests()); !slices.Equal(got, want) {
		t.Fatalf("mint after drop sent %+v, want %+v", got, want)
	}
	if !second.ServiceRelogin() {
		t.Fatal("relogin not reported")
	}
	if n := g.loginCount(); n != 2 {
		t.Fatalf("%d sign-ins, want 2", n)
	}

	// It keeps answering expired: one relogin, and the second refusal is
	// returned.
	g.set(func(g *fakeGateway) { g.expireService = 2 })
	third := &Recorder{}
	err := mint(third)
	if ae := asAPIError(t, err); ae.Code != api.CodeServiceSessionExpired || ae.Status != 401 {
		t.Fatalf("got %+v, want the second SERVICE_SESSION_EXPIRED", ae)
	}
	if n := g.loginCount(); n != 3 {
		t.Fatalf("%d sign-ins, want 3 (exactly one more)", n)
	}
	if got := len(third.Requests()); got != 3 {
		t.Fatalf("%d requests, want 3 (refused, sign-in, refused)", got)
	}
}

func TestServiceRoutesForPrincipals(t *testing.T) {
	g := newFakeGateway(t)
	c := g.client(t)
	ctx := t.Context()
	p, err := c.CreatePrincipal(ctx, api.PrincipalRequest{Name: "xa.test.bob"})
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "xa.test.bob" || p.PrincipalID != "1001" {
		t.Fatalf("created %+v", p)
	}
	if p, err = c.GetPrincipal(ctx, "xa.test.bob"); err != nil || p.Name != "xa.test.bob" {
		t.Fatalf("get: %+v, %v", p, err)
	}
	m := api.MapIdentityRequest{Issuer: "https://idp.example", Subject: "s-1", Principal: "xa.test.bob"}
	for _, err := range []error{c.MapIdentity(ctx, m), c.UnmapIdentity(ctx, m), c.DeletePrincipal(ctx, "xa.test.bob")} {
		if err != nil {
			t.Fatal(err)
		}
	}
	// Every one of those went on the service session with the sender key.
	for _, sp := range g.seenProofs() {
		if sp.route != api.RouteServiceLogin && sp.claims.ATH == "" {
			t.Fatalf("%s proof has no ath", sp.route)
		}
	}
	if n := g.loginCount(); n != 1 {
		t.Fatalf("%d sign-ins, want 1", n)
	}
}

func TestAdminRoutesUseBasicAuth(t *testing.T) {
	g := newFakeGateway(t)
	c, err := New(Config{BaseURL: g.srv.URL, TrustFile: g.ca.file})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	reg, err := ServiceRegistration("svc", g.certFile, g.senderKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	if jkt, err := proof.ThumbprintJSON(reg.SenderJWK); err != nil || jkt != g.senderJKT {
		t.Fatalf("registration's sender JWK thumbprint %q (%v), want %q", jkt, err, g.senderJKT)
	}
	a := c.Admin(testAdminUser, testAdminPassword)
	if out, err := a.RegisterService(ctx, reg); err != nil || out.ServiceID != "svc-1" {
		t.Fatalf("register: %+v, %v", out, err)
	}
	if p, err := a.CreatePrincipal(ctx, api.PrincipalRequest{Name: "xa.test.carol"}); err != nil || p.Name != "xa.test.carol" {
		t.Fatalf("create: %+v, %v", p, err)
	}
	for _, err := range []error{
		a.BindProvider(ctx, api.BindProviderRequest{ServiceID: "svc-1", Issuer: "https://idp.example"}),
		a.MapIdentity(ctx, api.MapIdentityRequest{Issuer: "https://idp.example", Subject: "s", Principal: "xa.test.carol"}),
		a.UnmapIdentity(ctx, api.MapIdentityRequest{Issuer: "https://idp.example", Subject: "s"}),
		a.DeletePrincipal(ctx, "xa.test.carol"),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err = c.Admin(testAdminUser, "wrong").GetPrincipal(ctx, "xa.test.carol")
	if ae := asAPIError(t, err); ae.Code != api.CodeAdminAuthRequired || ae.Status != 401 {
		t.Fatalf("wrong password: %+v", ae)
	}
	if s := fmt.Sprintf("%v %+v %#v %d %x %q", a, a, a, a, a, a); strings.Contains(s, testAdminPassword) {
		t.Fatalf("formatting the admin shows its password: %s", s)
	}
}

func TestProofsBindEachRequest(t *testing.T) {
	g := newFakeGateway(t)
	c := g.client(t)
	ctx := t.Context()
	s, err := c.Mint(ctx, MintRequest{ActingAs: "xa.test.alice", Objects: []string{"t1"}})
	if err != nil {
		t.Fatal(err)
	}
	enc, err := s.Encrypt(ctx, EncryptInput{TTag: "t1", Plaintext: []byte("hello")})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := s.Decrypt(ctx, "t1", enc.IV, enc.Ciphertext); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Widen(ctx, []string{"t2"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Revoke(ctx); err != nil {
		t.Fatal(err)
	}

	handles := g.issuedHandles()
	if len(handles) != 2 {
		t.Fatalf("%d handles issued, want 2 (service, scoped)", len(handles))
	}
	serviceHandle, scopedHandle := handles[0], handles[1]
	seen := g.seenProofs()
	wantRoutes := []string{api.RouteServiceLogin, api.RouteScoped, api.RouteEncrypt,
		api.RouteDecrypt, api.RouteDecrypt, api.RouteDecrypt, api.RouteWiden, api.RouteRevoke}
	var routes []string
	jtis := map[string]bool{}
	for _, sp := range seen {
		routes = append(routes, sp.route)
		if jtis[sp.claims.JTI] {
			t.Fatalf("jti %q used twice", sp.claims.JTI)
		}
		if len(sp.claims.JTI) < 16 {
			t.Fatalf("jti %q is too short to be unique", sp.claims.JTI)
		}
		jtis[sp.claims.JTI] = true
		if sp.claims.HTM != http.MethodPost {
			t.Fatalf("%s: htm %q", sp.route, sp.claims.HTM)
		}
		if want := g.srv.URL + sp.route; sp.claims.HTU != want {
			t.Fatalf("%s: htu %q, want %q", sp.route, sp.claims.HTU, want)
		}
		var wantATH string
		switch sp.route {
		case api.RouteServiceLogin:
		case api.RouteScoped:
			wantATH = proof.ATH(serviceHandle)
		default:
			wantATH = proof.ATH(scopedHandle)
		}
		if sp.claims.ATH != wantATH {
			t.Fatalf("%s: ath %q, want %q", sp.route, sp.claims.ATH, wantATH)
		}
	}
	if !slices.Equal(routes, wantRoutes) {
		t.Fatalf("proofs on %v, want %v", routes, wantRoutes)
	}
}

func TestClockOffsetShiftsIAT(t *testing.T) {
	for _, skew := range []time.Duration{10 * time.Minute, -7 * time.Minute} {
		t.Run(skew.String(), func(t *testing.T) {
			g := newFakeGateway(t)
			g.set(func(g *fakeGateway) { g.skew = skew })
			c := g.client(t)
			if c.ClockOffset() != 0 {
				t.Fatalf("offset %s before any answer", c.ClockOffset())
			}
			rec := &Recorder{}
			ctx := WithRecorder(t.Context(), rec)
			s, err := c.Mint(ctx, MintRequest{ActingAs: "xa.test.alice"})
			if err != nil {
				t.Fatalf("mint against a skewed gateway: %v", err)
			}
			// The first sign-in carried our own clock and was stale; its
			// refusal's Date header re-measured the offset for the retry.
			want := []Request{
				{Route: api.RouteServiceLogin, Status: 401, Code: api.CodeProofStale},
				{Route: api.RouteServiceLogin, Status: 200},
				{Route: api.RouteScoped, Status: 200},
			}
			if got := stripLatency(rec.Requests()); !slices.Equal(got, want) {
				t.Fatalf("sent %+v, want %+v", got, want)
			}
			if off := c.ClockOffset(); off < skew-30*time.Second || off > skew+30*time.Second {
				t.Fatalf("clock offset %s, want about %s", off, skew)
			}
			if _, err := s.Encrypt(ctx, EncryptInput{Plaintext: []byte("x")}); err != nil {
				t.Fatal(err)
			}
			seen := g.seenProofs()
			last := seen[len(seen)-1]
			iat := time.Unix(last.claims.IAT, 0)
			if gwNow := time.Now().Add(skew); iat.Before(gwNow.Add(-30*time.Second)) || iat.After(gwNow.Add(30*time.Second)) {
				t.Fatalf("iat %s, want about the gateway's %s", iat, gwNow)
			}
			// A known offset lets the next sign-in through the first time.
			rec2 := &Recorder{}
			if err := c.SignIn(WithRecorder(t.Context(), rec2)); err != nil {
				t.Fatal(err)
			}
			if got := stripLatency(rec2.Requests()); len(got) != 1 || got[0].Status != 200 {
				t.Fatalf("sign-in with a measured offset sent %+v", got)
			}
		})
	}
}

func TestProofStaleRetriedOnlyOnce(t *testing.T) {
	g := newFakeGateway(t)
	c := g.client(t)
	g.set(func(g *fakeGateway) {
		g.override = func(w http.ResponseWriter, r *http.Request) bool {
			refuse(w, http.StatusUnauthorized, api.LayerGateway, api.CodeProofStale)
			return true
		}
	})
	rec := &Recorder{}
	err := c.SignIn(WithRecorder(t.Context(), rec))
	if ae := asAPIError(t, err); ae.Code != api.CodeProofStale {
		t.Fatalf("got %+v, want PROOF_STALE", ae)
	}
	if n := len(rec.Requests()); n != 2 {
		t.Fatalf("%d requests, want 2 (one retry)", n)
	}
}

func TestErrorMapping(t *testing.T) {
	cases := []struct {
		name   string
		status int
		header map[string]string
		body   string
		want   api.Error
	}{
		{"keyserver refusal", 403, nil,
			`{"error":{"layer":"keyserver","code":"ACL_DENIED","status":403,"detail":"no entry; do not retry"}}`,
			api.Error{Layer: "keyserver", Code: "ACL_DENIED", Status: 403, Detail: "no entry; do not retry"}},
		{"gateway refusal", 403, nil,
			`{"error":{"layer":"gateway","code":"OBJECT_NOT_IN_CREDENTIAL_SCOPE","status":403,"detail":"d"}}`,
			api.Error{Layer: "gateway", Code: "OBJECT_NOT_IN_CREDENTIAL_SCOPE", Status: 403, Detail: "d"}},
		{"retry after seconds", 503, map[string]string{"Retry-After": "7"},
			`{"error":{"layer":"gateway","code":"IDP_UNAVAILABLE","status":503,"detail":"wait"}}`,
			api.Error{Layer: "gateway", Code: "IDP_UNAVAILABLE", Status: 503, Detail: "wait", RetryAfter: 7 * time.Second}},
		{"retry after date", 503, map[string]string{"Retry-After": "Sun, 06 Nov 1994 08:49:40 GMT", "Date": "Sun, 06 Nov 1994 08:49:37 GMT"},
			`{"error":{"layer":"gateway","code":"IDP_UNAVAILABLE","status":503,"detail":"wait"}}`,
			api.Error{Layer: "gateway", Code: "IDP_UNAVAILABLE", Status: 503, Detail: "wait", RetryAfter: 3 * time.Second}},
		{"status from the HTTP answer", 410, nil,
			`{"error":{"layer":"keyserver","code":"KEY_EXPIRED","status":200,"detail":"gone"}}`,
			api.Error{Layer: "keyserver", Code: "KEY_EXPIRED", Status: 410, Detail: "gone"}},
		{"no layer is the gateway", 409, nil,
			`{"error":{"code":"CONFLICT","detail":"exists"}}`,
			api.Error{Layer: "gateway", Code: "CONFLICT", Status: 409, Detail: "exists"}},
		{"adapter layer is not the gateway's to claim", 400, nil,
			`{"error":{"layer":"adapter","code":"BAD_REQUEST","detail":"x"}}`,
			api.Error{Layer: "gateway", Code: "BAD_REQUEST", Status: 400, Detail: "x"}},
		{"refusal not JSON", 502, nil, `<html>bad gateway</html>`,
			api.Error{Layer: "gateway", Code: api.CodeBadResponse, Status: 502}},
		{"refusal without code", 404, nil, `{"error":{"detail":"?"}}`,
			api.Error{Layer: "gateway", Code: api.CodeBadResponse, Status: 404}},
		{"success not JSON", 200, nil, `not json`,
			api.Error{Layer: "gateway", Code: api.CodeBadResponse, Status: 200}},
		{"success of the wrong shape", 200, nil, `{"name": 5}`,
			api.Error{Layer: "gateway", Code: api.CodeBadResponse, Status: 200}},
		{"redirect not followed", 302, map[string]string{"Location": "https://elsewhere.example/"}, ``,
			api.Error{Layer: "gateway", Code: api.CodeBadResponse, Status: 302}},
		{"unexpected success status", 204, nil, ``,
			api.Error{Layer: "gateway", Code: api.CodeBadResponse, Status: 204}},
	}
	g := newFakeGateway(t)
	c := g.client(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g.set(func(g *fakeGateway) {
				g.override = func(w http.ResponseWriter, r *http.Request) bool {
					for k, v := range tc.header {
						w.Header().Set(k, v)
					}
					w.WriteHeader(tc.status)
					_, _ = w.Write([]byte(tc.body))
					return true
				}
			})
			rec := &Recorder{}
			_, err := c.Admin(testAdminUser, testAdminPassword).GetPrincipal(WithRecorder(t.Context(), rec), "xa.test.alice")
			ae := asAPIError(t, err)
			got := *ae
			got.Cause = nil
			if tc.want.Code == api.CodeBadResponse {
				if ae.Detail == "" || ae.Cause == nil {
					t.Fatalf("bad response %+v has no detail or cause", ae)
				}
				// The operator's text names where the answer came from,
				// and refuses nothing: the Gateway answered, unreadably.
				want := fmt.Sprintf("the Gateway at %s answered HTTP %d in a form this client cannot read: %v (GATEWAY_BAD_RESPONSE)",
					ae.URL, tc.status, ae.Cause)
				if !strings.HasSuffix(ae.URL, api.RouteAdminGetPrincipal) || err.Error() != want {
					t.Fatalf("text %q (URL %q), want %q", err, ae.URL, want)
				}
				got.Detail, got.URL = "", ""
			}
			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			reqs := rec.Requests()
			if len(reqs) != 1 || reqs[0].Status != tc.status || reqs[0].Code != tc.want.Code {
				t.Fatalf("recorded %+v", reqs)
			}
		})
	}
}

func TestTimeoutsHonoured(t *testing.T) {
	g := newFakeGateway(t)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	g.set(func(g *fakeGateway) {
		g.override = func(w http.ResponseWriter, r *http.Request) bool {
			select {
			case <-r.Context().Done():
			case <-release:
			}
			return true
		}
	})
	check := func(t *testing.T, err error) {
		t.Helper()
		ae := asAPIError(t, err)
		if ae.Code != api.CodeUnreachable || ae.Status != 0 || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %+v (cause %v), want GATEWAY_UNREACHABLE from a deadline", ae, ae.Cause)
		}
	}
	t.Run("config timeout", func(t *testing.T) {
		cfg := g.config()
		cfg.Timeout = 50 * time.Millisecond
		c, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		check(t, c.SignIn(t.Context()))
	})
	t.Run("context deadline", func(t *testing.T) {
		c := g.client(t)
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		_, err := c.Mint(ctx, MintRequest{ActingAs: "xa.test.alice"})
		check(t, err)
	})
	t.Run("context cancelled", func(t *testing.T) {
		c := g.client(t)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		err := c.SignIn(ctx)
		if ae := asAPIError(t, err); ae.Code != api.CodeUnreachable || !errors.Is(err, context.Canceled) {
			t.Fatalf("got %+v, want GATEWAY_UNREACHABLE from a cancelled context", ae)
		}
	})
}

func TestUnreachableGateway(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.StartTLS()
	url := srv.URL
	srv.Close() // nothing listens there any more
	c, err := New(Config{BaseURL: url})
	if err != nil {
		t.Fatal(err)
	}
	rec := &Recorder{}
	_, err = c.Admin(testAdminUser, testAdminPassword).GetPrincipal(WithRecorder(t.Context(), rec), "x")
	if ae := asAPIError(t, err); ae.Code != api.CodeUnreachable || ae.Layer != api.LayerGateway || ae.Cause == nil {
		t.Fatalf("got %+v, want GATEWAY_UNREACHABLE with a cause", ae)
	}
	// The operator's text names the URL and says nothing answered; the
	// detail, which the model reads, names no host.
	ae := asAPIError(t, err)
	if strings.Contains(ae.Detail, url) || strings.Contains(ae.Detail, "127.0.0.1") {
		t.Fatalf("the refusal's detail names the URL: %v", ae.Detail)
	}
	host := strings.TrimPrefix(url, "https://")
	want := "the Gateway at " + url + "/api/v1/admin/principals/get did not answer: nothing listens at " + host + " (ECONNREFUSED) (GATEWAY_UNREACHABLE)"
	if err.Error() != want {
		t.Fatalf("text %q\nwant %q", err, want)
	}
	if reqs := rec.Requests(); len(reqs) != 1 || reqs[0].Status != 0 || reqs[0].Code != api.CodeUnreachable {
		t.Fatalf("recorded %+v", reqs)
	}
}

func TestScopedSession(t *testing.T) {
	g := newFakeGateway(t)
	c := g.client(t)
	ctx := t.Context()
	s1, err := c.Mint(ctx, MintRequest{ActingAs: "xa.test.alice", Objects: []string{"t1"}, TTL: 90 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	s2, err := c.Mint(ctx, MintRequest{ActingAs: "xa.test.alice"})
	if err != nil {
		t.Fatal(err)
	}
	if s1.JKT() == s2.JKT() || s1.JKT() == "" {
		t.Fatalf("two sessions share holder key %q", s1.JKT())
	}
	if s1.ActingAs() != "xa.test.alice" || s1.SystemID() != 7 || s1.PrincipalID() != "1001" {
		t.Fatalf("session identity %s %d %s", s1.ActingAs(), s1.SystemID(), s1.PrincipalID())
	}
	if left := time.Until(s1.ExpiresAt()); left <= 0 || left > 90*time.Second {
		t.Fatalf("session expires in %s, want within the 90 s asked for", left)
	}
	if !s1.Live() {
		t.Fatal("a fresh session is not live")
	}
	handles := g.issuedHandles()
	d := s1.HandleDigest()
	if len(d) != 12 || strings.Contains(handles[1], d) || d == s2.HandleDigest() {
		t.Fatalf("handle digest %q", d)
	}

	// A key minted by encrypt joins the scope; an IV passes through.
	res, err := s1.Encrypt(ctx, EncryptInput{Plaintext: []byte("secret text")})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Minted || res.TTag != "ttag-minted" || len(res.IV) != api.IVBytes || res.Link != "link-1" {
		t.Fatalf("encrypt result %+v", res)
	}
	if got := s1.Objects(); !slices.Equal(got, []string{"t1", "ttag-minted"}) {
		t.Fatalf("objects %v after a minting encrypt", got)
	}
	iv := []byte("0123456789abcdef")
	res2, err := s1.Encrypt(ctx, EncryptInput{TTag: "t1", IV: iv, Plaintext: []byte("more")})
	if err != nil || res2.Minted || !slices.Equal(res2.IV, iv) {
		t.Fatalf("encrypt with ttag and iv: %+v, %v", res2, err)
	}
	dr, err := s1.DecryptWithLink(ctx, res.TTag, res.IV, res.Ciphertext)
	if err != nil || string(dr.Plaintext) != "secret text" || dr.Link != "link-1" {
		t.Fatalf("decrypt: %+v, %v", dr, err)
	}
	if err := s1.Widen(ctx, []string{"t9"}); err != nil {
		t.Fatal(err)
	}
	if got := s1.Objects(); !slices.Contains(got, "t9") {
		t.Fatalf("objects %v after widen", got)
	}
	for _, err := range []error{
		s1.ACLGrant(ctx, api.ACLGrantRequest{TTag: "t1", SystemID: 7, PrincipalID: "1002", Rights: []string{api.RightRead}}),
		s1.ACLUpdate(ctx, api.ACLGrantRequest{TTag: "t1", SystemID: 7, PrincipalID: "1002", Rights: []string{api.RightWrite}}),
		s1.ACLRevoke(ctx, api.ACLRevokeRequest{TTag: "t1", SystemID: 7, PrincipalID: "1002"}),
		s1.ExpireKey(ctx, "t1"),
		s1.RemoveKey(ctx, "t1"),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s1.ACLGet(ctx, "t1"); err != nil {
		t.Fatal(err)
	}

	// Revoke: one request, then nothing is sent any more.
	rec := &Recorder{}
	rctx := WithRecorder(ctx, rec)
	if err := s1.Revoke(rctx); err != nil {
		t.Fatal(err)
	}
	if err := s1.Revoke(rctx); err != nil {
		t.Fatalf("second revoke: %v", err)
	}
	if s1.Live() {
		t.Fatal("a revoked session is live")
	}
	_, err = s1.Decrypt(rctx, res.TTag, res.IV, res.Ciphertext)
	if ae := asAPIError(t, err); ae.Layer != api.LayerAdapter || ae.Code != api.CodeSessionRevoked || !errors.Is(err, ErrSessionEnded) {
		t.Fatalf("call on a revoked session: %+v", ae)
	}
	if err := s1.Widen(rctx, []string{"t3"}); !errors.Is(err, ErrSessionEnded) {
		t.Fatalf("widen on a revoked session: %v", err)
	}
	if got := stripLatency(rec.Requests()); !slices.Equal(got, []Request{{Route: api.RouteRevoke, Status: 200}}) {
		t.Fatalf("sent %+v, want one revoke and nothing after", got)
	}
	// The other session is untouched.
	if _, err := s2.Encrypt(ctx, EncryptInput{Plaintext: []byte("y")}); err != nil {
		t.Fatal(err)
	}
}

func TestRevokeOfSessionGatewayAlreadyEnded(t *testing.T) {
	g := newFakeGateway(t)
	s := g.aliceSession(t)
	g.set(func(g *fakeGateway) {
		for _, sc := range g.scoped {
			sc.revoked = true
		}
	})
	if _, err := s.Encrypt(t.Context(), EncryptInput{Plaintext: []byte("z")}); err == nil {
		t.Fatal("encrypt on a session the gateway revoked succeeded")
	} else if ae := asAPIError(t, err); ae.Code != api.CodeSessionRevoked || ae.Layer != api.LayerGateway {
		t.Fatalf("got %+v", ae)
	}
	if err := s.Revoke(t.Context()); err != nil {
		t.Fatalf("revoking a session the gateway already ended: %v", err)
	}
}

func TestMintRefusesForeignKeyBinding(t *testing.T) {
	g := newFakeGateway(t)
	c := g.client(t)
	g.set(func(g *fakeGateway) { g.wrongJKT = true })
	_, err := c.Mint(t.Context(), MintRequest{ActingAs: "xa.test.alice"})
	if ae := asAPIError(t, err); ae.Code != api.CodeBadResponse {
		t.Fatalf("got %+v, want GATEWAY_BAD_RESPONSE", ae)
	}
}

func TestMintTTLSeconds(t *testing.T) {
	cases := []struct {
		ttl  time.Duration
		want int
	}{
		{0, 300},
		{time.Minute, 60},
		{1500 * time.Millisecond, 2},
		{time.Millisecond, 1},
	}
	for _, tc := range cases {
		t.Run(tc.ttl.String(), func(t *testing.T) {
			g := newFakeGateway(t)
			var got atomic.Int64
			g.set(func(g *fakeGateway) {
				g.override = func(w http.ResponseWriter, r *http.Request) bool {
					if r.URL.Path != api.RouteScoped {
						return false
					}
					var req api.ScopedRequest
					if decode(w, r, &req) {
						got.Store(int64(req.TTLSeconds))
						if req.Objects == nil {
							t.Error("objects sent as null")
						}
						refuse(w, http.StatusBadRequest, api.LayerGateway, api.CodeBadRequest)
					}
					return true
				}
			})
			_, err := g.client(t).Mint(t.Context(), MintRequest{ActingAs: "xa.test.alice", TTL: tc.ttl})
			if ae := asAPIError(t, err); ae.Code != api.CodeBadRequest {
				t.Fatalf("got %+v", ae)
			}
			if got.Load() != int64(tc.want) {
				t.Fatalf("ttlSeconds %d, want %d", got.Load(), tc.want)
			}
		})
	}
}

func TestSignOut(t *testing.T) {
	g := newFakeGateway(t)
	c := g.client(t)
	if err := c.SignOut(t.Context()); err != nil {
		t.Fatalf("sign-out before sign-in: %v", err)
	}
	if err := c.SignIn(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := c.SignOut(t.Context()); err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	left := len(g.services)
	g.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d service sessions left at the gateway after sign-out", left)
	}
	// The next call signs in afresh, not as a relogin.
	rec := &Recorder{}
	if _, err := c.Mint(WithRecorder(t.Context(), rec), MintRequest{ActingAs: "xa.test.alice"}); err != nil {
		t.Fatal(err)
	}
	if rec.ServiceRelogin() || g.loginCount() != 2 {
		t.Fatalf("after sign-out: relogin=%v logins=%d", rec.ServiceRelogin(), g.loginCount())
	}
}

func TestNothingSecretLogged(t *testing.T) {
	g := newFakeGateway(t)
	logger, logs := newTestLogger()
	cfg := g.config()
	cfg.Logger = logger
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	const plaintext = "PLAINTEXT-that-must-never-be-logged"
	const subjectToken = "SUBJECT-TOKEN-never-logged"
	s, err := c.Mint(ctx, MintRequest{ActingAs: "xa.test.alice", Objects: []string{"t1"}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Encrypt(ctx, EncryptInput{Plaintext: []byte(plaintext)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Decrypt(ctx, res.TTag, res.IV, res.Ciphertext); err != nil {
		t.Fatal(err)
	}
	// A relogin, a refusal, a subject token and an admin call, all logged.
	g.dropServiceSessions()
	if _, err := c.Mint(ctx, MintRequest{SubjectToken: subjectToken}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Admin(testAdminUser, testAdminPassword).GetPrincipal(ctx, "xa.test.alice"); err != nil {
		t.Fatal(err)
	}
	// slog.Any of a session and of the client go through their LogValue
	// and String methods.
	logger.Info("a caller logging its objects", slog.Any("session", s), slog.Any("client", c))
	if err := s.Revoke(ctx); err != nil {
		t.Fatal(err)
	}

	out := logs.String()
	if !strings.Contains(out, api.RouteDecrypt) || !strings.Contains(out, `"serviceRelogin":true`) {
		t.Fatalf("the log lacks the expected request lines:\n%s", out)
	}
	secrets := map[string]string{"plaintext": plaintext, "subject token": subjectToken,
		"admin password": testAdminPassword}
	for i, h := range g.issuedHandles() {
		secrets[fmt.Sprintf("handle %d", i)] = h
	}
	for i, sp := range g.seenProofs() {
		secrets[fmt.Sprintf("proof %d", i)] = sp.raw
		// A proof's signature part alone must not appear either.
		secrets[fmt.Sprintf("proof %d signature", i)] = sp.raw[strings.LastIndex(sp.raw, ".")+1:]
	}
	for what, secret := range secrets {
		if strings.Contains(out, secret) {
			t.Errorf("the log contains the %s", what)
		}
	}
	if strings.Contains(out, `"d":`) {
		t.Error("the log contains a private JWK member")
	}
}

func TestSessionFormattingHidesHandle(t *testing.T) {
	g := newFakeGateway(t)
	c := g.client(t)
	s, err := c.Mint(t.Context(), MintRequest{ActingAs: "xa.test.alice"})
	if err != nil {
		t.Fatal(err)
	}
	handles := g.issuedHandles()
	for _, text := range []string{fmt.Sprintf("%v", s), fmt.Sprintf("%+v", s), fmt.Sprintf("%#v", s), fmt.Sprint(s),
		fmt.Sprintf("%d %x %q %s", s, s, s, s), fmt.Sprintf("%v %+v %#v %d", c, c, c, c)} {
		for _, h := range handles {
			if strings.Contains(text, h) {
				t.Fatalf("formatted text shows a handle: %s", text)
			}
		}
	}
	if !strings.Contains(fmt.Sprint(s), s.HandleDigest()) {
		t.Fatalf("%s does not name the session by its digest", s)
	}
}

func TestRecorderIsPerContext(t *testing.T) {
	g := newFakeGateway(t)
	c := g.client(t)
	a, b := &Recorder{}, &Recorder{}
	if err := c.SignIn(WithRecorder(t.Context(), a)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Mint(WithRecorder(t.Context(), b), MintRequest{ActingAs: "xa.test.alice"}); err != nil {
		t.Fatal(err)
	}
	// Without a recorder nothing is recorded anywhere, and nothing fails.
	if _, err := c.Mint(t.Context(), MintRequest{ActingAs: "xa.test.alice"}); err != nil {
		t.Fatal(err)
	}
	ra, rb := a.Requests(), b.Requests()
	if len(ra) != 1 || ra[0].Route != api.RouteServiceLogin || len(rb) != 1 || rb[0].Route != api.RouteScoped {
		t.Fatalf("recorder a %+v, b %+v", ra, rb)
	}
	if rb[0].Latency <= 0 {
		t.Fatalf("latency %s not measured", rb[0].Latency)
	}
}

// stripLatency zeroes latencies so that recorded requests compare.
func stripLatency(reqs []Request) []Request {
	out := make([]Request, len(reqs))
	for i, r := range reqs {
		r.Latency = 0
		out[i] = r
	}
	return out
}

// TestClientKeepsConnectionsForConcurrentCalls: eight calls at once, in
// three waves, reuse the eight connections of the first wave; none is
// dropped as surplus idle and dialled (and TLS-shaken) again.
func TestClientKeepsConnectionsForConcurrentCalls(t *testing.T) {
	ca := newTestCA(t, "gateway-ca")
	const concurrent, waves = 8, 3
	var (
		newConns atomic.Int32
		mu       sync.Mutex
		arrived  int
		gate     = make(chan struct{})
	)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Hold each wave until all its calls have arrived, so the wave
		// needs eight connections at once.
		mu.Lock()
		arrived++
		g := gate
		if arrived == concurrent {
			arrived = 0
			close(gate)
			gate = make(chan struct{})
		}
		mu.Unlock()
		<-g
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			newConns.Add(1)
		}
	}
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.serverCert(t)}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	c, err := New(Config{BaseURL: srv.URL, TrustFile: ca.file})
	if err != nil {
		t.Fatal(err)
	}
	for range waves {
		var wg sync.WaitGroup
		for range concurrent {
			wg.Go(func() {
				err := c.do(context.Background(), &request{route: "/api/v1/x", body: struct{}{}})
				if err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
	}
	if n := newConns.Load(); n != concurrent {
		t.Fatalf("%d connections for %d waves of %d calls at once, want %d (kept idle between waves)", n, waves, concurrent, concurrent)
	}
}

// TestReachableSaysNoAnswer: the reachability probe (serve's /healthz)
// words a Gateway that did not answer as every peer's, naming its URL.
func TestReachableSaysNoAnswer(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.StartTLS()
	url := srv.URL
	srv.Close()
	c, err := New(Config{BaseURL: url})
	if err != nil {
		t.Fatal(err)
	}
	err = c.Reachable(t.Context())
	want := "the Gateway at " + url + "/ did not answer: nothing listens at " + strings.TrimPrefix(url, "https://") + " (ECONNREFUSED)"
	if err == nil || err.Error() != want {
		t.Fatalf("Reachable: %v\nwant %s", err, want)
	}
}
