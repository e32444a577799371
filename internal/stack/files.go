package stack

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/pdmcp/pdmcp/auth"
	"github.com/pdmcp/pdmcp/auth/devpki"
	"github.com/pdmcp/pdmcp/gateway/reference"
	"github.com/pdmcp/pdmcp/grant"
)

// ServeGateway serves the reference Gateway and key server from the state
// folder over TLS on 127.0.0.1: on port when it is free, any port otherwise.
// It returns the server and the file holding the admin password.
func ServeGateway(ctx context.Context, state string, ca *devpki.CA, port int, log *slog.Logger) (*reference.Server, string, error) {
	srv, pwFile, err := ServeGatewayOn(ctx, state, ca, port, log)
	if errors.Is(err, ErrPortInUse) {
		srv, pwFile, err = ServeGatewayOn(ctx, state, ca, 0, log)
	}
	return srv, pwFile, err
}

// ErrPortInUse is ServeGatewayOn's answer when its port is taken.
var ErrPortInUse = errors.New("port in use")

// ServeGatewayOn is ServeGateway on exactly port (any free port when 0): a
// port that is taken is [ErrPortInUse], never another port.
func ServeGatewayOn(ctx context.Context, state string, ca *devpki.CA, port int, log *slog.Logger) (*reference.Server, string, error) {
	dir, cert, key, err := issue(ca, state, "gateway")
	if err != nil {
		return nil, "", err
	}
	pwFile := filepath.Join(dir, "admin-password")
	pw, err := secretFile(pwFile)
	if err != nil {
		return nil, "", err
	}
	cfg := reference.ServeConfig{
		Config: reference.Config{DBPath: filepath.Join(dir, "gateway.sqlite"), AdminUser: "admin", AdminPassword: pw, Logger: log},
		Addr:   addr(port), CertFile: cert, KeyFile: key,
	}
	srv, err := reference.Serve(ctx, cfg)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, "", fmt.Errorf("%s: %w (another program listens there)", addr(port), ErrPortInUse)
	}
	return srv, pwFile, err
}

// issue makes part's folder in the state folder and the TLS certificate
// and key ca issues it there (<part>-tls.pem, kept while still good).
func issue(ca *devpki.CA, state, part string) (dir, cert, key string, err error) {
	dir = filepath.Join(state, part)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", "", err
	}
	cert, key, err = ca.Issue(dir, part+"-tls")
	return dir, cert, key, err
}

// WriteHTTPConfig writes mcp-http.json at path (mode 600), with the files
// it names inside path's folder written relative to it, as an operator
// would keep them.
func WriteHTTPConfig(path string, c auth.HTTPConfig) error {
	base := filepath.Dir(path)
	for _, p := range []*string{&c.TLS.Certificate, &c.TLS.Key, &c.Provider.CAFile, &c.Exchange.ClientSecretFile} {
		*p = rel(base, *p)
	}
	return WriteJSON(path, c)
}

// TLSConfig trusts ca only.
func TLSConfig(ca *devpki.CA) *tls.Config {
	return &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}
}

func addr(port int) string { return fmt.Sprintf("127.0.0.1:%d", port) }

// listen binds the remembered port, or any free one when it is taken.
func listen(port int) (net.Listener, error) {
	if port != 0 {
		if ln, err := net.Listen("tcp", addr(port)); err == nil {
			return ln, nil
		}
	}
	return net.Listen("tcp", "127.0.0.1:0")
}

// secretFile reads a generated secret, or makes one (mode 600).
func secretFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		return strings.TrimSpace(string(b)), nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	r := make([]byte, 24)
	if _, err := rand.Read(r); err != nil {
		return "", err
	}
	s := hex.EncodeToString(r)
	return s, os.WriteFile(path, []byte(s+"\n"), 0o600)
}

// WriteJSON writes v indented to path (mode 600), through a temporary file
// so a reader never sees half of it.
func WriteJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// rel is p relative to base when p lies inside base, p otherwise.
func rel(base, p string) string {
	if r, err := filepath.Rel(base, p); err == nil && filepath.IsLocal(r) {
		return r
	}
	return p
}

// fileRoot makes files/ in dir and returns its resolved absolute path.
func fileRoot(dir string) (string, error) {
	root := filepath.Join(dir, "files")
	if err := os.MkdirAll(root, 0o700); err != nil {
		return "", fmt.Errorf("the file root: %w", err)
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return "", err
	}
	return filepath.EvalSymlinks(abs)
}

// addFileTools gives the grant at path the file tools on root. The stack
// sets the root itself rather than through the launcher: a development
// state folder usually sits inside the source checkout, which the launcher
// refuses for an operator's folder, and this folder holds only what the
// stack put there and what the file tools write.
func addFileTools(path, root string) error {
	g, err := grant.Load(path)
	if err != nil {
		return err
	}
	g.FileRoot = root
	for _, t := range grant.FileTools() {
		if !g.Allows(t) {
			g.AllowedTools = append(g.AllowedTools, t)
		}
	}
	return g.Save(path)
}
