package gateway

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pdmcp/pdmcp/internal/fileerr"
)

// configDir copies a config fixture into a temp dir beside freshly made
// service credentials and a trust file, named as the fixtures name them.
func configDir(t *testing.T, fixture string) string {
	t.Helper()
	dir := t.TempDir()
	data, err := os.ReadFile(filepath.Join("testdata", "config", fixture))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "config.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	certFile, _, _, err := GenerateServiceCredentials(dir, "svc")
	if err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "gateway-ca.pem"), ca, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadServiceConfig(t *testing.T) {
	cases := []struct {
		fixture string
		field   string // "" with want "" means it loads
		want    string // the message after "<path>: "
	}{
		{"good.json", "", ""},
		{"no-trust-file.json", "", ""},
		{"plain-http-allowed.json", "", ""},
		{"unknown-field.json", "", `timeout at line 10, column 3: unknown field: remove it or check its spelling`},
		{"wrong-case-field.json", "", `gatewayURL at line 9, column 3: unknown field: member names are case-sensitive: did you mean "gatewayUrl"?`},
		{"duplicate-field.json", "", `prefix at line 10, column 3: given twice (first at line 9, column 3); keep one`},
		{"missing-sender-key.json", "senderKey", "senderKey: missing; it is required"},
		{"missing-system-id.json", "systemId", "systemId: missing; it is required"},
		{"missing-prefix.json", "prefix", "prefix: missing; it is required"},
		{"system-id-string.json", "", "systemId at line 8, column 15: a JSON string where a whole number is wanted"},
		{"plain-http.json", "gatewayUrl", "gatewayUrl: plain http is refused"},
		{"plain-http-remote.json", "gatewayUrl", "gatewayUrl: plain http is allowed only to a loopback address"},
		{"missing-cert-file.json", "serviceCert", "serviceCert: stat "},
		{"truncated.json", "", "not valid JSON at line 1, column 41: the file ends before the JSON object does"},
		{"trailing.json", "", "not valid JSON at line 1, column 42: more after the JSON object; the file holds one object"},
	}
	for _, tc := range cases {
		t.Run(tc.fixture, func(t *testing.T) {
			path := configDir(t, tc.fixture)
			sc, err := LoadServiceConfig(path)
			if tc.field == "" && tc.want == "" {
				if err != nil {
					t.Fatalf("load: %v", err)
				}
				dir := filepath.Dir(path)
				if sc.ServiceCert != filepath.Join(dir, "svc-cert.pem") || sc.SenderKey != filepath.Join(dir, "svc-sender-key.pem") ||
					sc.ServiceLoginKey != filepath.Join(dir, "svc-login-key.pem") {
					t.Fatalf("paths not resolved against the file: %+v", sc)
				}
				if sc.TrustFile != "" && sc.TrustFile != filepath.Join(dir, "gateway-ca.pem") {
					t.Fatalf("trust file %q", sc.TrustFile)
				}
				if sc.SystemID != 7 || sc.ServiceID != "svc-1" || sc.Prefix != "xa.test." {
					t.Fatalf("identity %+v", sc)
				}
				// What it names is enough to build a client.
				if _, err := New(sc.ClientConfig()); err != nil {
					t.Fatalf("client from config: %v", err)
				}
				return
			}
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("error %v is not a *ConfigError", err)
			}
			if ce.Field != tc.field || !strings.HasPrefix(err.Error(), path+": "+tc.want) {
				t.Fatalf("error %q (field %q), want field %q and %q", err, ce.Field, tc.field, path+": "+tc.want)
			}
		})
	}
	if _, err := LoadServiceConfig(filepath.Join(t.TempDir(), "absent.json")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("absent file: %v", err)
	}
}

// TestLoadServiceConfigEmpty: an empty config.json is said to be empty, in
// the wording of every operator file.
func TestLoadServiceConfigEmpty(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(path, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := LoadServiceConfig(path)
	want := path + " is empty: it should hold the service's settings as a JSON object (pdmcp bootstrap writes it)"
	var ce *ConfigError
	if !errors.As(err, &ce) || !errors.Is(err, fileerr.ErrEmpty) || err.Error() != want {
		t.Fatalf("LoadServiceConfig: %v\nwant %s", err, want)
	}
}

func TestWriteServiceConfig(t *testing.T) {
	src, err := LoadServiceConfig(configDir(t, "good.json"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "config.json")
	if err := os.WriteFile(path, []byte("old contents\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteServiceConfig(path, src); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600", fi.Mode().Perm())
	}
	got, err := LoadServiceConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if *got != *src {
		t.Fatalf("round trip: %+v, want %+v", got, src)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Fatalf("temporary files left behind: %v", entries)
	}

	// A bad config is refused and the file on disk is kept.
	bad := *src
	bad.Prefix = ""
	err = WriteServiceConfig(path, &bad)
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Field != "prefix" {
		t.Fatalf("writing without a prefix: %v", err)
	}
	if again, err := LoadServiceConfig(path); err != nil || *again != *src {
		t.Fatalf("the file changed after a refused write: %+v, %v", again, err)
	}
}

func TestGenerateServiceCredentials(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "creds")
	certFile, loginFile, senderFile, err := GenerateServiceCredentials(dir, "svc")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{certFile, loginFile, senderFile} {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 || !filepath.IsAbs(f) {
			t.Fatalf("%s: mode %v", f, fi.Mode().Perm())
		}
	}
	cert, err := LoadCertificate(certFile)
	if err != nil {
		t.Fatal(err)
	}
	if cert.Subject.CommonName != "svc" || cert.IsCA {
		t.Fatalf("certificate %s (CA %v)", cert.Subject, cert.IsCA)
	}
	if err := cert.CheckSignature(cert.SignatureAlgorithm, cert.RawTBSCertificate, cert.Signature); err != nil {
		t.Fatalf("not self-signed: %v", err)
	}
	login, err := LoadLoginKey(loginFile)
	if err != nil {
		t.Fatal(err)
	}
	if !sameKey(login, cert) {
		t.Fatal("the login key is not the certificate's")
	}
	sender, err := LoadSenderKey(senderFile)
	if err != nil {
		t.Fatal(err)
	}
	if sender.PublicKey.Equal(login.Public()) {
		t.Fatal("the sender key is the login key")
	}

	// Nothing is overwritten, and nothing new is written.
	before, _ := os.ReadFile(loginFile)
	if _, _, _, err := GenerateServiceCredentials(dir, "svc"); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("second generation: %v", err)
	}
	if after, _ := os.ReadFile(loginFile); string(after) != string(before) {
		t.Fatal("the login key was overwritten")
	}
	for _, name := range []string{"", "../x", "a/b", ".hidden", "with space"} {
		if _, _, _, err := GenerateServiceCredentials(dir, name); err == nil {
			t.Errorf("name %q accepted", name)
		}
	}
}

// writePEM writes one PEM block to a temp file.
func writePEM(t *testing.T, blocks ...*pem.Block) string {
	t.Helper()
	var data []byte
	for _, b := range blocks {
		data = append(data, pem.EncodeToMemory(b)...)
	}
	f := filepath.Join(t.TempDir(), "key.pem")
	if err := os.WriteFile(f, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestKeyFileForms(t *testing.T) {
	p256, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pkcs8 := func(k any) *pem.Block {
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return &pem.Block{Type: "PRIVATE KEY", Bytes: der}
	}
	sec1 := func(k *ecdsa.PrivateKey) *pem.Block {
		der, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return &pem.Block{Type: "EC PRIVATE KEY", Bytes: der}
	}
	// openssl ecparam -genkey writes the curve's parameters first.
	params := &pem.Block{Type: "EC PARAMETERS", Bytes: []byte{0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07}}

	cases := []struct {
		name            string
		blocks          []*pem.Block
		loginOK, sendOK bool
	}{
		{"P-256 PKCS#8", []*pem.Block{pkcs8(p256)}, true, true},
		{"P-256 SEC1", []*pem.Block{sec1(p256)}, true, true},
		{"P-256 SEC1 after EC PARAMETERS", []*pem.Block{params, sec1(p256)}, true, true},
		{"RSA PKCS#1", []*pem.Block{{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(rsaKey)}}, true, false},
		{"RSA PKCS#8", []*pem.Block{pkcs8(rsaKey)}, true, false},
		{"P-384", []*pem.Block{pkcs8(p384)}, false, false},
		{"encrypted", []*pem.Block{{Type: "ENCRYPTED PRIVATE KEY", Bytes: []byte{1}}}, false, false},
		{"certificate only", []*pem.Block{{Type: "CERTIFICATE", Bytes: []byte{1}}}, false, false},
		{"garbage DER", []*pem.Block{{Type: "PRIVATE KEY", Bytes: []byte{1, 2, 3}}}, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := writePEM(t, tc.blocks...)
			if _, err := LoadLoginKey(f); (err == nil) != tc.loginOK {
				t.Errorf("LoadLoginKey: %v, want ok=%v", err, tc.loginOK)
			}
			if _, err := LoadSenderKey(f); (err == nil) != tc.sendOK {
				t.Errorf("LoadSenderKey: %v, want ok=%v", err, tc.sendOK)
			}
		})
	}
}
