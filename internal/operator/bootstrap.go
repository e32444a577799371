package operator

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/pdmcp/pdmcp/gateway"
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
	AllowScoped     bool
	ConfigOut       string
}

// Bootstrap registers the service at the Gateway, writes config.json, and
// proves the registration by signing in as the service.
func Bootstrap(ctx context.Context, o BootstrapOptions) (*gateway.ServiceConfig, error) {
	if o.ConfigOut == "" || o.GatewayURL == "" || o.AdminUser == "" || o.AdminPasswordFile == "" {
		return nil, errors.New("bootstrap: --endpoint, --admin-user, --admin-password-file and --config-out are required")
	}
	if !o.AllowScoped {
		return nil, errors.New("bootstrap: pdmcp needs scoped sessions; register with --allow-scoped")
	}
	if _, err := os.Stat(o.ConfigOut); err == nil {
		return nil, fmt.Errorf("bootstrap: %s exists; it is never overwritten (move it away to register again)", o.ConfigOut)
	}
	password, err := readSecretFile(o.AdminPasswordFile)
	if err != nil {
		return nil, err
	}
	if o.ServiceName == "" {
		o.ServiceName = "pdmcp"
	}
	cert, login, sender := o.ServiceCert, o.ServiceLoginKey, o.SenderKey
	switch given := countNonEmpty(cert, login, sender); given {
	case 0:
		dir := o.CredentialsDir
		if dir == "" {
			dir = filepath.Join(filepath.Dir(o.ConfigOut), "service")
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("bootstrap: credentials folder: %w", err)
		}
		if cert, login, sender, err = gateway.GenerateServiceCredentials(dir, o.ServiceName); err != nil {
			return nil, fmt.Errorf("bootstrap: generate service credentials: %w", err)
		}
	case 3:
	default:
		return nil, errors.New("bootstrap: give all of --service-cert, --service-login-key and --sender-key, or none")
	}
	reg, err := gateway.ServiceRegistration(o.ServiceName, cert, sender)
	if err != nil {
		return nil, err
	}
	reg.AllowScoped = true
	reg.Prefix = o.Prefix
	if o.DelegatorCert != "" {
		b, err := os.ReadFile(o.DelegatorCert)
		if err != nil {
			return nil, fmt.Errorf("bootstrap: delegator certificate: %w", err)
		}
		reg.DelegatorCertificate = string(b)
	}
	admin, err := gateway.New(gateway.Config{BaseURL: o.GatewayURL, TrustFile: o.TrustFile, AllowHTTPLoopback: o.AllowHTTPLoopback})
	if err != nil {
		return nil, err
	}
	got, err := admin.Admin(o.AdminUser, password).RegisterService(ctx, reg)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: register service: %w", err)
	}
	sc := &gateway.ServiceConfig{
		GatewayURL: o.GatewayURL, TrustFile: abs(o.TrustFile), AllowHTTPLoopback: o.AllowHTTPLoopback,
		ServiceCert: abs(cert), ServiceLoginKey: abs(login), SenderKey: abs(sender),
		ServiceID: got.ServiceID, SystemID: got.SystemID, Prefix: got.Prefix,
	}
	cc := sc.ClientConfig()
	svc, err := gateway.New(cc)
	if err != nil {
		return nil, err
	}
	if err := svc.SignIn(ctx); err != nil {
		return nil, fmt.Errorf("bootstrap: the service was registered but cannot sign in: %w", err)
	}
	if err := gateway.WriteServiceConfig(o.ConfigOut, sc); err != nil {
		return nil, err
	}
	return sc, nil
}

func readSecretFile(path string) (string, error) {
	b, err := safefile.ReadSecret(path, 0)
	if err != nil {
		return "", fmt.Errorf("secret file: %w", err)
	}
	s := strings.TrimRight(string(b), "\r\n")
	if s == "" {
		return "", fmt.Errorf("secret file %s is empty", path)
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
