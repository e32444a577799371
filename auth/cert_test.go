package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testCA is a certificate authority made for a test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "pdmcp test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key}
}

// serverTemplate is a fit server certificate: CA:FALSE, serverAuth,
// IP:127.0.0.1.
func serverTemplate() *x509.Certificate {
	return &x509.Certificate{
		SerialNumber:          big.NewInt(2),
		Subject:               pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		BasicConstraintsValid: true,
		IsCA:                  false,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
	}
}

// issue writes tmpl signed by ca (or by its own key when ca is nil) to a
// PEM file and returns its path.
func issue(t *testing.T, ca *testCA, tmpl *x509.Certificate) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	parent, signer := tmpl, key
	if ca != nil {
		parent, signer = ca.cert, ca.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "server.pem")
	writePEM(t, path, "CERTIFICATE", der, 0o644)
	return path
}

// writeForeignCA writes a CA certificate that signed nothing any test
// server uses.
func writeForeignCA(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "foreign-ca.pem")
	writePEM(t, path, "CERTIFICATE", newTestCA(t).cert.Raw, 0o644)
	return path
}

func TestCheckServerCertificate(t *testing.T) {
	ca := newTestCA(t)
	tests := []struct {
		name string
		path func() string
		want []string // every phrase must appear; none means accepted
	}{
		{"issued by a CA, CA:FALSE, serverAuth, IP:127.0.0.1", func() string { return issue(t, ca, serverTemplate()) }, nil},
		{"the CA itself", func() string {
			p := filepath.Join(t.TempDir(), "ca.pem")
			writePEM(t, p, "CERTIFICATE", ca.cert.Raw, 0o644)
			return p
		}, []string{"CA certificate (basicConstraints CA:TRUE)", "self-signed", "serverAuth", "IP:127.0.0.1"}},
		{"a CA issued by the CA", func() string {
			c := serverTemplate()
			c.IsCA = true
			return issue(t, ca, c)
		}, []string{"basicConstraints CA:TRUE"}},
		{"self-signed leaf", func() string { return issue(t, nil, serverTemplate()) }, []string{"self-signed"}},
		{"no extended key usage", func() string {
			c := serverTemplate()
			c.ExtKeyUsage = nil
			return issue(t, ca, c)
		}, []string{"lacks extended key usage serverAuth"}},
		{"clientAuth only", func() string {
			c := serverTemplate()
			c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
			return issue(t, ca, c)
		}, []string{"lacks extended key usage serverAuth"}},
		{"DNS localhost only", func() string {
			c := serverTemplate()
			c.IPAddresses = nil
			c.DNSNames = []string{"localhost"}
			return issue(t, ca, c)
		}, []string{"lacks the subject alternative name IP:127.0.0.1"}},
		{"IP ::1 only", func() string {
			c := serverTemplate()
			c.IPAddresses = []net.IP{net.IPv6loopback}
			return issue(t, ca, c)
		}, []string{"IP:127.0.0.1"}},
		{"expired", func() string {
			c := serverTemplate()
			c.NotBefore, c.NotAfter = time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour)
			return issue(t, ca, c)
		}, []string{"expired at"}},
		{"not a PEM file", func() string {
			p := filepath.Join(t.TempDir(), "junk.pem")
			if err := os.WriteFile(p, []byte("hello"), 0o644); err != nil {
				t.Fatal(err)
			}
			return p
		}, []string{"no PEM CERTIFICATE block"}},
		{"missing file", func() string { return filepath.Join(t.TempDir(), "absent.pem") }, []string{"no such file"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckServerCertificate(tc.path())
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("refused a fit certificate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}
