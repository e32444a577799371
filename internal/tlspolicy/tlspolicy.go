// Package tlspolicy is the TLS every pdmcp server speaks: TLS 1.2 or
// later, and under TLS 1.2 only the ECDHE suites with an AEAD cipher
// (AES-GCM, ChaCha20-Poly1305). Go's defaults still offer the CBC suites
// with SHA-1 MACs under TLS 1.2 for old clients; no client of these
// servers (MCP hosts, pdmcp itself) needs them. TLS 1.3 suites are not
// configurable in Go and are all AEAD.
//
// It is for the servers pdmcp runs (the MCP endpoint, the reference
// Gateway, the development provider), not for clients, whose peers choose.
package tlspolicy

import "crypto/tls"

// CipherSuites are the TLS 1.2 suites offered, strongest first.
func CipherSuites() []uint16 {
	return []uint16{
		tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
		tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
		tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
		tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
		tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
		tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
	}
}

// Server returns a server configuration serving certs under this policy.
func Server(certs ...tls.Certificate) *tls.Config {
	c := &tls.Config{Certificates: certs}
	Apply(c)
	return c
}

// Apply narrows c to this policy: a lower MinVersion is raised to TLS 1.2
// and the TLS 1.2 suites are replaced by CipherSuites.
func Apply(c *tls.Config) {
	if c.MinVersion < tls.VersionTLS12 {
		c.MinVersion = tls.VersionTLS12
	}
	c.CipherSuites = CipherSuites()
}
