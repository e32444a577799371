package devpki

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"

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
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: ca.Pool(), DNSName: "127.0.0.1"}); err != nil {
		t.Fatalf("does not verify for 127.0.0.1 under the CA: %v", err)
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
