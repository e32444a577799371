package tlspolicy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/internal/fileerr"
)

// selfSigned returns a certificate and its key, both PEM.
func selfSigned(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
}

// TestKeyPair: each refusal names the file at fault, or both files when
// they are not a pair.
func TestKeyPair(t *testing.T) {
	cert, key := selfSigned(t)
	_, otherKey := selfSigned(t)
	const c, k = "/etc/pdmcp/mcp-tls.pem", "/etc/pdmcp/mcp-tls.key"
	tests := []struct {
		name       string
		cert, key  []byte
		want       string // "" when the pair is made
		wantTarget error
	}{
		{"a pair", cert, key, "", nil},
		{"another key", cert, otherKey, c + " and " + k + " are not a pair: the key is not the one the certificate was issued for; give the certificate's own key", ErrNotAPair},
		{"swapped", key, cert, c + " holds a private key where the certificate is wanted; are the certificate and the key given the other way round?", nil},
		{"two certificates", cert, cert, k + " holds a certificate where the private key is wanted; are the certificate and the key given the other way round?", nil},
		{"no certificate", []byte("hello\n"), key, c + " holds no certificate in PEM form (a CERTIFICATE block)", nil},
		{"no key", cert, []byte("hello\n"), k + " holds no private key in a form this server reads (PEM: PRIVATE KEY, EC PRIVATE KEY or RSA PRIVATE KEY)", nil},
		{"empty certificate", nil, key, c + " is empty: it should hold a TLS certificate in PEM form", fileerr.ErrEmpty},
		{"empty key", cert, []byte("\n"), k + " is empty: it should hold the TLS certificate's private key in PEM form", fileerr.ErrEmpty},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := KeyPair(c, tt.cert, k, tt.key)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("KeyPair: %v", err)
				}
				return
			}
			if err == nil || err.Error() != tt.want {
				t.Fatalf("KeyPair: %v\nwant %s", err, tt.want)
			}
			if tt.wantTarget != nil && !errors.Is(err, tt.wantTarget) {
				t.Fatalf("KeyPair: %v does not match %v", err, tt.wantTarget)
			}
		})
	}
}

func TestLoadKeyPair(t *testing.T) {
	dir := t.TempDir()
	cert, key := selfSigned(t)
	cf, kf := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	if err := os.WriteFile(cf, cert, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kf, key, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKeyPair(cf, kf); err != nil {
		t.Fatalf("LoadKeyPair: %v", err)
	}
	if _, err := LoadKeyPair(cf, filepath.Join(dir, "absent")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("LoadKeyPair of no key: %v", err)
	}
}
