package tlspolicy_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/auth/devpki"
	"github.com/pdmcp/pdmcp/internal/tlspolicy"
)

// TestServerRefusesWeakTLS12Suites shakes hands with a server under the
// policy as TLS 1.2 clients offering one kind of suite each: only the
// AEAD ones get through.
func TestServerRefusesWeakTLS12Suites(t *testing.T) {
	dir := t.TempDir()
	ca, err := devpki.LoadOrCreateCA(filepath.Join(dir, "ca"), "test")
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, err := ca.Issue(filepath.Join(dir, "ca"), "server")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", tlspolicy.Server(pair))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(30 * time.Second))
				_ = c.(*tls.Conn).Handshake()
			}()
		}
	}()
	for _, tc := range []struct {
		name   string
		suites []uint16
		ok     bool
	}{
		{"ECDHE AES-GCM", []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256}, true},
		{"ECDHE ChaCha20-Poly1305", []uint16{tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256}, true},
		{"ECDHE CBC-SHA1", []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA,
			tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA, tls.TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA}, false},
		{"RSA key exchange AES-GCM", []uint16{tls.TLS_RSA_WITH_AES_128_GCM_SHA256, tls.TLS_RSA_WITH_AES_256_GCM_SHA384}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := handshake12(ln.Addr().String(), ca.Pool(), tc.suites)
			if tc.ok && err != nil {
				t.Fatalf("handshake refused: %v", err)
			}
			if !tc.ok {
				// The server answers with an alert (handshake_failure):
				// no suite in common.
				var op *net.OpError
				if err == nil || !errors.As(err, &op) || op.Op != "remote error" {
					t.Fatalf("handshake: %v, want the server's alert", err)
				}
			}
		})
	}
}

// handshake12 shakes hands with addr as a TLS 1.2 client offering only
// suites and trusting roots.
func handshake12(addr string, roots *x509.CertPool, suites []uint16) error {
	d := &net.Dialer{Timeout: 30 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1",
		MinVersion: tls.VersionTLS12, MaxVersion: tls.VersionTLS12, CipherSuites: suites})
	if err != nil {
		return err
	}
	return c.Close()
}
