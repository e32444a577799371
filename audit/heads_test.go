package audit

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// TestLoadHeadKey: an Ed25519 private key in PKCS #8 PEM signs, its public
// half in PKIX PEM checks, both with the same id; anything else is refused
// by name, and so is a private key others can read.
func TestLoadHeadKey(t *testing.T) {
	dir := t.TempDir()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der := func(b []byte, err error) []byte {
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	write := func(name, typ string, b []byte, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	privPath := write("priv.pem", "PRIVATE KEY", der(x509.MarshalPKCS8PrivateKey(priv)), 0o600)
	pubPath := write("pub.pem", "PUBLIC KEY", der(x509.MarshalPKIXPublicKey(pub)), 0o644)
	tests := []struct {
		name    string
		path    string
		canSign bool
		is      error
	}{
		{"private", privPath, true, nil},
		{"public", pubPath, false, nil},
		{"an ECDSA key", write("ec.pem", "PRIVATE KEY", der(x509.MarshalPKCS8PrivateKey(ec)), 0o600), false, ErrKeyFile},
		{"a certificate block", write("cert.pem", "CERTIFICATE", []byte{1, 2, 3}, 0o600), false, ErrKeyFile},
		{"not PEM", filepath.Join("testdata", "lines.golden.jsonl"), false, ErrKeyFile},
		{"missing", filepath.Join(dir, "none.pem"), false, os.ErrNotExist},
	}
	if runtime.GOOS != "windows" {
		tests = append(tests, struct {
			name    string
			path    string
			canSign bool
			is      error
		}{"private, readable by others", write("open.pem", "PRIVATE KEY", der(x509.MarshalPKCS8PrivateKey(priv)), 0o644), false, ErrUnsafeMode})
	}
	want := PublicHeadKey(pub).ID()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k, err := LoadHeadKey(tc.path)
			if tc.is != nil {
				if !errors.Is(err, tc.is) {
					t.Fatalf("err = %v, want %v", err, tc.is)
				}
				// The wording of every operator file's mode.
				if want := "audit: head key: " + tc.path + " has mode 0644: group and others must have no access (chmod 600)"; tc.is == ErrUnsafeMode && err.Error() != want {
					t.Fatalf("err = %v, want %q", err, want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if k.CanSign() != tc.canSign || k.ID() != want {
				t.Fatalf("key can sign %v id %s, want %v %s", k.CanSign(), k.ID(), tc.canSign, want)
			}
		})
	}
}
