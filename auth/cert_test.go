package auth

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/internal/testutil"
)

// newTestCA is a certificate authority made for a test.
func newTestCA(t *testing.T) *testutil.CA { return testutil.NewCA(t, "pdmcp test CA") }

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
func issue(t *testing.T, ca *testutil.CA, tmpl *x509.Certificate) string {
	t.Helper()
	var der []byte
	if ca != nil {
		der, _ = ca.Sign(t, tmpl)
	} else {
		der = testutil.SelfSigned(t, tmpl, testutil.NewKey(t)).Raw
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
	writePEM(t, path, "CERTIFICATE", newTestCA(t).Cert.Raw, 0o644)
	return path
}

func TestCheckServerCertificate(t *testing.T) {
	ca := newTestCA(t)
	// issuedWith is the CA's server certificate with change made to it.
	issuedWith := func(change func(c *x509.Certificate)) func() string {
		return func() string {
			c := serverTemplate()
			change(c)
			return issue(t, ca, c)
		}
	}
	tests := []struct {
		name string
		path func() string
		want []string // every phrase must appear; none means accepted
	}{
		{"issued by a CA, CA:FALSE, serverAuth, IP:127.0.0.1", func() string { return issue(t, ca, serverTemplate()) }, nil},
		{"the CA itself", func() string {
			p := filepath.Join(t.TempDir(), "ca.pem")
			writePEM(t, p, "CERTIFICATE", ca.Cert.Raw, 0o644)
			return p
		}, []string{"CA certificate (basicConstraints CA:TRUE)", "self-signed", "serverAuth", "IP:127.0.0.1"}},
		{"a CA issued by the CA", issuedWith(func(c *x509.Certificate) { c.IsCA = true }), []string{"basicConstraints CA:TRUE"}},
		{"self-signed leaf", func() string { return issue(t, nil, serverTemplate()) }, []string{"self-signed"}},
		{"no extended key usage", issuedWith(func(c *x509.Certificate) { c.ExtKeyUsage = nil }), []string{"lacks extended key usage serverAuth"}},
		{"clientAuth only", issuedWith(func(c *x509.Certificate) { c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth} }), []string{"lacks extended key usage serverAuth"}},
		{"DNS localhost only", issuedWith(func(c *x509.Certificate) {
			c.IPAddresses = nil
			c.DNSNames = []string{"localhost"}
		}), []string{"lacks the subject alternative name IP:127.0.0.1"}},
		{"IP ::1 only", issuedWith(func(c *x509.Certificate) { c.IPAddresses = []net.IP{net.IPv6loopback} }), []string{"IP:127.0.0.1"}},
		{"expired", issuedWith(func(c *x509.Certificate) {
			c.NotBefore, c.NotAfter = time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour)
		}), []string{"expired at"}},
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
