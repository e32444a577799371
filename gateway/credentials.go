package gateway

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"time"

	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/proof"
	"github.com/pdmcp/pdmcp/internal/fileerr"
	"github.com/pdmcp/pdmcp/internal/safefile"
)

// minRSABits is the smallest RSA login key accepted.
const minRSABits = 2048

// serviceCertValidity is how long a generated service certificate is valid.
// The Gateway finds the service by the certificate's fingerprint, so
// renewing it means registering again; a year keeps that a yearly chore.
const serviceCertValidity = 365 * 24 * time.Hour

// credentialName is what GenerateServiceCredentials accepts as a name: it
// becomes part of file names and the certificate's common name.
var credentialName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// CheckServiceName refuses a name GenerateServiceCredentials would refuse,
// so a caller can check it before anything else is done.
func CheckServiceName(name string) error {
	if !credentialName.MatchString(name) {
		return fmt.Errorf("service name %q: use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit", name)
	}
	return nil
}

// ServiceCredentialFiles are the three files GenerateServiceCredentials
// writes for name in dir.
func ServiceCredentialFiles(dir, name string) (certFile, loginKeyFile, senderKeyFile string) {
	return filepath.Join(dir, name+"-cert.pem"), filepath.Join(dir, name+"-login-key.pem"), filepath.Join(dir, name+"-sender-key.pem")
}

// LoadCertificate reads the first certificate of a PEM file.
func LoadCertificate(path string) (*x509.Certificate, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read certificate: %w", err)
	}
	if err := fileerr.CheckEmpty(path, data, "a certificate in PEM form"); err != nil {
		return nil, err
	}
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, fmt.Errorf("certificate %s: no PEM CERTIFICATE block", path)
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %s: %w", path, err)
		}
		return c, nil
	}
}

// LoadLoginKey reads the service's login key: a PEM P-256 ECDSA or RSA
// (at least 2048 bits) private key, in PKCS#8, SEC1 or PKCS#1 form.
func LoadLoginKey(path string) (crypto.Signer, error) {
	k, err := loadPrivateKey(path)
	if err != nil {
		return nil, err
	}
	switch key := k.(type) {
	case *ecdsa.PrivateKey:
		if key.Curve != elliptic.P256() {
			return nil, fmt.Errorf("login key %s: ECDSA keys must be P-256", path)
		}
		return key, nil
	case *rsa.PrivateKey:
		if key.N.BitLen() < minRSABits {
			return nil, fmt.Errorf("login key %s: RSA keys must have at least %d bits", path, minRSABits)
		}
		return key, nil
	default:
		return nil, fmt.Errorf("login key %s: only P-256 ECDSA or RSA keys are supported", path)
	}
}

// LoadSenderKey reads the service's sender key: a PEM P-256 ECDSA private
// key, in PKCS#8 or SEC1 form.
func LoadSenderKey(path string) (*ecdsa.PrivateKey, error) {
	k, err := loadPrivateKey(path)
	if err != nil {
		return nil, err
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok || key.Curve != elliptic.P256() {
		return nil, fmt.Errorf("sender key %s: must be a P-256 ECDSA key", path)
	}
	return key, nil
}

// loadPrivateKey reads the first private key of a PEM file, skipping blocks
// such as "EC PARAMETERS" that openssl writes before the key. A file that
// group or others may access is refused: whoever reads the key can act as
// the service.
func loadPrivateKey(path string) (any, error) {
	data, err := readOwnerOnly(path)
	if err != nil {
		return nil, err
	}
	if err := fileerr.CheckEmpty(path, data, "a private key in PEM form"); err != nil {
		return nil, err
	}
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, fmt.Errorf("key %s: no PEM private key block", path)
		}
		var (
			k   any
			err error
		)
		switch block.Type {
		case "PRIVATE KEY":
			k, err = x509.ParsePKCS8PrivateKey(block.Bytes)
		case "EC PRIVATE KEY":
			k, err = x509.ParseECPrivateKey(block.Bytes)
		case "RSA PRIVATE KEY":
			k, err = x509.ParsePKCS1PrivateKey(block.Bytes)
		case "ENCRYPTED PRIVATE KEY":
			return nil, fmt.Errorf("key %s: encrypted keys are not supported; store it unencrypted with mode 0600", path)
		default:
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("key %s: %w", path, err)
		}
		return k, nil
	}
}

// readOwnerOnly reads a key file: opened once without following a
// symbolic link, refused unless it is a regular file group and others
// cannot access.
func readOwnerOnly(path string) ([]byte, error) {
	// Its refusals name the file already, a mode in the wording of every
	// operator file.
	return safefile.ReadSecret(path, 0)
}

// sameKey reports whether a signer's public key is the certificate's.
func sameKey(signer crypto.Signer, c *x509.Certificate) bool {
	type equaler interface{ Equal(crypto.PublicKey) bool }
	pub, ok := signer.Public().(equaler)
	return ok && pub.Equal(c.PublicKey)
}

// GenerateServiceCredentials writes a new service identity into dir (made
// 0700 if missing): a self-signed P-256 certificate <name>-cert.pem, its
// login key <name>-login-key.pem and a separate P-256 sender key
// <name>-sender-key.pem, each mode 0600. It never overwrites a file: if any
// of the three exists it writes nothing and says which.
func GenerateServiceCredentials(dir, name string) (certFile, loginKeyFile, senderKeyFile string, err error) {
	if err := CheckServiceName(name); err != nil {
		return "", "", "", err
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return "", "", "", fmt.Errorf("credentials directory: %w", err)
	}
	certFile, loginKeyFile, senderKeyFile = ServiceCredentialFiles(dir, name)
	for _, f := range []string{certFile, loginKeyFile, senderKeyFile} {
		if _, err := os.Lstat(f); err == nil {
			return "", "", "", fmt.Errorf("%s already exists; move it away or choose another name", f)
		} else if !errors.Is(err, os.ErrNotExist) {
			return "", "", "", fmt.Errorf("check %s: %w", f, err)
		}
	}

	loginKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", "", fmt.Errorf("generate login key: %w", err)
	}
	senderKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", "", fmt.Errorf("generate sender key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return "", "", "", fmt.Errorf("certificate serial: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(serviceCertValidity),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &loginKey.PublicKey, loginKey)
	if err != nil {
		return "", "", "", fmt.Errorf("create service certificate: %w", err)
	}
	loginDER, err := x509.MarshalPKCS8PrivateKey(loginKey)
	if err != nil {
		return "", "", "", fmt.Errorf("encode login key: %w", err)
	}
	senderDER, err := x509.MarshalPKCS8PrivateKey(senderKey)
	if err != nil {
		return "", "", "", fmt.Errorf("encode sender key: %w", err)
	}

	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", "", fmt.Errorf("credentials directory: %w", err)
	}
	var written []string
	for _, f := range []struct {
		path  string
		block *pem.Block
	}{
		{loginKeyFile, &pem.Block{Type: "PRIVATE KEY", Bytes: loginDER}},
		{senderKeyFile, &pem.Block{Type: "PRIVATE KEY", Bytes: senderDER}},
		{certFile, &pem.Block{Type: "CERTIFICATE", Bytes: der}},
	} {
		if err := writeNewFile(f.path, pem.EncodeToMemory(f.block)); err != nil {
			// Leave no half identity behind: a certificate without its
			// key (or the reverse) is useless and confusing.
			for _, w := range written {
				_ = os.Remove(w)
			}
			return "", "", "", err
		}
		written = append(written, f.path)
	}
	// The three names made durable too (not possible on Windows, where
	// NTFS's own journal keeps them).
	if runtime.GOOS != "windows" {
		if d, err := os.Open(dir); err == nil {
			err = d.Sync()
			d.Close()
			if err != nil {
				return "", "", "", fmt.Errorf("sync credentials directory: %w", err)
			}
		}
	}
	return certFile, loginKeyFile, senderKeyFile, nil
}

// writeNewFile creates path (which must not exist) with mode 0600.
func writeNewFile(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	// Synced: the Gateway is told the identity next, and a power cut must
	// not leave it registered with key files that are empty.
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		_ = f.Close()
		_ = os.Remove(path)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		_ = os.Remove(path)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// ServiceRegistration fills what registering a service needs from its
// files: its name, its certificate as PEM and its sender key's public JWK.
// The caller sets AllowScoped, Prefix and DelegatorCertificate.
func ServiceRegistration(name, certFile, senderKeyFile string) (api.RegisterServiceRequest, error) {
	c, err := LoadCertificate(certFile)
	if err != nil {
		return api.RegisterServiceRequest{}, err
	}
	sk, err := LoadSenderKey(senderKeyFile)
	if err != nil {
		return api.RegisterServiceRequest{}, err
	}
	k, err := proof.FromECDSA(sk)
	if err != nil {
		return api.RegisterServiceRequest{}, fmt.Errorf("sender key %s: %w", senderKeyFile, err)
	}
	return api.RegisterServiceRequest{
		Name:        name,
		Certificate: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})),
		SenderJWK:   k.PublicJWK(),
	}, nil
}
