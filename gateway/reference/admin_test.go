package reference

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/internal/testutil"
)

func TestAdminAuthRefused(t *testing.T) {
	e := newEnv(t)
	s := e.newService(true, "")
	keys := newServiceKeys(t)
	reg := api.RegisterServiceRequest{Name: "intruder", Certificate: keys.certPEM, SenderJWK: keys.sender.PublicJWK(), AllowScoped: true}
	basic := func(user, pass string) http.Header {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		r.SetBasicAuth(user, pass)
		return http.Header{"Authorization": r.Header.Values("Authorization")}
	}
	cases := []struct {
		name  string
		route string
		req   request
	}{
		{"no credentials", api.RouteAdminRegisterService, request{}},
		{"wrong password", api.RouteAdminRegisterService, request{header: basic(testAdminUser, "guess")}},
		{"wrong user", api.RouteAdminRegisterService, request{header: basic("root", testAdminPassword)}},
		{"service session on an admin-only route", api.RouteAdminRegisterService, request{handle: s.handle, key: s.sender}},
		{"service session binding a provider", api.RouteAdminBindProvider, request{handle: s.handle, key: s.sender}},
		{"no credentials creating a principal", api.RouteAdminCreatePrincipal, request{}},
		{"wrong password creating a principal", api.RouteAdminCreatePrincipal, request{header: basic(testAdminUser, "guess")}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.req.route = c.route
			c.req.body = reg
			if c.route == api.RouteAdminCreatePrincipal {
				c.req.body = api.PrincipalRequest{Name: s.reg.Prefix + "eve"}
			}
			resp := e.do(c.req)
			wantRefusal(t, c.name, e.decode(c.route, resp, nil), api.LayerGateway, api.CodeAdminAuthRequired, http.StatusUnauthorized)
			if resp.header.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
		})
	}
	// Nothing was created.
	err := e.admin(api.RouteAdminGetPrincipal, api.PrincipalRequest{Name: s.reg.Prefix + "eve"}, nil)
	wantRefusal(t, "eve", err, api.LayerGateway, api.CodeNotFound, http.StatusNotFound)
	if err := e.login(keys); err == nil || err.Code != api.CodeServiceLoginRefused {
		t.Errorf("the intruder's service can sign in: %v", err)
	}
}

func TestRegisterService(t *testing.T) {
	e := newEnv(t)
	s := e.newService(false, "")
	if !regexp.MustCompile(`^xa\.[0-9a-f]{8}\.$`).MatchString(s.reg.Prefix) {
		t.Errorf("default prefix %q, want xa.<8 hex>.", s.reg.Prefix)
	}
	other := newServiceKeys(t)
	good := api.RegisterServiceRequest{Name: "other", Certificate: other.certPEM, SenderJWK: other.sender.PublicJWK(), Prefix: "xa.other."}
	cases := []struct {
		name   string
		change func(r *api.RegisterServiceRequest)
		code   string
		status int
	}{
		{"no name", func(r *api.RegisterServiceRequest) { r.Name = "" }, api.CodeBadRequest, http.StatusBadRequest},
		{"certificate not PEM", func(r *api.RegisterServiceRequest) { r.Certificate = "hello" }, api.CodeBadRequest, http.StatusBadRequest},
		{"sender key private", func(r *api.RegisterServiceRequest) { r.SenderJWK = privateJWK(t) }, api.CodeBadRequest, http.StatusBadRequest},
		{"delegator not PEM", func(r *api.RegisterServiceRequest) { r.DelegatorCertificate = "x" }, api.CodeBadRequest, http.StatusBadRequest},
		{"prefix with a space", func(r *api.RegisterServiceRequest) { r.Prefix = "xa. bad." }, api.CodeBadRequest, http.StatusBadRequest},
		{"certificate taken", func(r *api.RegisterServiceRequest) { r.Certificate = s.certPEM }, api.CodeConflict, http.StatusConflict},
		{"prefix taken", func(r *api.RegisterServiceRequest) { r.Prefix = s.reg.Prefix }, api.CodeConflict, http.StatusConflict},
		{"prefix inside another", func(r *api.RegisterServiceRequest) { r.Prefix = s.reg.Prefix + "sub." }, api.CodeConflict, http.StatusConflict},
		{"prefix around another", func(r *api.RegisterServiceRequest) { r.Prefix = "xa." }, api.CodeConflict, http.StatusConflict},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := good
			c.change(&r)
			wantRefusal(t, c.name, e.admin(api.RouteAdminRegisterService, r, nil), api.LayerGateway, c.code, c.status)
		})
	}
	var out api.RegisterServiceResponse
	wantOK(t, "register", e.admin(api.RouteAdminRegisterService, good, &out))
	if out.Prefix != "xa.other." || out.SystemID == s.reg.SystemID || out.ServiceID == s.reg.ServiceID {
		t.Errorf("second registration %+v, first %+v", out, s.reg)
	}
	err := e.admin(api.RouteAdminRegisterService, good, nil)
	wantRefusal(t, "same name again", err, api.LayerGateway, api.CodeConflict, http.StatusConflict)
}

func TestPrincipals(t *testing.T) {
	e := newEnv(t)
	s := e.newService(true, "")
	other := e.newService(true, "")

	alice := e.principal(s, "alice")
	if alice.PrincipalID != "1001" || alice.SystemID != s.reg.SystemID || alice.Disabled ||
		len(alice.Roles) != 3 {
		t.Errorf("first principal %+v, want id 1001, the service's system id, the default roles", alice)
	}
	bob := e.principal(s, "bob", api.RoleDecrypt)
	if bob.PrincipalID != "1002" || len(bob.Roles) != 1 || bob.Roles[0] != api.RoleDecrypt {
		t.Errorf("second principal %+v", bob)
	}
	if p := e.principal(other, "alice"); p.PrincipalID != "1001" || p.SystemID != other.reg.SystemID {
		t.Errorf("another service's first principal %+v", p)
	}

	t.Run("with a service session", func(t *testing.T) {
		var p api.Principal
		wantOK(t, "create", e.call(api.RouteAdminCreatePrincipal, s.handle, s.sender,
			api.PrincipalRequest{Name: s.reg.Prefix + "carol", Roles: []string{api.RoleEncrypt, api.RoleEncrypt}}, &p))
		if p.PrincipalID != "1003" || len(p.Roles) != 1 {
			t.Errorf("carol %+v", p)
		}
		var got api.Principal
		wantOK(t, "get", e.call(api.RouteAdminGetPrincipal, s.handle, s.sender, api.PrincipalRequest{Name: p.Name}, &got))
		if got.Name != p.Name || got.PrincipalID != p.PrincipalID {
			t.Errorf("get answered %+v", got)
		}
		for _, route := range []string{api.RouteAdminCreatePrincipal, api.RouteAdminGetPrincipal, api.RouteAdminDeletePrincipal} {
			err := e.call(route, s.handle, s.sender, api.PrincipalRequest{Name: other.reg.Prefix + "alice"}, nil)
			wantRefusal(t, route+" outside the prefix", err, api.LayerGateway, api.CodeActingAsRefused, http.StatusForbidden)
		}
		err := e.call(api.RouteAdminMapIdentity, s.handle, s.sender, api.MapIdentityRequest{
			Issuer: "https://idp.example", Subject: "u", Principal: other.reg.Prefix + "alice"}, nil)
		wantRefusal(t, "map outside the prefix", err, api.LayerGateway, api.CodeActingAsRefused, http.StatusForbidden)
		err = e.call(api.RouteAdminMapIdentity, s.handle, s.sender, api.MapIdentityRequest{ServiceID: other.reg.ServiceID,
			Issuer: "https://idp.example", Subject: "u", Principal: other.reg.Prefix + "alice"}, nil)
		wantRefusal(t, "map for another service", err, api.LayerGateway, api.CodeActingAsRefused, http.StatusForbidden)
		wantOK(t, "map inside", e.call(api.RouteAdminMapIdentity, s.handle, s.sender, api.MapIdentityRequest{
			Issuer: "https://idp.example", Subject: "u", Principal: alice.Name}, nil))
		wantOK(t, "unmap", e.call(api.RouteAdminUnmapIdentity, s.handle, s.sender, api.MapIdentityRequest{
			Issuer: "https://idp.example", Subject: "u"}, nil))
		wantOK(t, "delete", e.call(api.RouteAdminDeletePrincipal, s.handle, s.sender, api.PrincipalRequest{Name: p.Name}, nil))
	})
	t.Run("refusals", func(t *testing.T) {
		cases := []struct {
			name   string
			route  string
			body   api.PrincipalRequest
			code   string
			status int
		}{
			{"exists", api.RouteAdminCreatePrincipal, api.PrincipalRequest{Name: alice.Name}, api.CodeConflict, http.StatusConflict},
			{"no prefix", api.RouteAdminCreatePrincipal, api.PrincipalRequest{Name: "alice"}, api.CodeBadRequest, http.StatusBadRequest},
			{"only the prefix", api.RouteAdminCreatePrincipal, api.PrincipalRequest{Name: s.reg.Prefix}, api.CodeBadRequest, http.StatusBadRequest},
			{"unknown role", api.RouteAdminCreatePrincipal, api.PrincipalRequest{Name: s.reg.Prefix + "x", Roles: []string{"ROOT"}}, api.CodeBadRequest, http.StatusBadRequest},
			{"get unknown", api.RouteAdminGetPrincipal, api.PrincipalRequest{Name: s.reg.Prefix + "nobody"}, api.CodeNotFound, http.StatusNotFound},
			{"delete unknown", api.RouteAdminDeletePrincipal, api.PrincipalRequest{Name: s.reg.Prefix + "nobody"}, api.CodeNotFound, http.StatusNotFound},
		}
		for _, c := range cases {
			wantRefusal(t, c.name, e.admin(c.route, c.body, nil), api.LayerGateway, c.code, c.status)
		}
	})
	t.Run("ids are never reused", func(t *testing.T) {
		wantOK(t, "delete bob", e.admin(api.RouteAdminDeletePrincipal, api.PrincipalRequest{Name: bob.Name}, nil))
		again := e.principal(s, "bob")
		if again.PrincipalID == bob.PrincipalID {
			t.Errorf("a new bob got the deleted bob's id %s", again.PrincipalID)
		}
	})
}

func TestPlainHTTP(t *testing.T) {
	for _, allow := range []bool{false, true} {
		e := &env{t: t, clock: testutil.NewClock(time.Time{}), dbPath: filepath.Join(t.TempDir(), "g.sqlite")}
		gw, err := Open(context.Background(), Config{DBPath: e.dbPath, AdminUser: testAdminUser,
			AdminPassword: testAdminPassword, AllowHTTPLoopback: allow})
		if err != nil {
			t.Fatal(err)
		}
		e.gw = gw
		e.srv = httptest.NewServer(gw) // plain HTTP on 127.0.0.1
		t.Cleanup(e.stop)
		e.clock.Set(time.Now())
		keys := newServiceKeys(t)
		refusal := e.admin(api.RouteAdminRegisterService, api.RegisterServiceRequest{Name: "plain", Certificate: keys.certPEM,
			SenderJWK: keys.sender.PublicJWK(), AllowScoped: true}, &keys.reg)
		if !allow {
			wantRefusal(t, "plain HTTP", refusal, api.LayerGateway, api.CodeBadRequest, http.StatusBadRequest)
			continue
		}
		wantOK(t, "register over loopback HTTP", refusal)
		// Proofs name http:// URLs when the request came without TLS.
		wantOK(t, "login over loopback HTTP", e.login(keys))
		p, err := keys.sender.Make(http.MethodPost, "https"+e.url(api.RouteAdminGetPrincipal)[len("http"):], keys.handle, e.clock.Now())
		if err != nil {
			t.Fatal(err)
		}
		err2 := e.decode(api.RouteAdminGetPrincipal, e.do(request{route: api.RouteAdminGetPrincipal, handle: keys.handle,
			proofToken: p, body: api.PrincipalRequest{Name: keys.reg.Prefix + "x"}}), nil)
		wantRefusal(t, "https htu over http", err2, api.LayerGateway, api.CodeProofInvalid, http.StatusUnauthorized)
	}
	if isLoopback("192.0.2.1:443") || !isLoopback("[::1]:80") || !isLoopback("127.0.0.1:1") {
		t.Error("isLoopback misjudges an address")
	}
}

func TestOpenRefusesBadConfig(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cases := []Config{
		{DBPath: filepath.Join(dir, "a.sqlite"), AdminUser: "admin"},
		{DBPath: filepath.Join(dir, "b.sqlite"), AdminPassword: "pw"},
		{AdminUser: "admin", AdminPassword: "pw"},
		{DBPath: filepath.Join(dir, "missing", "c.sqlite"), AdminUser: "admin", AdminPassword: "pw"},
	}
	for i, c := range cases {
		if g, err := Open(ctx, c); err == nil {
			g.Close()
			t.Errorf("case %d: Open accepted %+v", i, c)
		}
	}
	// A database from a newer program is refused, not rewritten.
	path := filepath.Join(dir, "newer.sqlite")
	g, err := Open(ctx, Config{DBPath: path, AdminUser: "a", AdminPassword: "b"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.store.db.Exec(`PRAGMA user_version = 99`); err != nil {
		t.Fatal(err)
	}
	g.Close()
	if g, err := Open(ctx, Config{DBPath: path, AdminUser: "a", AdminPassword: "b"}); err == nil {
		g.Close()
		t.Error("Open accepted a database at schema version 99")
	}
}
