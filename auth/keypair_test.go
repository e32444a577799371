package auth

import (
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/pdmcp/pdmcp/internal/fileerr"
	"github.com/pdmcp/pdmcp/internal/testutil"
	"github.com/pdmcp/pdmcp/internal/tlspolicy"
)

// TestKeyPairNamesBothFiles: a TLS key that is not the certificate's is
// refused naming both files, not in crypto/tls's words, which name neither.
func TestKeyPairNamesBothFiles(t *testing.T) {
	path := configDir(t, nil)
	dir := filepath.Dir(path)
	certDER, key := newTestCA(t).Sign(t, serverTemplate())
	certFile, keyFile := filepath.Join(dir, "mcp-tls.pem"), filepath.Join(dir, "mcp-tls.key")
	writePEM(t, certFile, "CERTIFICATE", certDER, 0o644)
	writeKey := func(k any) {
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		writePEM(t, keyFile, "PRIVATE KEY", der, 0o600)
	}
	writeKey(key)
	c, err := LoadHTTPConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.KeyPair(); err != nil {
		t.Fatalf("the certificate's own key: %v", err)
	}
	writeKey(testutil.NewKey(t))
	_, err = c.KeyPair()
	want := certFile + " and " + keyFile + " are not a pair: the key is not the one the certificate was issued for; give the certificate's own key"
	if !errors.Is(err, tlspolicy.ErrNotAPair) || err.Error() != want {
		t.Fatalf("another key: %v\nwant %s", err, want)
	}
}

// TestCheckServerCertificateEmpty: an empty certificate file is said to be
// empty, in the wording of every operator file.
func TestCheckServerCertificateEmpty(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mcp-tls.pem")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	err := CheckServerCertificate(path)
	want := path + " is empty: it should hold the server's TLS certificate in PEM form"
	if !errors.Is(err, fileerr.ErrEmpty) || err.Error() != want {
		t.Fatalf("CheckServerCertificate: %v\nwant %s", err, want)
	}
}

// TestProviderCAFileEmpty: an empty provider.caFile is said to be empty.
func TestProviderCAFileEmpty(t *testing.T) {
	path := filepath.Join(t.TempDir(), "idp-ca.pem")
	if err := os.WriteFile(path, []byte("\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := NewProviderClient(path, 0)
	want := "provider CA file: " + path + " is empty: it should hold the CA certificates the OpenID provider is trusted by, in PEM form"
	if !errors.Is(err, fileerr.ErrEmpty) || err.Error() != want {
		t.Fatalf("NewProviderClient: %v\nwant %s", err, want)
	}
}
