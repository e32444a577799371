package reference

import (
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/lestrrat-go/jwx/v2/jwt"

	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/proof"
	"github.com/pdmcp/pdmcp/internal/testutil"
)

const (
	testAudience = "gateway-api"
	testClient   = "pdmcp-server"
)

// testIdP is a tiny OpenID provider over TLS: a discovery document and a
// JWKS of the keys it publishes.
type testIdP struct {
	t      *testing.T
	clock  *testutil.Clock
	srv    *httptest.Server
	issuer string
	caPEM  string

	mu        sync.Mutex
	published map[string]jwk.Key // private keys by kid, published as public
	fetches   int                // JWKS fetches
	// conns is the connections open at the provider.
	conns atomic.Int64
	// issuerSuffix makes the discovery document name another issuer.
	issuerSuffix string
}

func newTestIdP(t *testing.T, clock *testutil.Clock) *testIdP {
	t.Helper()
	p := &testIdP{t: t, clock: clock, published: map[string]jwk.Key{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		issuer := p.issuer + p.issuerSuffix
		p.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]string{"issuer": issuer, "jwks_uri": p.issuer + "/jwks"})
	})
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.fetches++
		set := jwk.NewSet()
		for _, k := range p.published {
			pub, err := k.PublicKey()
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			set.AddKey(pub)
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(set)
	})
	p.srv = httptest.NewUnstartedServer(mux)
	p.srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			p.conns.Add(1)
		case http.StateClosed, http.StateHijacked:
			p.conns.Add(-1)
		}
	}
	p.srv.StartTLS()
	t.Cleanup(p.srv.Close)
	p.issuer = p.srv.URL
	p.caPEM = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.srv.Certificate().Raw}))
	p.publish(newSigningKey(t, "k1"))
	return p
}

// newPrivateJWK is a new P-256 private key as a JWK.
func newPrivateJWK(t *testing.T) jwk.Key {
	t.Helper()
	k, err := jwk.FromRaw(testutil.NewKey(t))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func newSigningKey(t *testing.T, kid string) jwk.Key {
	t.Helper()
	k := newPrivateJWK(t)
	if err := k.Set(jwk.KeyIDKey, kid); err != nil {
		t.Fatal(err)
	}
	if err := k.Set(jwk.AlgorithmKey, jwa.ES256); err != nil {
		t.Fatal(err)
	}
	return k
}

func (p *testIdP) publish(k jwk.Key) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.published[k.KeyID()] = k
}

func (p *testIdP) key(kid string) jwk.Key {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.published[kid]
}

func (p *testIdP) jwksFetches() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fetches
}

// token is an access token for the Gateway's audience from the allowed
// client, for subject sub, changed by adjust, signed by key.
func (p *testIdP) token(key jwk.Key, sub string, adjust func(jwt.Token)) string {
	p.t.Helper()
	now := p.clock.Now()
	tok := jwt.New()
	for name, v := range map[string]any{
		jwt.IssuerKey: p.issuer, jwt.AudienceKey: []string{testAudience}, jwt.SubjectKey: sub,
		jwt.IssuedAtKey: now, jwt.ExpirationKey: now.Add(2 * time.Minute), "azp": testClient,
	} {
		if err := tok.Set(name, v); err != nil {
			p.t.Fatal(err)
		}
	}
	if adjust != nil {
		adjust(tok)
	}
	signed, err := jwt.Sign(tok, jwt.WithKey(jwa.ES256, key))
	if err != nil {
		p.t.Fatal(err)
	}
	return string(signed)
}

func set(name string, v any) func(jwt.Token) {
	return func(tok jwt.Token) {
		if v == nil {
			tok.Remove(name)
			return
		}
		tok.Set(name, v)
	}
}

// subjectEnv is a service with a bound provider and alice mapped from
// (issuer, "user-1").
type subjectEnv struct {
	*env
	svc   *testService
	idp   *testIdP
	alice api.Principal
}

func newSubjectEnv(t *testing.T) *subjectEnv {
	t.Helper()
	e := newEnv(t)
	se := &subjectEnv{env: e, svc: e.newService(true, ""), idp: newTestIdP(t, e.clock)}
	se.alice = e.principal(se.svc, "alice")
	se.bind(se.idp)
	se.mapSubject(se.idp, "user-1", se.alice, false)
	return se
}

func (se *subjectEnv) bind(p *testIdP) {
	se.t.Helper()
	wantOK(se.t, "bind provider", se.admin(api.RouteAdminBindProvider, api.BindProviderRequest{ServiceID: se.svc.reg.ServiceID,
		Issuer: p.issuer, Audience: testAudience, AllowedClient: testClient, CAPEM: p.caPEM}, nil))
}

func (se *subjectEnv) mapSubject(p *testIdP, sub string, to api.Principal, disabled bool) {
	se.t.Helper()
	wantOK(se.t, "map identity", se.admin(api.RouteAdminMapIdentity, api.MapIdentityRequest{ServiceID: se.svc.reg.ServiceID,
		Issuer: p.issuer, Subject: sub, Principal: to.Name, Disabled: disabled}, nil))
}

// mintWith asks for a scoped session with a subject token.
func (se *subjectEnv) mintWith(token string) (api.ScopedResponse, response) {
	se.t.Helper()
	key, err := proof.NewKey()
	if err != nil {
		se.t.Fatal(err)
	}
	resp := se.do(request{route: api.RouteScoped, handle: se.svc.handle, key: se.svc.sender,
		body: api.ScopedRequest{SubjectToken: token, HolderJWK: key.PublicJWK(), TTLSeconds: 300}})
	var out api.ScopedResponse
	if resp.status == http.StatusOK {
		if err := json.Unmarshal(resp.body, &out); err != nil {
			se.t.Fatal(err)
		}
	}
	return out, resp
}

func (se *subjectEnv) refusal(resp response) *api.Error {
	se.t.Helper()
	return se.decode(api.RouteScoped, resp, nil)
}

func TestSubjectTokenMapped(t *testing.T) {
	se := newSubjectEnv(t)
	k1 := se.idp.key("k1")
	out, resp := se.mintWith(se.idp.token(k1, "user-1", nil))
	wantOK(t, "mint with a subject token", se.refusal(resp))
	if out.ActingAs != se.alice.Name || out.PrincipalID != se.alice.PrincipalID || out.SystemID != se.alice.SystemID {
		t.Errorf("session acts as %+v, want alice", out)
	}
	// The token expires in two minutes, before the asked-for five.
	if want := se.clock.Now().Add(2 * time.Minute); !out.ExpiresAt.Equal(want) {
		t.Errorf("expiresAt %v, want the token's exp %v", out.ExpiresAt, want)
	}

	t.Run("client_id stands in for azp", func(t *testing.T) {
		tok := se.idp.token(k1, "user-1", func(tok jwt.Token) { tok.Remove("azp"); tok.Set("client_id", testClient) })
		_, resp := se.mintWith(tok)
		wantOK(t, "client_id", se.refusal(resp))
	})
	t.Run("a rotated key is fetched once", func(t *testing.T) {
		before := se.idp.jwksFetches()
		k2 := newSigningKey(t, "k2")
		se.idp.publish(k2)
		_, resp := se.mintWith(se.idp.token(k2, "user-1", nil))
		wantOK(t, "token signed by the new key", se.refusal(resp))
		_, resp = se.mintWith(se.idp.token(k2, "user-1", nil))
		wantOK(t, "again", se.refusal(resp))
		if n := se.idp.jwksFetches() - before; n != 1 {
			t.Errorf("%d JWKS fetches for a rotated key, want 1", n)
		}
	})
}

func TestSubjectTokenRefusals(t *testing.T) {
	se := newSubjectEnv(t)
	k1 := se.idp.key("k1")
	now := se.clock.Now()
	stranger := newTestIdP(t, se.clock) // a provider bound to no service
	impostor := newSigningKey(t, "k1")  // same kid, another key
	noKid := newSigningKey(t, "")
	noKid.Remove(jwk.KeyIDKey)
	hs, err := jwk.FromRaw([]byte("a shared secret of thirty-two bytes!"))
	if err != nil {
		t.Fatal(err)
	}
	hs.Set(jwk.KeyIDKey, "k1")
	hsToken, err := jwt.Sign(func() jwt.Token {
		tok := jwt.New()
		tok.Set(jwt.IssuerKey, se.idp.issuer)
		tok.Set(jwt.AudienceKey, testAudience)
		tok.Set(jwt.SubjectKey, "user-1")
		tok.Set(jwt.ExpirationKey, now.Add(time.Minute))
		tok.Set("azp", testClient)
		return tok
	}(), jwt.WithKey(jwa.HS256, hs))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		token string
	}{
		{"wrong aud", se.idp.token(k1, "user-1", set(jwt.AudienceKey, []string{"some-other-api"}))},
		{"wrong azp", se.idp.token(k1, "user-1", set("azp", "some-host-client"))},
		{"no azp", se.idp.token(k1, "user-1", set("azp", nil))},
		{"expired", se.idp.token(k1, "user-1", set(jwt.ExpirationKey, now.Add(-time.Minute)))},
		{"not yet valid", se.idp.token(k1, "user-1", set(jwt.NotBeforeKey, now.Add(5*time.Minute)))},
		{"no exp", se.idp.token(k1, "user-1", set(jwt.ExpirationKey, nil))},
		{"no sub", se.idp.token(k1, "", set(jwt.SubjectKey, nil))},
		{"bad signature", se.idp.token(impostor, "user-1", nil)},
		{"no kid", se.idp.token(noKid, "user-1", nil)},
		{"tampered", tamper(t, se.idp.token(k1, "user-1", nil))},
		{"no binding for the issuer", stranger.token(stranger.key("k1"), "user-1", nil)},
		{"HS256", string(hsToken)},
		{"not a JWT", "not-a-token"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, resp := se.mintWith(c.token)
			wantRefusal(t, c.name, se.refusal(resp), api.LayerGateway, api.CodeSubjectRefused, http.StatusUnauthorized)
		})
	}

	t.Run("mapped to a disabled principal", func(t *testing.T) {
		var off api.Principal
		wantOK(t, "create disabled", se.admin(api.RouteAdminCreatePrincipal,
			api.PrincipalRequest{Name: se.svc.reg.Prefix + "off", Disabled: true}, &off))
		se.mapSubject(se.idp, "user-off", off, false)
		_, resp := se.mintWith(se.idp.token(k1, "user-off", nil))
		wantRefusal(t, "disabled principal", se.refusal(resp), api.LayerGateway, api.CodeActingAsRefused, http.StatusForbidden)
	})
	t.Run("IDENTITY_NOT_MAPPED", func(t *testing.T) {
		_, resp := se.mintWith(se.idp.token(k1, "user-2", nil))
		wantRefusal(t, "unmapped subject", se.refusal(resp), api.LayerGateway, api.CodeIdentityNotMapped, http.StatusForbidden)
		se.mapSubject(se.idp, "user-3", se.alice, true)
		_, resp = se.mintWith(se.idp.token(k1, "user-3", nil))
		wantRefusal(t, "disabled mapping", se.refusal(resp), api.LayerGateway, api.CodeIdentityNotMapped, http.StatusForbidden)
		wantOK(t, "unmap", se.admin(api.RouteAdminUnmapIdentity, api.MapIdentityRequest{ServiceID: se.svc.reg.ServiceID,
			Issuer: se.idp.issuer, Subject: "user-1"}, nil))
		_, resp = se.mintWith(se.idp.token(k1, "user-1", nil))
		wantRefusal(t, "unmapped again", se.refusal(resp), api.LayerGateway, api.CodeIdentityNotMapped, http.StatusForbidden)
		// No mapping was created by the refusals.
		_, resp = se.mintWith(se.idp.token(k1, "user-2", nil))
		wantRefusal(t, "still unmapped", se.refusal(resp), api.LayerGateway, api.CodeIdentityNotMapped, http.StatusForbidden)
	})
}

func TestIdPUnavailable(t *testing.T) {
	se := newSubjectEnv(t)
	k1 := se.idp.key("k1")
	_, resp := se.mintWith(se.idp.token(k1, "user-1", nil))
	wantOK(t, "warm the key cache", se.refusal(resp))

	wantUnavailable := func(t *testing.T, resp response, retryAfter string) {
		t.Helper()
		wantRefusal(t, "mint", se.refusal(resp), api.LayerGateway, api.CodeIdPUnavailable, http.StatusServiceUnavailable)
		if got := resp.header.Get("Retry-After"); got != retryAfter {
			t.Errorf("Retry-After %q, want %q", got, retryAfter)
		}
	}
	t.Run("unknown kid after one refresh", func(t *testing.T) {
		before := se.idp.jwksFetches()
		_, resp := se.mintWith(se.idp.token(newSigningKey(t, "k-unpublished"), "user-1", nil))
		wantUnavailable(t, resp, "2")
		if n := se.idp.jwksFetches() - before; n != 1 {
			t.Errorf("%d JWKS fetches, want exactly one refresh", n)
		}
	})
	t.Run("provider down", func(t *testing.T) {
		down := newTestIdP(t, se.clock)
		se.bind(down)
		bob := se.principal(se.svc, "bob")
		se.mapSubject(down, "user-9", bob, false)
		tok := down.token(down.key("k1"), "user-9", nil)
		down.srv.Close()
		_, resp := se.mintWith(tok)
		wantUnavailable(t, resp, "2")
	})
	t.Run("discovery names another issuer", func(t *testing.T) {
		odd := newTestIdP(t, se.clock)
		odd.mu.Lock()
		odd.issuerSuffix = "/elsewhere"
		odd.mu.Unlock()
		se.bind(odd)
		se.mapSubject(odd, "user-1", se.alice, false)
		_, resp := se.mintWith(odd.token(odd.key("k1"), "user-1", nil))
		wantUnavailable(t, resp, "2")
		if odd.jwksFetches() != 0 {
			t.Error("the JWKS of a provider whose discovery names another issuer was fetched")
		}
	})
	t.Run("injected", func(t *testing.T) {
		se.gw.SetFaults(Faults{IdPUnavailable: 7 * time.Second})
		_, resp := se.mintWith(se.idp.token(k1, "user-1", nil))
		wantUnavailable(t, resp, "7")
		// Minting with actingAs is not affected.
		_, err := se.mint(se.svc, api.ScopedRequest{ActingAs: se.alice.Name})
		wantOK(t, "actingAs during the fault", err)
		se.gw.SetFaults(Faults{})
		_, resp = se.mintWith(se.idp.token(k1, "user-1", nil))
		wantOK(t, "after the fault", se.refusal(resp))
	})
}

// TestWithdrawnProviderKey: once the held key set is older than its maximum
// age, the provider's keys are fetched again and a key it withdrew is no
// longer trusted; while the provider is down, the held keys stay in use.
func TestWithdrawnProviderKey(t *testing.T) {
	se := newSubjectEnv(t)
	k1 := se.idp.key("k1")
	_, resp := se.mintWith(se.idp.token(k1, "user-1", nil))
	wantOK(t, "k1 while published", se.refusal(resp))

	k2 := newSigningKey(t, "k2")
	se.idp.publish(k2)
	se.idp.mu.Lock()
	delete(se.idp.published, "k1")
	se.idp.mu.Unlock()
	// Within the maximum age the held k1 still verifies.
	_, resp = se.mintWith(se.idp.token(k1, "user-1", nil))
	wantOK(t, "k1 held", se.refusal(resp))

	se.gw.providers.mu.Lock()
	se.gw.providers.maxAge = 0
	se.gw.providers.mu.Unlock()
	_, resp = se.mintWith(se.idp.token(k1, "user-1", nil))
	wantRefusal(t, "withdrawn k1", se.refusal(resp), api.LayerGateway, api.CodeIdPUnavailable, http.StatusServiceUnavailable)
	_, resp = se.mintWith(se.idp.token(k2, "user-1", nil))
	wantOK(t, "k2", se.refusal(resp))

	se.idp.srv.Close()
	_, resp = se.mintWith(se.idp.token(k2, "user-1", nil))
	wantOK(t, "k2 held with the provider down", se.refusal(resp))
}

// A key set older than its maximum age on the Gateway's own clock is
// fetched again, and the connection the old set's fetches used is closed:
// a day's worth of rediscoveries (144, as many as 10-minute ages in 24
// hours; the age is shortened so the service session outlives them) leaves
// no connection to the provider behind, and a key withdrawn meanwhile stops
// verifying once the clock has moved past the age, with no wall time
// passing.
func TestProviderKeysAgeOnGatewayClock(t *testing.T) {
	se := newSubjectEnv(t)
	const maxAge, n = time.Second, 6 * 24
	se.gw.providers.mu.Lock()
	se.gw.providers.maxAge = maxAge
	se.gw.providers.mu.Unlock()
	k1 := se.idp.key("k1")
	for i := range n {
		_, resp := se.mintWith(se.idp.token(k1, "user-1", nil))
		wantOK(t, fmt.Sprintf("mint %d", i), se.refusal(resp))
		se.clock.Advance(maxAge + time.Second)
	}
	if got := se.idp.jwksFetches(); got < n {
		t.Errorf("%d key set fetches, want one per maximum age (%d)", got, n)
	}
	testutil.WaitFor(t, "the connections of released key sets closed", func() bool { return se.idp.conns.Load() <= 2 })

	_, resp := se.mintWith(se.idp.token(k1, "user-1", nil))
	wantOK(t, "k1 fetched afresh", se.refusal(resp))
	se.idp.publish(newSigningKey(t, "k2"))
	se.idp.mu.Lock()
	delete(se.idp.published, "k1")
	se.idp.mu.Unlock()
	_, resp = se.mintWith(se.idp.token(k1, "user-1", nil))
	wantOK(t, "k1 held within the age", se.refusal(resp))
	se.clock.Advance(maxAge + time.Second)
	_, resp = se.mintWith(se.idp.token(k1, "user-1", nil))
	wantRefusal(t, "withdrawn k1 past the age", se.refusal(resp), api.LayerGateway, api.CodeIdPUnavailable, http.StatusServiceUnavailable)
}
