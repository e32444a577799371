// Package reftest starts a reference Gateway over TLS on 127.0.0.1 for
// tests, and registers services at it, so that every package's tests talk to
// the same real HTTPS server rather than a mock.
package reftest

import (
	"context"
	"encoding/pem"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/reference"
)

// Admin credentials of every test Gateway.
const (
	AdminUser     = "admin"
	AdminPassword = "reference-admin-password"
)

// Env is a running reference Gateway.
type Env struct {
	URL               string
	CAFile            string // PEM of the server's certificate: the only trust needed
	DBPath            string
	AdminPasswordFile string // mode 0600
	Gateway           *reference.Gateway
	Server            *httptest.Server
	dir               string
	cfg               reference.Config
}

// Start opens a reference Gateway on a fresh SQLite file and serves it over
// TLS on 127.0.0.1 until the test ends.
func Start(t testing.TB, cfg reference.Config) *Env {
	t.Helper()
	dir := t.TempDir()
	if cfg.DBPath == "" {
		cfg.DBPath = filepath.Join(dir, "gateway.sqlite")
	}
	cfg.AdminUser, cfg.AdminPassword = AdminUser, AdminPassword
	e := &Env{DBPath: cfg.DBPath, dir: dir, cfg: cfg}
	e.AdminPasswordFile = filepath.Join(dir, "admin-password")
	if err := os.WriteFile(e.AdminPasswordFile, []byte(AdminPassword+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.open(t)
	return e
}

func (e *Env) open(t testing.TB) { e.openAt(t, "") }

// openAt opens the Gateway on e's database, listening on addr ("" for any
// free port).
func (e *Env) openAt(t testing.TB, addr string) {
	t.Helper()
	g, err := reference.Open(context.Background(), e.cfg)
	if err != nil {
		t.Fatalf("open reference gateway: %v", err)
	}
	srv := httptest.NewUnstartedServer(g)
	if addr != "" {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			_ = g.Close()
			t.Fatalf("listen again on %s: %v", addr, err)
		}
		_ = srv.Listener.Close()
		srv.Listener = ln
	}
	srv.StartTLS()
	e.Gateway, e.Server, e.URL = g, srv, srv.URL
	e.CAFile = filepath.Join(e.dir, "gateway-ca.pem")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(e.CAFile, pemBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.stop() })
}

func (e *Env) stop() {
	if e.Server != nil {
		e.Server.Close()
		e.Server = nil
	}
	if e.Gateway != nil {
		_ = e.Gateway.Close()
		e.Gateway = nil
	}
}

// Restart closes the Gateway and opens it again on the same database, as a
// process restart would: sessions are gone, state stays. The URL changes.
func (e *Env) Restart(t testing.TB) {
	t.Helper()
	e.stop()
	e.open(t)
}

// RestartSamePort closes the Gateway and opens it again on the same
// database, port and certificate, as a process restart behind a fixed
// address would: every session is forgotten, state stays, and clients
// configured with the old URL reach the new Gateway.
func (e *Env) RestartSamePort(t testing.TB) {
	t.Helper()
	addr := e.Server.Listener.Addr().String()
	e.stop()
	e.openAt(t, addr)
}

// Client is a client of this Gateway with no service credentials (admin
// routes only).
func (e *Env) Client(t testing.TB) *gateway.Client {
	t.Helper()
	c, err := gateway.New(gateway.Config{BaseURL: e.URL, TrustFile: e.CAFile})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Service registers a service with fresh credentials (scoped sessions
// allowed) and returns its config, as config.json would hold it.
func (e *Env) Service(t testing.TB, name string, allowScoped bool) *gateway.ServiceConfig {
	t.Helper()
	dir := filepath.Join(e.dir, "svc-"+name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	cert, login, sender, err := gateway.GenerateServiceCredentials(dir, name)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := gateway.ServiceRegistration(name, cert, sender)
	if err != nil {
		t.Fatal(err)
	}
	reg.AllowScoped = allowScoped
	got, err := e.Client(t).Admin(AdminUser, AdminPassword).RegisterService(context.Background(), reg)
	if err != nil {
		t.Fatalf("register service: %v", err)
	}
	return &gateway.ServiceConfig{GatewayURL: e.URL, TrustFile: e.CAFile, ServiceCert: cert,
		ServiceLoginKey: login, SenderKey: sender, ServiceID: got.ServiceID, SystemID: got.SystemID, Prefix: got.Prefix}
}

// ServiceClient is a client acting as the service sc names, at this
// Gateway's current URL.
func (e *Env) ServiceClient(t testing.TB, sc *gateway.ServiceConfig) *gateway.Client {
	t.Helper()
	cc := sc.ClientConfig()
	cc.BaseURL, cc.TrustFile = e.URL, e.CAFile
	c, err := gateway.New(cc)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Principal creates a principal with the given roles (api.DefaultRoles
// when none) through the service's own session.
func Principal(t testing.TB, c *gateway.Client, name string, roles ...string) *api.Principal {
	t.Helper()
	p, err := c.CreatePrincipal(context.Background(), api.PrincipalRequest{Name: name, Roles: roles})
	if err != nil {
		t.Fatalf("create principal %s: %v", name, err)
	}
	return p
}
