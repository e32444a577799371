package auth

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
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

// TestCheckServerCertificateStrength: a server certificate with a weak key
// (RSA under 2048 bits, a curve under P-256) or a weak signature (SHA-1,
// MD5) is refused, each with a message naming the file and the weakness;
// RSA 2048, P-384 and Ed25519 keys signed with SHA-256 or better pass.
func TestCheckServerCertificateStrength(t *testing.T) {
	ecCA := newTestCA(t)
	rsaCAKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	rsaCATmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "pdmcp test RSA CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, rsaCATmpl, rsaCATmpl, &rsaCAKey.PublicKey, rsaCAKey)
	if err != nil {
		t.Fatal(err)
	}
	rsaCA, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}

	// issued writes a server certificate for pub, signed by parent's key
	// with sigAlg (the default for the key when zero), and returns its
	// path; patch, when set, changes the DER before it is written.
	issued := func(pub any, parent *x509.Certificate, parentKey any, sigAlg x509.SignatureAlgorithm, patch func([]byte) []byte) func() string {
		return func() string {
			tmpl := serverTemplate()
			tmpl.SignatureAlgorithm = sigAlg
			der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, parentKey)
			if err != nil {
				t.Fatal(err)
			}
			if patch != nil {
				der = patch(der)
			}
			path := filepath.Join(t.TempDir(), "server.pem")
			writePEM(t, path, "CERTIFICATE", der, 0o644)
			return path
		}
	}
	rsaKey := func(bits int) any {
		k, err := rsa.GenerateKey(rand.Reader, bits)
		if err != nil {
			t.Fatal(err)
		}
		return &k.PublicKey
	}
	ecKey := func(c elliptic.Curve) any {
		k, err := ecdsa.GenerateKey(c, rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return &k.PublicKey
	}
	edPub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	// sha1ToMD5 rewrites the sha1WithRSAEncryption OID (1.2.840.113549.1.1.5)
	// into md5WithRSAEncryption (...1.1.4), in the TBS and the outer
	// signature algorithm: Go no longer signs with MD5.
	sha1ToMD5 := func(der []byte) []byte {
		sha1OID := []byte{0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x05}
		if bytes.Count(der, sha1OID) != 2 {
			t.Fatalf("the SHA-1 certificate names its algorithm %d times, want 2", bytes.Count(der, sha1OID))
		}
		md5OID := append(slices.Clone(sha1OID[:len(sha1OID)-1]), 0x04)
		return bytes.ReplaceAll(der, sha1OID, md5OID)
	}

	tests := []struct {
		name string
		path func() string
		want []string // empty: accepted
	}{
		{"RSA 2048, SHA-256", issued(rsaKey(2048), rsaCA, rsaCAKey, 0, nil), nil},
		{"P-384", issued(ecKey(elliptic.P384()), ecCA.Cert, ecCA.Key, 0, nil), nil},
		{"Ed25519", issued(edPub, ecCA.Cert, ecCA.Key, 0, nil), nil},
		{"RSA 1024", issued(rsaKey(1024), rsaCA, rsaCAKey, 0, nil), []string{"its RSA key has 1024 bits; at least 2048 are needed"}},
		{"P-224", issued(ecKey(elliptic.P224()), ecCA.Cert, ecCA.Key, 0, nil), []string{"its elliptic-curve key is on P-224 (224 bits); P-256 or larger is needed"}},
		{"SHA-1 with RSA", issued(rsaKey(2048), rsaCA, rsaCAKey, x509.SHA1WithRSA, nil), []string{"it is signed with SHA1-RSA"}},
		{"ECDSA with SHA-1", issued(ecKey(elliptic.P256()), ecCA.Cert, ecCA.Key, x509.ECDSAWithSHA1, nil), []string{"it is signed with ECDSA-SHA1"}},
		{"MD5 with RSA", issued(rsaKey(2048), rsaCA, rsaCAKey, x509.SHA1WithRSA, sha1ToMD5), []string{"it is signed with MD5-RSA"}},
		{"RSA 1024 signed with SHA-1: both named", issued(rsaKey(1024), rsaCA, rsaCAKey, x509.SHA1WithRSA, nil),
			[]string{"1024 bits", "SHA1-RSA"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.path()
			err := CheckServerCertificate(path)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range append(tc.want, "server certificate "+path+" is unfit") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}
