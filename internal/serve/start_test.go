package serve_test

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/auth"
	"github.com/pdmcp/pdmcp/auth/devpki"
	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/reference"
	"github.com/pdmcp/pdmcp/gateway/reference/reftest"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/operator"
	"github.com/pdmcp/pdmcp/internal/serve"
	"github.com/pdmcp/pdmcp/internal/stack"
	"github.com/pdmcp/pdmcp/internal/testutil"
)

// TestHTTPStartRefusals: serve --transport http refuses, before serving, a
// server certificate hosts would reject and a grant that names a local user.
func TestHTTPStartRefusals(t *testing.T) {
	ctx := context.Background()
	f := newSeededFolder(t)
	dir, cfgPath, data, rec, manifest := f.dir, f.cfgPath, f.data, f.rec, f.manifest
	localGrant := filepath.Join(data, "local-grant.json")
	if _, err := grant.Launch(grant.LaunchOptions{ManifestPath: manifest, AllApproved: true, LocalUser: rec.AgentUser,
		TTL: time.Hour, Out: localGrant}); err != nil {
		t.Fatal(err)
	}
	callerGrant := filepath.Join(data, "caller-grant.json")
	if _, err := grant.Launch(grant.LaunchOptions{ManifestPath: manifest, AllApproved: true, CallerIdentity: true,
		TTL: time.Hour, Out: callerGrant}); err != nil {
		t.Fatal(err)
	}
	ca, err := devpki.LoadOrCreateCA(filepath.Join(dir, "ca"), "t")
	if err != nil {
		t.Fatal(err)
	}
	goodCert, goodKey, err := ca.Issue(dir, "mcp")
	if err != nil {
		t.Fatal(err)
	}
	selfCert, selfKey := selfSigned(t, dir)
	if err := os.WriteFile(filepath.Join(dir, "secret"), []byte("s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	writeHTTPConfig := func(name, host, cert, key string) string {
		p := filepath.Join(dir, name)
		if err := stack.WriteHTTPConfig(p, auth.HTTPConfig{Listen: auth.ListenConfig{Host: host, Port: freePort(t)},
			TLS:      auth.TLSConfig{Certificate: cert, Key: key},
			Provider: auth.ProviderConfig{Issuer: "https://127.0.0.1:1", CAFile: ca.CertPEM, AllowedAlgs: []string{"ES256"}},
			Exchange: auth.ExchangeConfig{ClientID: "mcp-adapter", ClientSecretFile: filepath.Join(dir, "secret"),
				GatewayAudience: "gateway-api"},
			RequiredScopes: []string{"openid"}, MaxCallers: 2}); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name, httpConfig, grant, want string
	}{
		{"self-signed certificate", writeHTTPConfig("self.json", "127.0.0.1", selfCert, selfKey), callerGrant, "self-signed"},
		{"CA as the server certificate", writeHTTPConfig("ca.json", "127.0.0.1", ca.CertPEM, filepath.Join(dir, "ca", "ca-key.pem")), callerGrant, "is a CA certificate (basicConstraints CA:TRUE)"},
		{"another listen host", writeHTTPConfig("host.json", "0.0.0.0", goodCert, goodKey), callerGrant, "127.0.0.1"},
		{"a grant naming a local user", writeHTTPConfig("good.json", "127.0.0.1", goodCert, goodKey), localGrant, "--caller-identity"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			err := serve.Run(ctx, serve.Options{ConfigPath: cfgPath, ManifestPath: manifest, GrantPath: tc.grant,
				AuditPath: filepath.Join(dir, "audit.jsonl"), HTTPConfigPath: tc.httpConfig})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want a refusal naming %q", err, tc.want)
			}
		})
	}
}

// TestStartRefusesUnapprovedDocument: a grant naming a document whose
// approval the operator withdrew is refused at start, naming the document,
// over either transport; nothing is minted at the Gateway.
func TestStartRefusesUnapprovedDocument(t *testing.T) {
	ctx := context.Background()
	f := newSeededFolder(t)
	dir, env, cfgPath, data, rec, manifest := f.dir, f.env, f.cfgPath, f.data, f.rec, f.manifest
	grantPath := filepath.Join(data, "grant.json")
	if _, err := grant.Launch(grant.LaunchOptions{ManifestPath: manifest, AllApproved: true, LocalUser: rec.AgentUser,
		TTL: time.Hour, Out: grantPath}); err != nil {
		t.Fatal(err)
	}
	// Written past the launcher, which refuses to name it.
	g, err := grant.Load(grantPath)
	if err != nil {
		t.Fatal(err)
	}
	g.Documents = append(g.Documents, "proposal-equinox")
	if err := g.Save(grantPath); err != nil {
		t.Fatal(err)
	}
	env.Gateway.ResetCounts()
	err = serve.Run(ctx, serve.Options{ConfigPath: cfgPath, ManifestPath: manifest, GrantPath: grantPath,
		AuditPath: filepath.Join(dir, "audit.jsonl")})
	if !errors.Is(err, grant.ErrNotApproved) || !strings.Contains(err.Error(), `"proposal-equinox"`) {
		t.Fatalf("got %v, want a refusal naming proposal-equinox as not approved", err)
	}
	if n := env.Gateway.Count(api.RouteScoped); n != 0 {
		t.Errorf("%d scoped sessions minted for a refused grant", n)
	}
}

// seededFolder is a reference Gateway, its service configuration and a task
// folder seeded on it: what both start tests begin from.
type seededFolder struct {
	dir, cfgPath, data, manifest string
	env                          *reftest.Env
	rec                          *grant.SeedRecord
}

func newSeededFolder(t *testing.T) seededFolder {
	t.Helper()
	f := seededFolder{dir: t.TempDir(), env: reftest.Start(t, reference.Config{})}
	svc := f.env.Service(t, "svc", true)
	f.cfgPath = filepath.Join(f.dir, "config.json")
	if err := gateway.WriteServiceConfig(f.cfgPath, svc); err != nil {
		t.Fatal(err)
	}
	f.data = filepath.Join(f.dir, "task-data")
	rec, err := operator.Seed(context.Background(), operator.SeedOptions{Config: svc, OutDir: f.data, Tag: "s"})
	if err != nil {
		t.Fatal(err)
	}
	f.rec, f.manifest = rec, filepath.Join(f.data, "manifest.json")
	return f
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func selfSigned(t *testing.T, dir string) (string, string) {
	key := testutil.NewKey(t)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(5), Subject: pkix.Name{CommonName: "self"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalPKCS8PrivateKey(key)
	cert, keyFile := filepath.Join(dir, "self.pem"), filepath.Join(dir, "self-key.pem")
	_ = os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	_ = os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), 0o600)
	return cert, keyFile
}
