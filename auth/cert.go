package auth

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"time"

	"github.com/pdmcp/pdmcp/internal/fileerr"
)

// CheckServerCertificate checks the first certificate in certFile (the
// server's own, served to hosts) and reports every way it is unfit: a CA
// certificate (basicConstraints CA:TRUE), a self-signed one, one without
// extended key usage serverAuth, one without the subject alternative name
// IP:127.0.0.1, one outside its validity period, or a weak one: an RSA key
// under 2048 bits, an elliptic-curve key on a curve under P-256, a DSA key,
// or a signature made with SHA-1, MD5 or MD2. Some hosts' TLS stacks
// refuse a CA served as a server certificate even when they trust it, so
// the operator hears it here, at start-up, rather than from a host.
func CheckServerCertificate(certFile string) error {
	raw, err := os.ReadFile(certFile)
	if err != nil {
		return fmt.Errorf("server certificate: %w", err)
	}
	if err := fileerr.CheckEmpty(certFile, raw, "the server's TLS certificate in PEM form"); err != nil {
		return err
	}
	var block *pem.Block
	rest := raw
	for {
		block, rest = pem.Decode(rest)
		if block == nil || block.Type == "CERTIFICATE" {
			break
		}
	}
	if block == nil {
		return fmt.Errorf("server certificate %s holds no PEM CERTIFICATE block", certFile)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return fmt.Errorf("server certificate %s: %w", certFile, err)
	}

	var problems []error
	if cert.BasicConstraintsValid && cert.IsCA {
		problems = append(problems, errors.New("it is a CA certificate (basicConstraints CA:TRUE); serve a certificate issued BY a CA, with CA:FALSE"))
	}
	// CheckSignatureFrom would refuse a non-CA parent, so the signature is
	// checked directly against the certificate's own key.
	if bytes.Equal(cert.RawIssuer, cert.RawSubject) &&
		cert.CheckSignature(cert.SignatureAlgorithm, cert.RawTBSCertificate, cert.Signature) == nil {
		problems = append(problems, errors.New("it is self-signed; hosts must be given the CA that issued it, never the certificate itself"))
	}
	if !slices.Contains(cert.ExtKeyUsage, x509.ExtKeyUsageServerAuth) {
		problems = append(problems, errors.New("it lacks extended key usage serverAuth"))
	}
	loopback := net.ParseIP(ListenHost)
	if !slices.ContainsFunc(cert.IPAddresses, loopback.Equal) {
		problems = append(problems, errors.New("it lacks the subject alternative name IP:127.0.0.1"))
	}
	if p := weakKey(cert); p != nil {
		problems = append(problems, p)
	}
	if weakSignature(cert.SignatureAlgorithm) {
		problems = append(problems, fmt.Errorf("it is signed with %s; ask the CA for a SHA-256 (or stronger) signature", cert.SignatureAlgorithm))
	}
	now := time.Now()
	if now.Before(cert.NotBefore) {
		problems = append(problems, fmt.Errorf("it is not valid before %s", cert.NotBefore.UTC().Format(time.RFC3339)))
	}
	if now.After(cert.NotAfter) {
		problems = append(problems, fmt.Errorf("it expired at %s", cert.NotAfter.UTC().Format(time.RFC3339)))
	}
	if len(problems) > 0 {
		return fmt.Errorf("server certificate %s is unfit: %w", certFile, errors.Join(problems...))
	}
	return nil
}

// Minimum strengths of the server certificate's key (NIST SP 800-131A and
// the CA/Browser Forum baseline).
const (
	minRSABits = 2048
	minECBits  = 256
)

// weakKey says why the certificate's public key is too weak, or nil.
func weakKey(cert *x509.Certificate) error {
	if cert.PublicKeyAlgorithm == x509.DSA {
		return errors.New("its key is DSA, which TLS 1.3 does not allow; use an ECDSA (P-256 or larger), Ed25519 or RSA (2048 bits or more) key")
	}
	switch k := cert.PublicKey.(type) {
	case *rsa.PublicKey:
		if n := k.N.BitLen(); n < minRSABits {
			return fmt.Errorf("its RSA key has %d bits; at least %d are needed", n, minRSABits)
		}
	case *ecdsa.PublicKey:
		if n := k.Curve.Params().BitSize; n < minECBits {
			return fmt.Errorf("its elliptic-curve key is on %s (%d bits); P-256 or larger is needed", k.Curve.Params().Name, n)
		}
	}
	return nil
}

// weakSignature reports a signature algorithm whose hash collisions are
// practical (SHA-1, MD5, MD2).
func weakSignature(a x509.SignatureAlgorithm) bool {
	switch a {
	case x509.MD2WithRSA, x509.MD5WithRSA, x509.SHA1WithRSA, x509.DSAWithSHA1, x509.ECDSAWithSHA1:
		return true
	}
	return false
}
