package operator

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
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseRights(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
		err  string
	}{
		{"READ", []string{"READ"}, ""},
		{"write, read", []string{"READ", "WRITE"}, ""},
		{"WRITE,WRITE", []string{"WRITE"}, ""},
		{"", nil, ""},
		{"OWNER", nil, "OWNER is not given"},
		{"READ,DELETE", nil, `"DELETE" is not a right`},
		{"READ,", nil, `"" is not a right`},
	} {
		got, err := ParseRights(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) || !errors.Is(err, ErrACLRefused) {
				t.Errorf("ParseRights(%q) = %v, %v; want an ErrACLRefused saying %q", c.in, got, err, c.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("ParseRights(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
}

// certPEM writes a certificate (self-signed unless parent is given) and
// returns its file, the certificate and its key.
func certPEM(t *testing.T, dir, name string, isCA bool, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (string, *x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: isCA, BasicConstraintsValid: true}
	if isCA {
		tmpl.KeyUsage = x509.KeyUsageCertSign
	}
	signer, signerKey := tmpl, key
	if parent != nil {
		signer, signerKey = parent, parentKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name+".pem")
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p, c, key
}

func TestCheckTrustCA(t *testing.T) {
	dir := t.TempDir()
	caFile, ca, caKey := certPEM(t, dir, "ca", true, nil, nil)
	leafFile, _, _ := certPEM(t, dir, "leaf", false, ca, caKey)
	pinned, _, _ := certPEM(t, dir, "pinned", false, nil, nil)
	keyFile := filepath.Join(dir, "key.pem")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte("x")}), 0o600); err != nil {
		t.Fatal(err)
	}
	junk := filepath.Join(dir, "junk.pem")
	if err := os.WriteFile(junk, []byte("hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.pem")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, path, err string
	}{
		{"a CA", caFile, ""},
		{"empty", empty, empty + " is empty: it should hold the CA certificate the Gateway's TLS certificate is issued by, in PEM form"},
		{"a self-signed certificate, pinned", pinned, ""},
		{"a server certificate a CA issued", leafFile, `holds no CA certificate ("CN=leaf" is issued by "CN=ca")`},
		{"a key", keyFile, "holds a PRIVATE KEY block"},
		{"no PEM", junk, "holds no PEM certificate"},
		{"missing", filepath.Join(dir, "nope.pem"), "no such file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := checkTrustCA(c.path)
			if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
				t.Fatalf("checkTrustCA = %v, want %q", err, c.err)
			}
		})
	}
}
