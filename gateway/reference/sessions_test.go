package reference

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/gateway/api"
)

func TestScopedSessionLifecycle(t *testing.T) {
	e := newEnv(t)
	s := e.newService(true, "")
	alice := e.principal(s, "alice")

	t.Run("answer", func(t *testing.T) {
		sess, err := e.mint(s, api.ScopedRequest{ActingAs: alice.Name, Objects: []string{"a", "b", "a"}, TTLSeconds: 120})
		wantOK(t, "mint", err)
		r := sess.resp
		if r.ActingAs != alice.Name || r.SystemID != alice.SystemID || r.PrincipalID != alice.PrincipalID {
			t.Errorf("identity in answer: %+v", r)
		}
		if r.JKT != sess.key.JKT() {
			t.Errorf("jkt %q, want the holder key's %q", r.JKT, sess.key.JKT())
		}
		if !r.ExpiresAt.Equal(e.clock.Now().Add(120 * time.Second)) {
			t.Errorf("expiresAt %v, want now+120s", r.ExpiresAt)
		}
		if fmt.Sprint(r.Objects) != "[a b]" {
			t.Errorf("objects %v, want [a b] (distinct, in order)", r.Objects)
		}
	})
	t.Run("SESSION_REVOKED", func(t *testing.T) {
		sess := e.scoped(s, alice)
		var out api.RevokeResponse
		wantOK(t, "revoke", e.call(api.RouteRevoke, sess.handle, sess.key, nil, &out))
		if !out.Revoked {
			t.Error("revoke answered revoked: false")
		}
		err := e.call(api.RouteWiden, sess.handle, sess.key, api.WidenRequest{}, nil)
		wantRefusal(t, "use after revoke", err, api.LayerGateway, api.CodeSessionRevoked, http.StatusUnauthorized)
		err = e.call(api.RouteRevoke, sess.handle, sess.key, nil, nil)
		wantRefusal(t, "revoke twice", err, api.LayerGateway, api.CodeSessionRevoked, http.StatusUnauthorized)
	})
	t.Run("SESSION_EXPIRED", func(t *testing.T) {
		sess, err := e.mint(s, api.ScopedRequest{ActingAs: alice.Name, TTLSeconds: 30})
		wantOK(t, "mint", err)
		e.clock.Advance(29 * time.Second)
		wantOK(t, "use before expiry", e.call(api.RouteWiden, sess.handle, sess.key, api.WidenRequest{}, nil))
		e.clock.Advance(time.Second)
		err = e.call(api.RouteWiden, sess.handle, sess.key, api.WidenRequest{}, nil)
		wantRefusal(t, "use at expiresAt", err, api.LayerGateway, api.CodeSessionExpired, http.StatusUnauthorized)
	})
	t.Run("widen", func(t *testing.T) {
		sess := e.scoped(s, alice, "x")
		var out api.ScopedResponse
		wantOK(t, "widen", e.call(api.RouteWiden, sess.handle, sess.key, api.WidenRequest{Objects: []string{"y", "x"}}, &out))
		if fmt.Sprint(out.Objects) != "[x y]" || out.Handle != "" {
			t.Errorf("widen answer objects %v handle %q, want [x y] and no handle", out.Objects, out.Handle)
		}
		many := make([]string, 63)
		for i := range many {
			many[i] = fmt.Sprintf("obj-%02d", i)
		}
		err := e.call(api.RouteWiden, sess.handle, sess.key, api.WidenRequest{Objects: many}, nil)
		wantRefusal(t, "widen to 65", err, api.LayerGateway, api.CodeScopeTooWide, http.StatusBadRequest)
		wantOK(t, "widen to 64", e.call(api.RouteWiden, sess.handle, sess.key, api.WidenRequest{Objects: many[:62]}, &out))
		if len(out.Objects) != 64 {
			t.Errorf("after widening to the cap: %d objects", len(out.Objects))
		}
	})
}

func TestServiceSessionExpiry(t *testing.T) {
	e := newEnvWith(t, func(c *Config) { c.ServiceSessionTTL = 10 * time.Minute })
	s := e.newService(true, "")
	alice := e.principal(s, "alice")
	sess := e.scoped(s, alice)

	e.gw.DropServiceSessions()
	_, err := e.mint(s, api.ScopedRequest{ActingAs: alice.Name})
	wantRefusal(t, "mint after drop", err, api.LayerGateway, api.CodeServiceSessionExpired, http.StatusUnauthorized)
	// Scoped sessions outlive the service session that minted them.
	wantOK(t, "scoped session after drop", e.call(api.RouteWiden, sess.handle, sess.key, api.WidenRequest{}, nil))

	wantOK(t, "sign in again", e.login(s))
	_, err = e.mint(s, api.ScopedRequest{ActingAs: alice.Name})
	wantOK(t, "mint after signing in again", err)

	e.clock.Advance(10 * time.Minute)
	_, err = e.mint(s, api.ScopedRequest{ActingAs: alice.Name})
	wantRefusal(t, "mint after the TTL", err, api.LayerGateway, api.CodeServiceSessionExpired, http.StatusUnauthorized)

	wantOK(t, "sign in again", e.login(s))
	old := s.handle
	wantOK(t, "revoke the service session", e.call(api.RouteRevoke, old, s.sender, nil, nil))
	_, err = e.mint(s, api.ScopedRequest{ActingAs: alice.Name})
	wantRefusal(t, "mint after revoke", err, api.LayerGateway, api.CodeServiceSessionExpired, http.StatusUnauthorized)
	err = e.call(api.RouteRevoke, old, s.sender, nil, nil)
	wantRefusal(t, "revoke a forgotten service handle", err, api.LayerGateway, api.CodeServiceSessionExpired, http.StatusUnauthorized)
}

func TestMintRefusals(t *testing.T) {
	e := newEnv(t)
	s := e.newService(true, "")
	alice := e.principal(s, "alice")
	disabled := api.Principal{}
	wantOK(t, "create disabled", e.admin(api.RouteAdminCreatePrincipal,
		api.PrincipalRequest{Name: s.reg.Prefix + "disabled", Disabled: true}, &disabled))
	other := e.newService(true, "")
	stranger := e.principal(other, "stranger")

	t.Run("SCOPED_NOT_ALLOWED", func(t *testing.T) {
		plain := e.newService(false, "")
		p := e.principal(plain, "p")
		_, err := e.mint(plain, api.ScopedRequest{ActingAs: p.Name})
		wantRefusal(t, "service without allowScoped", err, api.LayerGateway, api.CodeScopedNotAllowed, http.StatusForbidden)
	})
	t.Run("SCOPE_TOO_WIDE", func(t *testing.T) {
		objs := make([]string, 65)
		for i := range objs {
			objs[i] = fmt.Sprintf("ttag-%02d", i)
		}
		_, err := e.mint(s, api.ScopedRequest{ActingAs: alice.Name, Objects: objs})
		wantRefusal(t, "65 objects", err, api.LayerGateway, api.CodeScopeTooWide, http.StatusBadRequest)
		sess, err := e.mint(s, api.ScopedRequest{ActingAs: alice.Name, Objects: objs[:64]})
		wantOK(t, "64 objects", err)
		if len(sess.resp.Objects) != 64 {
			t.Errorf("64 objects answered %d", len(sess.resp.Objects))
		}
		// Repeats count once.
		_, err = e.mint(s, api.ScopedRequest{ActingAs: alice.Name, Objects: append(objs[:64:64], objs[0])})
		wantOK(t, "64 distinct objects and a repeat", err)
	})
	bad := []struct {
		name string
		req  api.ScopedRequest
	}{
		{"ttl 0", api.ScopedRequest{ActingAs: alice.Name, TTLSeconds: 0}},
		{"ttl -1", api.ScopedRequest{ActingAs: alice.Name, TTLSeconds: -1}},
		{"ttl 301", api.ScopedRequest{ActingAs: alice.Name, TTLSeconds: 301}},
		{"no holder key", api.ScopedRequest{ActingAs: alice.Name, TTLSeconds: 60, HolderJWK: json.RawMessage(`null`)}},
		{"holder key not EC", api.ScopedRequest{ActingAs: alice.Name, TTLSeconds: 60, HolderJWK: json.RawMessage(`{"kty":"oct","k":"AAAA"}`)}},
		{"holder key private", api.ScopedRequest{ActingAs: alice.Name, TTLSeconds: 60, HolderJWK: privateJWK(t)}},
		{"neither actingAs nor subjectToken", api.ScopedRequest{TTLSeconds: 60}},
		{"both actingAs and subjectToken", api.ScopedRequest{ActingAs: alice.Name, SubjectToken: "a.b.c", TTLSeconds: 60}},
		{"empty object", api.ScopedRequest{ActingAs: alice.Name, Objects: []string{""}, TTLSeconds: 60}},
	}
	for _, c := range bad {
		t.Run("BAD_REQUEST/"+c.name, func(t *testing.T) {
			if c.req.HolderJWK == nil {
				c.req.HolderJWK = s.sender.PublicJWK()
			}
			err := e.call(api.RouteScoped, s.handle, s.sender, c.req, nil)
			wantRefusal(t, c.name, err, api.LayerGateway, api.CodeBadRequest, http.StatusBadRequest)
		})
	}
	t.Run("BAD_REQUEST/unknown field", func(t *testing.T) {
		body := []byte(`{"actingAs":"` + alice.Name + `","ttlSeconds":60,"holderJwk":` + string(s.sender.PublicJWK()) + `,"scope":"all"}`)
		err := e.decode(api.RouteScoped, e.do(request{route: api.RouteScoped, body: body, handle: s.handle, key: s.sender}), nil)
		wantRefusal(t, "unknown field", err, api.LayerGateway, api.CodeBadRequest, http.StatusBadRequest)
	})
	refused := []struct{ name, actingAs string }{
		{"unknown principal", s.reg.Prefix + "nobody"},
		{"outside the prefix", stranger.Name},
		{"disabled", disabled.Name},
	}
	for _, c := range refused {
		t.Run("ACTING_AS_REFUSED/"+c.name, func(t *testing.T) {
			_, err := e.mint(s, api.ScopedRequest{ActingAs: c.actingAs})
			wantRefusal(t, c.name, err, api.LayerGateway, api.CodeActingAsRefused, http.StatusForbidden)
		})
	}
	t.Run("SCOPE_TOO_WIDE for a mint in a full session", func(t *testing.T) {
		objs := make([]string, 64)
		for i := range objs {
			objs[i] = fmt.Sprintf("full-%02d", i)
		}
		sess := e.scoped(s, alice, objs...)
		before, _ := e.gw.KeyServerAudit(context.Background())
		_, err := e.encrypt(sess, api.EncryptRequest{Plaintext: b64("one key too many")})
		wantRefusal(t, "mint at 64 objects", err, api.LayerGateway, api.CodeScopeTooWide, http.StatusBadRequest)
		after, _ := e.gw.KeyServerAudit(context.Background())
		if len(after) != len(before) {
			t.Error("the refused mint reached the key server")
		}
		wantOK(t, "a session with room mints", func() *api.Error {
			_, err := e.encrypt(e.scoped(s, alice, objs[:63]...), api.EncryptRequest{Plaintext: b64("fits")})
			return err
		}())
	})
	t.Run("unknown t-Tag is allowed in the scope", func(t *testing.T) {
		sess := e.scoped(s, alice, "no-such-key")
		_, err := e.decrypt(sess, api.DecryptRequest{TTag: "no-such-key", IV: b64("0123456789abcdef"), Ciphertext: b64("xxxxxxxxxxxxxxxxxxxx")})
		wantRefusal(t, "decrypt under it", err, api.LayerKeyServer, api.CodeKeyNotFound, http.StatusNotFound)
	})
}

// privateJWK is a P-256 private key as a JWK document, which a holder key
// must never be.
func privateJWK(t *testing.T) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(newPrivateJWK(t))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
