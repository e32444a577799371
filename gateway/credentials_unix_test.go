//go:build unix

package gateway

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/pdmcp/pdmcp/internal/fileerr"
	"github.com/pdmcp/pdmcp/internal/safefile"
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
				want := fmt.Sprintf("%s has mode %04o: group and others must have no access (chmod 600)", f, tc.mode)
				if !tc.ok && (err == nil || err.Error() != want) {
					t.Errorf("%s key mode %v: got %v, want %q", name, tc.mode, err, want)
				}
			}
		})
	}
}

// TestServiceConfigMode: config.json names the Gateway, the trust file and
// the service's keys, so one that group or others can write is refused;
// a world-readable one is fine.
func TestServiceConfigMode(t *testing.T) {
	for _, tc := range []struct {
		mode os.FileMode
		ok   bool
	}{{0o600, true}, {0o644, true}, {0o664, false}, {0o606, false}} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			path := configDir(t, "good.json")
			if err := os.Chmod(path, tc.mode); err != nil {
				t.Fatal(err)
			}
			_, err := LoadServiceConfig(path)
			if tc.ok && err != nil {
				t.Fatalf("mode %v refused: %v", tc.mode, err)
			}
			want := fmt.Sprintf("%s has mode %04o: group and others must not be able to write it (chmod go-w)", path, tc.mode)
			if !tc.ok && (!errors.Is(err, safefile.ErrGroupWritable) || err.Error() != want) {
				t.Fatalf("mode %v: got %v, want %q", tc.mode, err, want)
			}
		})
	}
}

// TestKeyFileSymlinkRefused: a key is opened without following a symbolic
// link, so a link planted at the key's path is refused, not followed.
func TestKeyFileSymlinkRefused(t *testing.T) {
	dir := t.TempDir()
	_, login, sender, err := GenerateServiceCredentials(dir, "svc")
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		path string
		load func(string) error
	}{
		"login":  {login, func(p string) error { _, err := LoadLoginKey(p); return err }},
		"sender": {sender, func(p string) error { _, err := LoadSenderKey(p); return err }},
	} {
		link := filepath.Join(dir, name+"-link.pem")
		if err := os.Symlink(tc.path, link); err != nil {
			t.Fatal(err)
		}
		if err := tc.load(link); !errors.Is(err, safefile.ErrSymlink) {
			t.Errorf("%s key through a symbolic link: %v, want ErrSymlink", name, err)
		}
		if err := tc.load(tc.path); err != nil {
			t.Errorf("%s key itself: %v", name, err)
		}
	}
}

// TestTrustFileMode: the trust file holds the only CAs trusted for the
// Gateway, so one that group or others can write is refused.
func TestTrustFileMode(t *testing.T) {
	path := configDir(t, "good.json")
	trust := filepath.Join(filepath.Dir(path), "gateway-ca.pem")
	sc, err := LoadServiceConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(sc.ClientConfig()); err != nil {
		t.Fatalf("owner-only trust file: %v", err)
	}
	if err := os.Chmod(trust, 0o646); err != nil {
		t.Fatal(err)
	}
	if _, err := New(sc.ClientConfig()); !errors.Is(err, safefile.ErrGroupWritable) {
		t.Fatalf("trust file others can write: %v, want ErrGroupWritable", err)
	}
}

// TestEmptyCredentialFiles: an empty certificate or key file is said to be
// empty, in the wording of every operator file.
func TestEmptyCredentialFiles(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.pem")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, holds string
		load        func(string) error
	}{
		{"certificate", "a certificate in PEM form", func(p string) error { _, err := LoadCertificate(p); return err }},
		{"login key", "a private key in PEM form", func(p string) error { _, err := LoadLoginKey(p); return err }},
		{"sender key", "a private key in PEM form", func(p string) error { _, err := LoadSenderKey(p); return err }},
	} {
		want := empty + " is empty: it should hold " + tc.holds
		if err := tc.load(empty); !errors.Is(err, fileerr.ErrEmpty) || err.Error() != want {
			t.Errorf("%s: %v, want %q", tc.name, err, want)
		}
	}
}

// TestTrustFileEmpty: an empty trust file is said to be empty.
func TestTrustFileEmpty(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gateway-ca.pem")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := New(Config{BaseURL: "https://gateway.example:8443", TrustFile: path})
	want := "gateway trust file: " + path + " is empty: it should hold the CA certificates the Gateway is trusted by, in PEM form"
	if !errors.Is(err, fileerr.ErrEmpty) || err.Error() != want {
		t.Fatalf("New: %v\nwant %s", err, want)
	}
}
