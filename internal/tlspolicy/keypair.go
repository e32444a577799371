package tlspolicy

import (
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/pdmcp/pdmcp/internal/fileerr"
)

// ErrNotAPair matches a certificate and key that do not belong together.
var ErrNotAPair = errors.New("the certificate and the key are not a pair")

// KeyPair makes a server's certificate from its PEM files' contents, read
// by the caller (a key as a secret). A refusal names the file at fault, or
// both when they are not a pair, instead of crypto/tls's words, which name
// neither ("tls: private key does not match public key").
func KeyPair(certFile string, certPEM []byte, keyFile string, keyPEM []byte) (tls.Certificate, error) {
	if err := fileerr.CheckEmpty(certFile, certPEM, "a TLS certificate in PEM form"); err != nil {
		return tls.Certificate{}, err
	}
	if err := fileerr.CheckEmpty(keyFile, keyPEM, "the TLS certificate's private key in PEM form"); err != nil {
		return tls.Certificate{}, err
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err == nil {
		return pair, nil
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "does not match public key"):
		return tls.Certificate{}, &PairError{CertFile: certFile, KeyFile: keyFile}
	case strings.Contains(msg, "did find a private key"):
		return tls.Certificate{}, fmt.Errorf("%s holds a private key where the certificate is wanted; are the certificate and the key given the other way round?", certFile)
	case strings.Contains(msg, "in certificate input"):
		return tls.Certificate{}, fmt.Errorf("%s holds no certificate in PEM form (a CERTIFICATE block)", certFile)
	case strings.Contains(msg, "certificate rather than a key"):
		return tls.Certificate{}, fmt.Errorf("%s holds a certificate where the private key is wanted; are the certificate and the key given the other way round?", keyFile)
	case strings.Contains(msg, "in key input"), strings.Contains(msg, "private key"):
		return tls.Certificate{}, fmt.Errorf("%s holds no private key in a form this server reads (PEM: PRIVATE KEY, EC PRIVATE KEY or RSA PRIVATE KEY)", keyFile)
	}
	return tls.Certificate{}, fmt.Errorf("%s and %s: %w", certFile, keyFile, err)
}

// PairError is a certificate and a key that each read well but do not
// belong together: the key is not the one the certificate was issued for.
type PairError struct{ CertFile, KeyFile string }

func (e *PairError) Error() string {
	return fmt.Sprintf("%s and %s are not a pair: the key is not the one the certificate was issued for; give the certificate's own key",
		e.CertFile, e.KeyFile)
}

// Is matches ErrNotAPair.
func (e *PairError) Is(target error) bool { return target == ErrNotAPair }

// LoadKeyPair reads a certificate and its key from their files and makes
// them a server's certificate as [KeyPair] does. For a key the caller has
// already checked (a development stack's own files).
func LoadKeyPair(certFile, keyFile string) (tls.Certificate, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return tls.Certificate{}, err
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return tls.Certificate{}, err
	}
	return KeyPair(certFile, certPEM, keyFile, keyPEM)
}
