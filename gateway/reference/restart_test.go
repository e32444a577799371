package reference

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/internal/testutil"
)

func TestStateSurvivesRestart(t *testing.T) {
	w := newWorld(t)
	wantOK(t, "grant bob", w.grant(w.owner, w.key.TTag, w.bob, []string{api.RightRead}, nil, nil))
	oldHandle := w.svc.handle
	rowsBefore := len(w.audit())

	w.restart()

	// Sessions are gone...
	err := w.call(api.RouteScoped, oldHandle, w.svc.sender, api.ScopedRequest{}, nil)
	wantRefusal(t, "old service handle", err, api.LayerGateway, api.CodeServiceSessionExpired, http.StatusUnauthorized)
	_, err = w.decrypt(w.owner, w.decryptReq())
	wantRefusal(t, "old scoped handle", err, api.LayerGateway, api.CodeSessionMissing, http.StatusUnauthorized)

	// ...services, principals, keys, ACL entries and the audit are not.
	wantOK(t, "sign in again", w.login(w.svc))
	var got api.Principal
	wantOK(t, "get bob", w.admin(api.RouteAdminGetPrincipal, api.PrincipalRequest{Name: w.bob.Name}, &got))
	if got.PrincipalID != w.bob.PrincipalID || got.SystemID != w.bob.SystemID {
		t.Errorf("bob after restart %+v, before %+v", got, w.bob)
	}
	bob := w.scoped(w.svc, w.bob, w.key.TTag)
	out, err := w.decrypt(bob, w.decryptReq())
	wantOK(t, "bob decrypts after restart", err)
	if pt, _ := base64.StdEncoding.DecodeString(out.Plaintext); string(pt) != w.text {
		t.Errorf("decrypted %q", pt)
	}
	owner := w.scoped(w.svc, w.alice, w.key.TTag)
	w.owner = owner
	if entries := w.aclEntries(owner); len(entries) != 2 || entryOf(entries, w.bob) == nil {
		t.Errorf("ACL after restart %+v", entries)
	}
	if rows := w.audit(); len(rows) != rowsBefore+2 {
		t.Errorf("audit has %d rows after restart and two decisions, want %d", len(rows), rowsBefore+2)
	}
	// New principals continue the id sequence.
	if p := w.principal(w.svc, "dave"); p.PrincipalID != "1004" {
		t.Errorf("first principal after restart got id %s, want 1004", p.PrincipalID)
	}
	info, err2 := os.Stat(w.dbPath)
	if err2 != nil {
		t.Fatal(err2)
	}
	if mode := info.Mode().Perm(); mode != 0o600 {
		t.Errorf("database file mode %o, want 600 (it holds keys)", mode)
	}
}

// writeServerCert writes a self-signed server certificate for 127.0.0.1
// and its key, and returns their paths and a pool that trusts it.
func writeServerCert(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	ca := testutil.NewCA(t, "pdmcp test Gateway CA")
	der, key := ca.Sign(t, &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature,
	})
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return certFile, keyFile, pool
}

func TestServe(t *testing.T) {
	certFile, keyFile, pool := writeServerCert(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := Serve(ctx, ServeConfig{
		Config:   Config{DBPath: filepath.Join(t.TempDir(), "g.sqlite"), AdminUser: testAdminUser, AdminPassword: testAdminPassword},
		CertFile: certFile, KeyFile: keyFile,
	})
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer client.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodPost, srv.URL+api.RouteAdminGetPrincipal, bytes.NewReader([]byte(`{"name":"nobody"}`)))
	req.SetBasicAuth(testAdminUser, testAdminPassword)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("call the served Gateway: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || resp.ProtoMajor != 1 || resp.TLS == nil {
		t.Errorf("answer %d over %s (TLS %v), want 400 over HTTP/1.1 with TLS", resp.StatusCode, resp.Proto, resp.TLS != nil)
	}
	if srv.Gateway.Count(api.RouteAdminGetPrincipal) != 1 {
		t.Error("the served Gateway did not count the request")
	}
	cancel()
	<-srv.Done()
	if err := srv.Close(); err != nil {
		t.Errorf("Close after the context ended: %v", err)
	}

	if _, err := Serve(context.Background(), ServeConfig{Config: Config{DBPath: filepath.Join(t.TempDir(), "p.sqlite"),
		AdminUser: "a", AdminPassword: "b"}, PlainHTTP: true}); err == nil {
		t.Error("Serve accepted plain HTTP without AllowHTTPLoopback")
	}
	if _, err := Serve(context.Background(), ServeConfig{Config: Config{DBPath: filepath.Join(t.TempDir(), "q.sqlite"),
		AdminUser: "a", AdminPassword: "b"}}); err == nil {
		t.Error("Serve accepted no certificate")
	}
}
