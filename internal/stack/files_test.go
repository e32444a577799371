package stack

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/pdmcp/pdmcp/auth"
	"github.com/pdmcp/pdmcp/auth/devpki"
)

// TestWriteHTTPConfig: what WriteHTTPConfig writes, auth.LoadHTTPConfig
// reads back as written, with the files inside the config's folder named
// relative to it and those outside it absolute.
func TestWriteHTTPConfig(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	ca, err := devpki.LoadOrCreateCA(filepath.Join(outside, "ca"), "test")
	if err != nil {
		t.Fatal(err)
	}
	_, cert, key, err := issue(ca, dir, "mcp")
	if err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	want := auth.HTTPConfig{Listen: auth.ListenConfig{Host: auth.ListenHost, Port: 8443},
		TLS:            auth.TLSConfig{Certificate: cert, Key: key},
		Provider:       auth.ProviderConfig{Issuer: "https://127.0.0.1:1", CAFile: ca.CertPEM, AllowedAlgs: []string{"ES256"}, JWKSRefreshMinSeconds: 5},
		Exchange:       auth.ExchangeConfig{ClientID: "mcp-adapter", ClientSecretFile: secret, GatewayAudience: "gateway-api"},
		RequiredScopes: []string{"openid"}, MaxCallers: 2, MaxSessions: 10}
	path := filepath.Join(dir, "mcp-http.json")
	if err := WriteHTTPConfig(path, want); err != nil {
		t.Fatal(err)
	}

	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var raw auth.HTTPConfig
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, got, want string }{
		{"tls.certificate", raw.TLS.Certificate, filepath.Join("mcp", "mcp-tls.pem")},
		{"tls.key", raw.TLS.Key, filepath.Join("mcp", "mcp-tls-key.pem")},
		{"exchange.clientSecretFile", raw.Exchange.ClientSecretFile, "secret"},
		{"provider.caFile", raw.Provider.CAFile, ca.CertPEM},
	} {
		if c.got != c.want {
			t.Errorf("%s written as %q, want %q", c.name, c.got, c.want)
		}
	}

	got, err := auth.LoadHTTPConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	want.Audience, want.Resource = "mcp-adapter", "https://127.0.0.1:8443/mcp"
	// The token and key-set bounds the file leaves out read back as the defaults.
	want.Provider.JWKSMaxAgeSeconds = int(auth.DefaultJWKSMaxAge.Seconds())
	want.Provider.JWKSGraceSeconds = int(auth.DefaultJWKSGrace.Seconds())
	want.Provider.MaxTokenLifetimeSeconds = int(auth.DefaultMaxTokenLifetime.Seconds())
	// The connection limits' defaults.
	want.Connections = auth.ConnectionsConfig{Max: auth.DefaultMaxConnections, SignedIn: auth.DefaultSignedInConnections,
		SignedInPerUser: auth.DefaultSignedInPerUser, HeaderTimeoutSeconds: 5, AnswerTimeoutSeconds: 60}
	gb, _ := json.Marshal(got)
	wb, _ := json.Marshal(want)
	if string(gb) != string(wb) {
		t.Errorf("read back\n%s\nwant\n%s", gb, wb)
	}
}
