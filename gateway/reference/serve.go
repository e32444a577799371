package reference

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/pdmcp/pdmcp/internal/tlspolicy"
)

// ServeConfig configures a reference Gateway served on its own listener.
type ServeConfig struct {
	// Config is the Gateway's own configuration.
	Config
	// Addr is the address to listen on; "" means 127.0.0.1:0 (a free
	// port on loopback).
	Addr string
	// CertFile and KeyFile are the PEM server certificate and key. Either
	// they or TLSConfig (with Certificates or GetCertificate) is needed,
	// unless PlainHTTP is set.
	CertFile, KeyFile string
	// TLSConfig, when set, is used instead of CertFile and KeyFile.
	TLSConfig *tls.Config
	// PlainHTTP serves plain HTTP instead of TLS. It needs
	// Config.AllowHTTPLoopback and a loopback Addr: the contract allows
	// plain HTTP on loopback only.
	PlainHTTP bool
}

// Server is a reference Gateway being served.
type Server struct {
	// URL is the bound base URL, such as https://127.0.0.1:41234.
	URL string
	// Gateway is the handler, for its counts, audit and faults.
	Gateway *Gateway

	srv       *http.Server
	done      chan struct{}
	serveErr  error
	closeOnce sync.Once
	closeErr  error
}

// Serve opens a reference Gateway and serves it on a new listener until ctx
// is done or Close is called. It returns once the listener is bound, with
// the URL to call. The server speaks HTTP/1.1 only, so that an injected
// lost answer is a dropped connection.
//
// This is what `pdmcp dev gateway` calls:
//
//	srv, err := reference.Serve(ctx, reference.ServeConfig{
//		Config:   reference.Config{DBPath: db, AdminUser: u, AdminPassword: p, Logger: log},
//		CertFile: "gateway.pem", KeyFile: "gateway-key.pem",
//	})
//	...
//	fmt.Println(srv.URL)
//	<-srv.Done()
func Serve(ctx context.Context, cfg ServeConfig) (*Server, error) {
	addr := cfg.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var tlsCfg *tls.Config
	if cfg.PlainHTTP {
		host, _, err := net.SplitHostPort(addr)
		if !cfg.AllowHTTPLoopback || err != nil || !isLoopback(host) {
			return nil, errors.New("reference gateway: plain HTTP needs AllowHTTPLoopback and a loopback address such as 127.0.0.1:0")
		}
	} else {
		switch {
		case cfg.TLSConfig != nil:
			tlsCfg = cfg.TLSConfig.Clone()
		case cfg.CertFile != "" && cfg.KeyFile != "":
			pair, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
			if err != nil {
				return nil, fmt.Errorf("reference gateway: load TLS certificate: %w", err)
			}
			tlsCfg = &tls.Config{Certificates: []tls.Certificate{pair}}
		default:
			return nil, errors.New("reference gateway: name CertFile and KeyFile, or a TLSConfig")
		}
		// TLS 1.2 at least, and then AEAD suites only.
		tlspolicy.Apply(tlsCfg)
		tlsCfg.NextProtos = []string{"http/1.1"}
	}

	g, err := Open(ctx, cfg.Config)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		g.Close()
		return nil, fmt.Errorf("reference gateway: listen: %w", err)
	}
	scheme := "http"
	if tlsCfg != nil {
		scheme = "https"
		ln = tls.NewListener(ln, tlsCfg)
	}
	log := g.log
	srv := &http.Server{
		Handler:           g,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       2 * time.Minute,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		// An empty map turns HTTP/2 off.
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
	}
	s := &Server{URL: scheme + "://" + ln.Addr().String(), Gateway: g, srv: srv, done: make(chan struct{})}
	go func() {
		err := srv.Serve(ln)
		if !errors.Is(err, http.ErrServerClosed) {
			s.serveErr = err
		}
		close(s.done)
	}()
	go func() {
		select {
		case <-ctx.Done():
			s.Close()
		case <-s.done:
		}
	}()
	log.Info("reference gateway serving", "url", s.URL, "tls", tlsCfg != nil)
	return s, nil
}

// Done is closed when the server has stopped serving.
func (s *Server) Done() <-chan struct{} { return s.done }

// Close stops serving (letting requests in flight finish for up to five
// seconds) and closes the Gateway's database.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := s.srv.Shutdown(ctx)
		if err != nil {
			err = errors.Join(err, s.srv.Close())
		}
		<-s.done
		s.closeErr = errors.Join(err, s.serveErr, s.Gateway.Close())
	})
	return s.closeErr
}
