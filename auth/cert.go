package auth

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"time"
)

// CheckServerCertificate checks the first certificate in certFile (the
// server's own, served to hosts) and reports every way it is unfit: a CA
// certificate (basicConstraints CA:TRUE), a self-signed one, one without
// extended key usage serverAuth, one without the subject alternative name
// IP:127.0.0.1, or one outside its validity period. Some hosts' TLS stacks
// refuse a CA served as a server certificate even when they trust it, so
// the operator hears it here, at start-up, rather than from a host.
func CheckServerCertificate(certFile string) error {
	raw, err := os.ReadFile(certFile)
	if err != nil {
		return fmt.Errorf("server certificate: %w", err)
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
