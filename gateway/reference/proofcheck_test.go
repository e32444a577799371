package reference

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/proof"
)

// tamper changes one character in the middle of a JWS's signature.
func tamper(t *testing.T, token string) string {
	t.Helper()
	i := strings.LastIndex(token, ".") + 10
	c := byte('A')
	if token[i] == 'A' {
		c = 'B'
	}
	return token[:i] + string(c) + token[i+1:]
}

func TestProofRefusals(t *testing.T) {
	e := newEnv(t)
	s := e.newService(true, "")
	alice := e.principal(s, "alice")
	sess := e.scoped(s, alice)

	// Each session kind on a route that succeeds with a good proof.
	kinds := []struct {
		name   string
		route  string
		body   any
		handle func() string
		key    func() *proof.Key
	}{
		{"service session", api.RouteAdminGetPrincipal, api.PrincipalRequest{Name: alice.Name},
			func() string { return s.handle }, func() *proof.Key { return s.sender }},
		{"scoped session", api.RouteWiden, api.WidenRequest{Objects: []string{}},
			func() string { return sess.handle }, func() *proof.Key { return sess.key }},
	}
	other, err := proof.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range kinds {
		mk := func(key *proof.Key, method, url, handle string, at time.Time) string {
			p, err := key.Make(method, url, handle, at)
			if err != nil {
				t.Fatal(err)
			}
			return p
		}
		url := e.url(k.route)
		cases := []struct {
			name  string
			proof func() string // "" sends no DPoP header
			code  string
		}{
			{"missing", func() string { return "" }, api.CodeProofMissing},
			{"not a JWS", func() string { return "not-a-proof" }, api.CodeProofInvalid},
			{"bad signature", func() string {
				return tamper(t, mk(k.key(), http.MethodPost, url, k.handle(), e.clock.Now()))
			}, api.CodeProofInvalid},
			{"wrong htm", func() string { return mk(k.key(), http.MethodGet, url, k.handle(), e.clock.Now()) }, api.CodeProofInvalid},
			{"wrong htu path", func() string {
				return mk(k.key(), http.MethodPost, e.url(api.RouteRevoke), k.handle(), e.clock.Now())
			}, api.CodeProofInvalid},
			{"wrong htu host", func() string {
				return mk(k.key(), http.MethodPost, strings.Replace(url, "127.0.0.1", "localhost", 1), k.handle(), e.clock.Now())
			}, api.CodeProofInvalid},
			{"wrong ath", func() string { return mk(k.key(), http.MethodPost, url, "another-handle", e.clock.Now()) }, api.CodeProofInvalid},
			{"no ath", func() string { return mk(k.key(), http.MethodPost, url, "", e.clock.Now()) }, api.CodeProofInvalid},
			{"stale iat", func() string {
				return mk(k.key(), http.MethodPost, url, k.handle(), e.clock.Now().Add(-61*time.Second))
			}, api.CodeProofStale},
			{"future iat", func() string {
				return mk(k.key(), http.MethodPost, url, k.handle(), e.clock.Now().Add(61*time.Second))
			}, api.CodeProofStale},
			{"key mismatch", func() string { return mk(other, http.MethodPost, url, k.handle(), e.clock.Now()) }, api.CodeProofKeyMismatch},
		}
		for _, c := range cases {
			t.Run(k.name+"/"+c.name, func(t *testing.T) {
				r := request{route: k.route, body: k.body, handle: k.handle(), proofToken: c.proof(), noProof: true}
				err := e.decode(k.route, e.do(r), nil)
				wantRefusal(t, c.name, err, api.LayerGateway, c.code, http.StatusUnauthorized)
			})
		}
		t.Run(k.name+"/within window", func(t *testing.T) {
			p := mk(k.key(), http.MethodPost, url, k.handle(), e.clock.Now().Add(-59*time.Second))
			err := e.decode(k.route, e.do(request{route: k.route, body: k.body, handle: k.handle(), proofToken: p}), nil)
			wantOK(t, "proof 59 s old", err)
		})
		t.Run(k.name+"/replayed", func(t *testing.T) {
			p := mk(k.key(), http.MethodPost, url, k.handle(), e.clock.Now())
			r := request{route: k.route, body: k.body, handle: k.handle(), proofToken: p}
			wantOK(t, "first use", e.decode(k.route, e.do(r), nil))
			wantRefusal(t, "second use", e.decode(k.route, e.do(r), nil),
				api.LayerGateway, api.CodeProofReplayed, http.StatusUnauthorized)
		})
		t.Run(k.name+"/two DPoP headers", func(t *testing.T) {
			p1 := mk(k.key(), http.MethodPost, url, k.handle(), e.clock.Now())
			p2 := mk(k.key(), http.MethodPost, url, k.handle(), e.clock.Now())
			r := request{route: k.route, body: k.body, handle: k.handle(), noProof: true,
				header: http.Header{"Dpop": {p1, p2}}}
			wantRefusal(t, "two proofs", e.decode(k.route, e.do(r), nil),
				api.LayerGateway, api.CodeProofInvalid, http.StatusUnauthorized)
		})
	}
}

// The session is checked before the proof: no handle is SESSION_MISSING
// even with no proof at all.
func TestSessionCheckedBeforeProof(t *testing.T) {
	e := newEnv(t)
	s := e.newService(true, "")
	alice := e.principal(s, "alice")
	sess := e.scoped(s, alice)

	err := e.decode(api.RouteWiden, e.do(request{route: api.RouteWiden, body: api.WidenRequest{}}), nil)
	wantRefusal(t, "no Authorization", err, api.LayerGateway, api.CodeSessionMissing, http.StatusUnauthorized)

	err = e.decode(api.RouteWiden, e.do(request{route: api.RouteWiden, body: api.WidenRequest{},
		header: http.Header{"Authorization": {"Bearer " + sess.handle}}, key: sess.key}), nil)
	wantRefusal(t, "Bearer scheme", err, api.LayerGateway, api.CodeSessionMissing, http.StatusUnauthorized)

	err = e.call(api.RouteWiden, "scp_unknown", sess.key, api.WidenRequest{}, nil)
	wantRefusal(t, "unknown handle", err, api.LayerGateway, api.CodeSessionMissing, http.StatusUnauthorized)

	err = e.call(api.RouteWiden, s.handle, s.sender, api.WidenRequest{}, nil)
	wantRefusal(t, "service handle on a scoped route", err, api.LayerGateway, api.CodeSessionMissing, http.StatusUnauthorized)

	err = e.call(api.RouteScoped, sess.handle, sess.key, api.ScopedRequest{}, nil)
	wantRefusal(t, "scoped handle on a service route", err, api.LayerGateway, api.CodeSessionMissing, http.StatusUnauthorized)

	// A revoked session is SESSION_REVOKED before any proof check.
	wantOK(t, "revoke", e.call(api.RouteRevoke, sess.handle, sess.key, nil, nil))
	err = e.decode(api.RouteWiden, e.do(request{route: api.RouteWiden, handle: sess.handle, body: api.WidenRequest{}}), nil)
	wantRefusal(t, "revoked, no proof", err, api.LayerGateway, api.CodeSessionRevoked, http.StatusUnauthorized)
}

func TestServiceLogin(t *testing.T) {
	e := newEnv(t)
	s := e.newService(true, "xa.login.")
	if s.reg.Prefix != "xa.login." || s.reg.SystemID < 1_000_000_000 || s.reg.ServiceID == "" {
		t.Fatalf("registration answer %+v", s.reg)
	}

	t.Run("answer", func(t *testing.T) {
		var out api.ServiceLoginResponse
		wantOK(t, "login", e.decode(api.RouteServiceLogin, e.do(e.loginRequest(s)), &out))
		if out.Handle == "" || out.Prefix != s.reg.Prefix || out.SystemID != s.reg.SystemID || out.ServiceID != s.reg.ServiceID {
			t.Errorf("login answer %+v, registration %+v", out, s.reg)
		}
		if want := e.clock.Now().Add(DefaultServiceSessionTTL); !out.ExpiresAt.Equal(want) {
			t.Errorf("expiresAt %v, want %v", out.ExpiresAt, want)
		}
	})
	t.Run("unknown certificate", func(t *testing.T) {
		stranger := newServiceKeys(t)
		err := e.login(stranger)
		wantRefusal(t, "unregistered service", err, api.LayerGateway, api.CodeServiceLoginRefused, http.StatusUnauthorized)
	})
	t.Run("sender key mismatch", func(t *testing.T) {
		r := e.loginRequest(s)
		r.key, _ = proof.NewKey()
		wantRefusal(t, "other sender key", e.decode(r.route, e.do(r), nil),
			api.LayerGateway, api.CodeProofKeyMismatch, http.StatusUnauthorized)
	})
	t.Run("no proof", func(t *testing.T) {
		r := e.loginRequest(s)
		r.noProof = true
		wantRefusal(t, "no proof", e.decode(r.route, e.do(r), nil),
			api.LayerGateway, api.CodeProofMissing, http.StatusUnauthorized)
	})
	t.Run("assertion replayed", func(t *testing.T) {
		r := e.loginRequest(s)
		wantOK(t, "first", e.decode(r.route, e.do(r), nil))
		wantRefusal(t, "same assertion again", e.decode(r.route, e.do(r), nil),
			api.LayerGateway, api.CodeServiceLoginRefused, http.StatusUnauthorized)
	})
	// loginAssertion signs in with an assertion made for audience at at.
	loginAssertion := func(t *testing.T, audience string, at time.Time) *api.Error {
		t.Helper()
		a, err := proof.MakeAssertion(s.loginKey, s.cert, audience, at)
		if err != nil {
			t.Fatal(err)
		}
		r := request{route: api.RouteServiceLogin, body: api.ServiceLoginRequest{Assertion: a}, key: s.sender}
		return e.decode(r.route, e.do(r), nil)
	}
	t.Run("assertion for another Gateway", func(t *testing.T) {
		wantRefusal(t, "foreign audience", loginAssertion(t, "https://gateway.example"+api.RouteServiceLogin, e.clock.Now()),
			api.LayerGateway, api.CodeServiceLoginRefused, http.StatusUnauthorized)
	})
	t.Run("stale assertion", func(t *testing.T) {
		wantRefusal(t, "old assertion", loginAssertion(t, e.url(api.RouteServiceLogin), e.clock.Now().Add(-5*time.Minute)),
			api.LayerGateway, api.CodeServiceLoginRefused, http.StatusUnauthorized)
	})
	t.Run("certificate past its validity", func(t *testing.T) {
		late := newEnv(t)
		s := late.newService(true, "")
		late.clock.Advance(49 * time.Hour) // the test certificates last 48 hours
		wantRefusal(t, "expired certificate", late.login(s), api.LayerGateway, api.CodeServiceLoginRefused, http.StatusUnauthorized)
	})
	t.Run("no assertion", func(t *testing.T) {
		r := request{route: api.RouteServiceLogin, body: api.ServiceLoginRequest{}, key: s.sender}
		wantRefusal(t, "empty body", e.decode(r.route, e.do(r), nil),
			api.LayerGateway, api.CodeBadRequest, http.StatusBadRequest)
	})
}
