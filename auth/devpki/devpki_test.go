package devpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/auth"
)

func TestIssuedCertificateIsWhatHostsAccept(t *testing.T) {
	dir := t.TempDir()
	ca, err := LoadOrCreateCA(dir, "test")
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, err := ca.Issue(dir, "mcp")
	if err != nil {
		t.Fatal(err)
	}
	if err := auth.CheckServerCertificate(certFile); err != nil {
		t.Fatalf("the server's own certificate check refuses the dev certificate: %v", err)
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(pair.Certificate[0])
	for _, name := range []string{"127.0.0.1", "localhost"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: ca.Pool(), DNSName: name}); err != nil {
			t.Fatalf("does not verify for %s under the CA: %v", name, err)
		}
	}
	if fi, _ := os.Stat(keyFile); fi.Mode().Perm() != 0o600 {
		t.Errorf("key mode %04o", fi.Mode().Perm())
	}
	// A second run reuses both.
	ca2, err := LoadOrCreateCA(dir, "test")
	if err != nil || !ca2.Cert.Equal(ca.Cert) {
		t.Fatalf("CA not reused: %v", err)
	}
	before, _ := os.ReadFile(certFile)
	if _, _, err := ca2.Issue(dir, "mcp"); err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadFile(filepath.Join(dir, "mcp.pem"))
	if string(before) != string(after) {
		t.Error("a valid certificate was reissued")
	}
}

// TestIssueReplacesACertificateWithoutLocalhost: a pair an older build left
// in the state folder, naming only 127.0.0.1, is reissued with localhost.
func TestIssueReplacesACertificateWithoutLocalhost(t *testing.T) {
	dir := t.TempDir()
	ca, err := LoadOrCreateCA(dir, "test")
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: serial(),
		Subject: pkix.Name{CommonName: "mcp"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().AddDate(0, 1, 0),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	if err := writePair(filepath.Join(dir, "mcp.pem"), filepath.Join(dir, "mcp-key.pem"), der, key); err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, err := ca.Issue(dir, "mcp")
	if err != nil {
		t.Fatal(err)
	}
	c, _, err := loadPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if c.VerifyHostname("localhost") != nil || c.VerifyHostname("127.0.0.1") != nil {
		t.Fatalf("old certificate kept: names %v %v", c.DNSNames, c.IPAddresses)
	}
}
