//go:build unix

package gateway

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"os"
	"strings"
	"testing"
)

// TestKeyFileModes: whoever can read the login or sender key can act as the
// service, so a key file group or others may access is refused, naming the
// file and the fix; an owner-only one is read.
func TestKeyFileModes(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mode os.FileMode
		ok   bool
	}{
		{0o600, true},
		{0o400, true},
		{0o640, false},
		{0o604, false},
		{0o644, false},
		{0o620, false},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			f := writePEM(t, &pem.Block{Type: "PRIVATE KEY", Bytes: der})
			if err := os.Chmod(f, tc.mode); err != nil {
				t.Fatal(err)
			}
			for name, load := range map[string]func(string) error{
				"login":  func(p string) error { _, err := LoadLoginKey(p); return err },
				"sender": func(p string) error { _, err := LoadSenderKey(p); return err },
			} {
				err := load(f)
				if tc.ok && err != nil {
					t.Errorf("%s key mode %v refused: %v", name, tc.mode, err)
				}
				if !tc.ok && (err == nil || !strings.Contains(err.Error(), "chmod 600")) {
					t.Errorf("%s key mode %v: got %v, want a refusal saying chmod 600", name, tc.mode, err)
				}
			}
		})
	}
}
