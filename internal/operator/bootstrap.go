package operator

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/internal/fileerr"
	"github.com/pdmcp/pdmcp/internal/safefile"
)

// BootstrapOptions are `pdmcp bootstrap`'s inputs.
type BootstrapOptions struct {
	GatewayURL        string
	TrustFile         string
	AllowHTTPLoopback bool
	AdminUser         string
	AdminPasswordFile string
	ServiceName       string
	// Service credentials: all three files, or none to generate them in
	// CredentialsDir (default: beside ConfigOut).
	ServiceCert     string
	ServiceLoginKey string
	SenderKey       string
	DelegatorCert   string
	CredentialsDir  string
	Prefix          string
	// AllowScoped is not read: the service is always registered with
	// scoped sessions, which every session pdmcp uses is. Kept so callers
	// that still set it compile.
	AllowScoped bool
	ConfigOut   string
	// Write, when not nil, writes config.json instead of Bootstrap (to
	// standard output: `--out -`); ConfigOut then only places the
	// generated credentials' default folder, and is not checked for an
	// earlier file.
	Write func(*gateway.ServiceConfig) error
	// Logger gets the Gateway requests; nil discards.
	Logger *slog.Logger
}

// Bootstrap registers the service at the Gateway, writes config.json, and
// proves the registration by signing in as the service.
//
// It can be retried: every input is checked, and the Gateway is reached with
// the admin's credentials, before anything is generated or written; the
// credentials it generates are made under temporary names and placed only
// once the Gateway has registered them, so a failed run leaves nothing that
// the next one trips over. A file an earlier run made is never removed.
func Bootstrap(ctx context.Context, o BootstrapOptions) (*gateway.ServiceConfig, error) {
	in, err := checkBootstrap(o)
	if err != nil {
		return nil, &InputError{Err: err}
	}
	o = in.o
	if err := probeAdmin(ctx, in.admin, o); err != nil {
		return nil, err
	}
	cert, login, sender := o.ServiceCert, o.ServiceLoginKey, o.SenderKey
	var placed []string
	var tmp string
	registered := false
	if in.generate {
		if err := os.MkdirAll(in.credDir, 0o700); err != nil {
			return nil, fmt.Errorf("bootstrap: credentials folder: %w", err)
		}
		if tmp, err = os.MkdirTemp(in.credDir, ".bootstrap-"); err != nil {
			return nil, fmt.Errorf("bootstrap: credentials folder: %w", err)
		}
		// Removed unless the Gateway registered what is in it and it could
		// not all be placed: a registered service's keys are never thrown
		// away.
		defer func() {
			if !registered || len(placed) == 3 {
				_ = os.RemoveAll(tmp)
			}
		}()
		if cert, login, sender, err = gateway.GenerateServiceCredentials(tmp, o.ServiceName); err != nil {
			return nil, fmt.Errorf("bootstrap: generate service credentials: %w", err)
		}
	}
	reg, err := gateway.ServiceRegistration(o.ServiceName, cert, sender)
	if err != nil {
		return nil, err
	}
	reg.AllowScoped = true
	reg.Prefix = o.Prefix
	reg.DelegatorCertificate = in.delegator
	got, err := in.admin.RegisterService(ctx, reg)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: register service: %w%s", err, nothingLeft(in.generate))
	}
	registered = true
	if in.generate {
		// Registered: the credentials are the service's now, and are kept
		// from here on whatever fails next.
		finalCert, finalLogin, finalSender := gateway.ServiceCredentialFiles(in.credDir, o.ServiceName)
		if placed, err = placeNew([][2]string{{login, finalLogin}, {sender, finalSender}, {cert, finalCert}}); err != nil {
			return nil, fmt.Errorf("bootstrap: the service was registered (%s), but its credentials could not all be moved from %s to %s (move the rest by hand, then write config.json): %w",
				got.ServiceID, tmp, in.credDir, err)
		}
		cert, login, sender = finalCert, finalLogin, finalSender
	}
	sc := &gateway.ServiceConfig{
		GatewayURL: o.GatewayURL, TrustFile: abs(o.TrustFile), AllowHTTPLoopback: o.AllowHTTPLoopback,
		ServiceCert: abs(cert), ServiceLoginKey: abs(login), SenderKey: abs(sender),
		ServiceID: got.ServiceID, SystemID: got.SystemID, Prefix: got.Prefix,
	}
	svc, err := gateway.New(clientConfig(sc, o.Logger))
	if err != nil {
		return nil, err
	}
	if err := svc.SignIn(ctx); err != nil {
		return nil, fmt.Errorf("bootstrap: the service was registered (its credentials are %s) but cannot sign in: %w", strings.Join([]string{cert, login, sender}, ", "), err)
	}
	write := o.Write
	if write == nil {
		write = func(sc *gateway.ServiceConfig) error { return gateway.WriteServiceConfig(o.ConfigOut, sc) }
	}
	if err := write(sc); err != nil {
		return nil, err
	}
	return sc, nil
}

// bootstrapInputs are the checked inputs of a bootstrap.
type bootstrapInputs struct {
	o         BootstrapOptions
	admin     *gateway.Admin
	generate  bool
	credDir   string
	delegator string
}

// checkBootstrap checks every input of a bootstrap without sending or
// writing anything: the flags, config.json's absence, the service name, the
// admin password file (present, owner-only, not empty), the trust file (a
// CA), the Gateway URL (absolute, with a host), the given credentials, and
// that the credentials to be generated do not exist yet.
func checkBootstrap(o BootstrapOptions) (*bootstrapInputs, error) {
	if o.ConfigOut == "" || o.GatewayURL == "" || o.AdminUser == "" || o.AdminPasswordFile == "" {
		return nil, errors.New("bootstrap: --endpoint, --admin-user, --admin-password-file and --out are required")
	}
	if _, err := os.Lstat(o.ConfigOut); err == nil && o.Write == nil {
		return nil, fmt.Errorf("bootstrap: %s exists; it is never overwritten (move it away to register again)", o.ConfigOut)
	}
	if o.ServiceName == "" {
		o.ServiceName = "pdmcp"
	}
	if err := gateway.CheckServiceName(o.ServiceName); err != nil {
		return nil, fmt.Errorf("bootstrap: --service-name: %w", err)
	}
	password, err := readSecretFile(o.AdminPasswordFile)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: --admin-password-file: %w", err)
	}
	if o.TrustFile != "" {
		if err := checkTrustCA(o.TrustFile); err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				err = &fileRefused{err}
			}
			return nil, fmt.Errorf("bootstrap: --trust-file: %w", err)
		}
	}
	c, err := gateway.New(gateway.Config{BaseURL: o.GatewayURL, TrustFile: o.TrustFile, AllowHTTPLoopback: o.AllowHTTPLoopback, Logger: o.Logger})
	if err != nil {
		return nil, fmt.Errorf("bootstrap: --endpoint %s: %w", o.GatewayURL, err)
	}
	in := &bootstrapInputs{o: o, admin: c.Admin(o.AdminUser, password)}
	switch countNonEmpty(o.ServiceCert, o.ServiceLoginKey, o.SenderKey) {
	case 0:
		in.generate = true
		in.credDir = o.CredentialsDir
		if in.credDir == "" {
			in.credDir = filepath.Join(filepath.Dir(o.ConfigOut), "service")
		}
		if in.credDir, err = filepath.Abs(in.credDir); err != nil {
			return nil, fmt.Errorf("bootstrap: credentials folder: %w", err)
		}
		cert, login, sender := gateway.ServiceCredentialFiles(in.credDir, o.ServiceName)
		for _, f := range []string{cert, login, sender} {
			if _, err := os.Lstat(f); err == nil {
				return nil, fmt.Errorf("bootstrap: %s exists (an earlier registration's?); it is never overwritten: give it with --service-cert, --service-login-key and --sender-key, move it away, or choose another --service-name or --credentials-dir", f)
			} else if !errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("bootstrap: %w", err)
			}
		}
	case 3:
		if _, err := gateway.ServiceRegistration(o.ServiceName, o.ServiceCert, o.SenderKey); err != nil {
			return nil, fmt.Errorf("bootstrap: %w", err)
		}
		if _, err := gateway.LoadLoginKey(o.ServiceLoginKey); err != nil {
			return nil, fmt.Errorf("bootstrap: %w", err)
		}
	default:
		return nil, errors.New("bootstrap: give all of --service-cert, --service-login-key and --sender-key, or none")
	}
	if o.DelegatorCert != "" {
		b, err := os.ReadFile(o.DelegatorCert)
		if err != nil {
			return nil, fmt.Errorf("bootstrap: delegator certificate: %w", err)
		}
		in.delegator = string(b)
	}
	return in, nil
}

// checkTrustCA refuses a trust file that holds no certificate a TLS client
// could anchor on: it must hold PEM certificates only, at least one of them
// a CA or self-signed (a Gateway's own certificate, pinned). The usual
// mistake, a server certificate some CA issued, is named.
func checkTrustCA(path string) error {
	data, err := safefile.ReadConfig(path, 0)
	if err != nil {
		return err
	}
	if err := fileerr.CheckEmpty(path, data, "the CA certificate the Gateway's TLS certificate is issued by, in PEM form"); err != nil {
		return err
	}
	var certs []*x509.Certificate
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			return fmt.Errorf("%s holds a %s block; a trust file holds certificates only", path, b.Type)
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return fmt.Errorf("%s holds no PEM certificate; give the CA certificate the Gateway's TLS certificate is issued by", path)
	}
	for _, c := range certs {
		// Self-signed: the certificate's own key signed it (CheckSignatureFrom
		// would also ask for CA constraints, which a pinned leaf lacks).
		selfSigned := bytes.Equal(c.RawIssuer, c.RawSubject) && c.CheckSignature(c.SignatureAlgorithm, c.RawTBSCertificate, c.Signature) == nil
		if c.IsCA || selfSigned {
			return nil
		}
	}
	return fmt.Errorf("%s holds no CA certificate (%q is issued by %q); give the CA's certificate", path,
		certs[0].Subject.String(), certs[0].Issuer.String())
}

// probeAdmin reaches the Gateway with the admin's credentials before
// anything is generated: a read of a principal, which changes nothing. Any
// answer past the admin check (the principal found, not found, or its name
// refused) proves the URL, the trust and the credentials.
func probeAdmin(ctx context.Context, admin *gateway.Admin, o BootstrapOptions) error {
	_, err := admin.GetPrincipal(ctx, o.ServiceName+".bootstrap-check")
	var ae *api.Error
	switch {
	case err == nil:
		return nil
	case errors.Is(err, &api.Error{Code: api.CodeAdminAuthRequired}):
		// The Gateway's own text says to send admin credentials or run
		// bootstrap: the one running. Only its code is kept.
		return &AdminRefusedError{URL: o.GatewayURL, User: o.AdminUser, PasswordFile: o.AdminPasswordFile}
	case errors.Is(err, &api.Error{Code: api.CodeUnreachable}), errors.Is(err, &api.Error{Code: api.CodeBadResponse}):
		return GatewayWords(o.GatewayURL, fmt.Errorf("bootstrap: %w", err), "check --endpoint and --trust-file; nothing was generated")
	case errors.As(err, &ae) && ae.Status >= 400 && ae.Status < 500:
		return nil
	default:
		return fmt.Errorf("bootstrap: the Gateway at %s did not answer the admin check; nothing was generated: %w", o.GatewayURL, err)
	}
}

// InputError: an input of bootstrap (a flag, a file it names) is missing or
// wrong. Nothing was sent or written.
type InputError struct{ Err error }

func (e *InputError) Error() string { return e.Err.Error() }
func (e *InputError) Unwrap() error { return e.Err }

// FileRefused reports whether the input refused is a file that is there
// and was read, and does not hold what it should (a trust file with no CA
// certificate), rather than a flag or a file that is missing.
func (e *InputError) FileRefused() bool {
	var fr *fileRefused
	return errors.As(e.Err, &fr)
}

// fileRefused marks a file read and refused for what it holds.
type fileRefused struct{ err error }

func (e *fileRefused) Error() string { return e.err.Error() }
func (e *fileRefused) Unwrap() error { return e.err }

// AdminRefusedError: the Gateway did not accept the admin credentials
// bootstrap was given. Nothing was generated.
type AdminRefusedError struct {
	URL, User, PasswordFile string
}

func (e *AdminRefusedError) Error() string {
	return fmt.Sprintf("bootstrap: the Gateway at %s did not accept --admin-user %s with the password in %s (%s); "+
		"nothing was generated: check the user and the password file", e.URL, e.User, e.PasswordFile, api.CodeAdminAuthRequired)
}

// Is makes errors.Is(err, &api.Error{Code: api.CodeAdminAuthRequired})
// true.
func (e *AdminRefusedError) Is(target error) bool {
	ae, ok := target.(*api.Error)
	return ok && ae.Code == api.CodeAdminAuthRequired
}

// placeNew renames each [from, to] pair in order, never over an existing
// file, and returns the names placed. It stops at the first failure and
// moves nothing back: what it moves is a registered service's.
func placeNew(pairs [][2]string) ([]string, error) {
	var placed []string
	for _, p := range pairs {
		if _, err := os.Lstat(p[1]); err == nil {
			return placed, fmt.Errorf("%s appeared while bootstrap ran; it is not replaced", p[1])
		}
		if err := os.Rename(p[0], p[1]); err != nil {
			return placed, err
		}
		placed = append(placed, p[1])
	}
	// The names made durable: the Gateway already knows the identity.
	if d, err := os.Open(filepath.Dir(pairs[0][1])); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return placed, nil
}

// nothingLeft tells the operator a refused registration left no files.
func nothingLeft(generated bool) string {
	if generated {
		return " (the credentials generated for it were removed; fix the cause and run bootstrap again)"
	}
	return ""
}

func readSecretFile(path string) (string, error) {
	b, err := safefile.ReadSecret(path, 0)
	if err != nil {
		return "", fmt.Errorf("secret file: %w", err)
	}
	s := strings.TrimRight(string(b), "\r\n")
	if s == "" {
		return "", &fileerr.EmptyError{Path: path, Holds: "the secret on its first line"}
	}
	return s, nil
}

func countNonEmpty(vals ...string) int {
	n := 0
	for _, v := range vals {
		if v != "" {
			n++
		}
	}
	return n
}

func abs(p string) string {
	if p == "" {
		return ""
	}
	a, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	return a
}
