// Package devstack runs the whole pdmcp stack on loopback for development
// and demos: a development CA and certificates, the reference Gateway and
// key server, a development OpenID provider, the registered service, the
// seeded synthetic documents with three users, and the MCP server over
// Streamable HTTP. Its state lives in one folder that a second run reuses.
// It is not a deployment: every secret in it is generated for the laptop it
// runs on. It builds on server and internal/operator; only cmd/pdmcp (and the
// benchmark) use it.
package devstack

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/pdmcp/pdmcp/auth/devidp"
	"github.com/pdmcp/pdmcp/auth/devpki"
	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/reference"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/operator"
	"github.com/pdmcp/pdmcp/internal/serve"
)

// ServerName is the name hosts are told to give this server.
const ServerName = "protected-documents"

// CallbackPort is the fixed port of the hosts' OAuth redirect.
const CallbackPort = 18124

// devUsers are the stack's users: one approved for everything, one for
// part, one for nothing (mapped at the Gateway, no access at the key server).
var devUsers = []struct {
	name, password string
	documents      []string
	save           bool
}{
	{"alice", "alice-dev-password", []string{"proposal-aurora", "proposal-borealis", "proposal-cirrus", "proposal-doldrum", "evaluation-criteria"}, true},
	{"bob", "bob-dev-password", []string{"proposal-aurora", "evaluation-criteria"}, false},
	{"carol", "carol-dev-password", nil, false},
	// The hand-off pair: the patient may hand her history to the doctor.
	{"patient", "patient-dev-password", nil, false},
	{"doctor", "doctor-dev-password", nil, false},
}

// User is a development user as dev.json lists it.
type User struct {
	Name      string   `json:"name"`
	Password  string   `json:"password"`
	Principal string   `json:"principal"`
	Documents []string `json:"documents"`
	// DataTypes are the compound documents' section types the user's
	// key-server entries open.
	DataTypes []string `json:"dataTypes"`
}

// Info is dev.json: where everything is, so scripts can drive the stack.
type Info struct {
	MCPURL        string `json:"mcpUrl"`
	CAFile        string `json:"caFile"`
	Issuer        string `json:"issuer"`
	GatewayURL    string `json:"gatewayUrl"`
	HostClientID  string `json:"hostClientId"`
	CallbackPort  int    `json:"callbackPort"`
	ServerName    string `json:"serverName"`
	Users         []User `json:"users"`
	Manifest      string `json:"manifest"`
	Grant         string `json:"grant"`
	Audit         string `json:"audit"`
	HTTPConfig    string `json:"httpConfig"`
	ServiceConfig string `json:"serviceConfig"`
	// FileRoot is the folder encrypt_file and decrypt_file work in, with
	// SampleFile in it.
	FileRoot string `json:"fileRoot"`
	Ports    Ports  `json:"ports"`
}

// Ports are the loopback ports of the stack, kept so a second run serves
// the same URLs.
type Ports struct {
	MCP     int `json:"mcp"`
	IdP     int `json:"idp"`
	Gateway int `json:"gateway"`
}

// Options configure Run.
type Options struct {
	State   string // the state folder
	Version string
	Logger  *slog.Logger
	// AccessTokenLifetime of users' access tokens at the development
	// provider (devidp.DefaultAccessTokenLifetime when zero); shorter ones
	// exercise hosts' refresh.
	AccessTokenLifetime time.Duration
	// Ready is called once everything serves, with what dev.json holds.
	Ready func(*Info)
	// Keycloak, when set, is the keycloak.json of a Keycloak that
	// deploy/keycloak/test/keycloak.sh started with deploy/keycloak's realm:
	// it replaces the development provider (its users are made there, and
	// the Gateway maps them by Keycloak's subjects).
	Keycloak string
}

// InfoPath is where Run writes dev.json.
func InfoPath(state string) string { return filepath.Join(state, "dev.json") }

// LoadInfo reads a running (or last) stack's dev.json.
func LoadInfo(state string) (*Info, error) {
	b, err := os.ReadFile(InfoPath(state))
	if err != nil {
		return nil, fmt.Errorf("read %s (is `pdmcp dev` running with this --state?): %w", InfoPath(state), err)
	}
	var i Info
	if err := json.Unmarshal(b, &i); err != nil {
		return nil, fmt.Errorf("%s: %w", InfoPath(state), err)
	}
	return &i, nil
}

// Run starts the stack and serves until ctx ends; then every caller's
// Gateway session is revoked and everything stops.
func Run(ctx context.Context, o Options) error {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	state, err := filepath.Abs(o.State)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(state, 0o700); err != nil {
		return err
	}
	info := &Info{ServerName: ServerName, CallbackPort: CallbackPort, HostClientID: devidp.DefaultHostClientID}
	portsFile := filepath.Join(state, "ports.json")
	if b, err := os.ReadFile(portsFile); err == nil {
		_ = json.Unmarshal(b, &info.Ports)
	}
	ca, err := devpki.LoadOrCreateCA(filepath.Join(state, "ca"), "pdmcp dev")
	if err != nil {
		return err
	}
	info.CAFile = ca.CertPEM

	// The Gateway and key server.
	// The Gateway outlives ctx until the MCP server has revoked every
	// session on its way out; the deferred Close stops it.
	gw, adminPWFile, err := ServeGateway(context.WithoutCancel(ctx), state, ca, info.Ports.Gateway, o.Logger.With("component", "gateway"))
	if err != nil {
		return err
	}
	defer gw.Close()
	info.GatewayURL = gw.URL
	info.Ports.Gateway = portOf(gw.URL)

	// The OpenID provider: the development one, or a Keycloak.
	idpDir := filepath.Join(state, "idp")
	if err := os.MkdirAll(idpDir, 0o700); err != nil {
		return err
	}
	secretPath := filepath.Join(idpDir, "adapter-client-secret")
	providerCA := ca.CertPEM
	subjects := map[string]string{}
	if o.Keycloak != "" {
		kc, err := LoadKeycloakInfo(o.Keycloak)
		if err != nil {
			return err
		}
		// One CA for everything, so hosts trust one file: Keycloak's
		// certificate comes from this state folder's CA.
		if same, err := sameFile(kc.CAFile, ca.CertPEM); err != nil || !same {
			return fmt.Errorf("keycloak's CA %s is not this stack's %s: start Keycloak with deploy/keycloak/test/keycloak.sh start --state %s", kc.CAFile, ca.CertPEM, o.State)
		}
		if subjects, err = keycloakProvider(ctx, kc, secretPath); err != nil {
			return err
		}
		info.Issuer, providerCA = kc.Issuer, kc.CAFile
	} else {
		stop, err := serveDevIdP(ctx, o, info, ca, idpDir, secretPath)
		if err != nil {
			return err
		}
		defer stop()
		for _, u := range devUsers {
			subjects[u.name] = u.name
		}
	}

	// The service, its data and its users, made once and reused.
	if err := provision(ctx, state, info, ca, gw.URL, adminPWFile, providerCA, subjects); err != nil {
		return err
	}

	// The MCP server.
	mcpLn, err := listen(info.Ports.MCP)
	if err != nil {
		return err
	}
	info.Ports.MCP = mcpLn.Addr().(*net.TCPAddr).Port
	// The server opens its own listener on the configured port.
	mcpLn.Close()
	mcpDir := filepath.Join(state, "mcp")
	if err := os.MkdirAll(mcpDir, 0o700); err != nil {
		return err
	}
	mcpCert, mcpKey, err := ca.Issue(mcpDir, "mcp-tls")
	if err != nil {
		return err
	}
	info.HTTPConfig = filepath.Join(state, "mcp-http.json")
	httpCfg := map[string]any{
		"listen": map[string]any{"host": "127.0.0.1", "port": info.Ports.MCP},
		"tls":    map[string]any{"certificate": rel(state, mcpCert), "key": rel(state, mcpKey)},
		"provider": map[string]any{"issuer": info.Issuer, "caFile": rel(state, providerCA),
			"allowedAlgs": []string{"ES256", "RS256"}, "jwksRefreshMinSeconds": 5},
		"exchange": map[string]any{"clientId": devidp.DefaultAdapterClientID, "clientSecretFile": rel(state, secretPath),
			"gatewayAudience": devidp.DefaultGatewayAudience},
		"requiredScopes": []string{"openid"},
		"maxCallers":     8,
	}
	if err := writeJSON(info.HTTPConfig, httpCfg); err != nil {
		return err
	}
	info.MCPURL = fmt.Sprintf("https://127.0.0.1:%d/mcp", info.Ports.MCP)
	return serve.Run(ctx, serve.Options{
		ConfigPath: info.ServiceConfig, ManifestPath: info.Manifest, GrantPath: info.Grant, AuditPath: info.Audit,
		HTTPConfigPath: info.HTTPConfig, Version: o.Version, Environ: nil, Logger: o.Logger.With("component", "mcp"),
		Ready: func(string) {
			if err := writeJSON(portsFile, info.Ports); err != nil {
				o.Logger.Error("write ports.json", "err", err)
			}
			if err := writeJSON(InfoPath(state), info); err != nil {
				o.Logger.Error("write dev.json", "err", err)
			}
			if o.Ready != nil {
				o.Ready(info)
			}
		},
	})
}

// serveDevIdP serves the development OpenID provider on its remembered port
// with the development users; stop ends it.
func serveDevIdP(ctx context.Context, o Options, info *Info, ca *devpki.CA, idpDir, secretPath string) (stop func(), err error) {
	idpCert, idpKey, err := ca.Issue(idpDir, "idp-tls")
	if err != nil {
		return nil, err
	}
	adapterSecret, err := secretFile(secretPath)
	if err != nil {
		return nil, err
	}
	idpLn, err := listen(info.Ports.IdP)
	if err != nil {
		return nil, err
	}
	info.Ports.IdP = idpLn.Addr().(*net.TCPAddr).Port
	info.Issuer = fmt.Sprintf("https://127.0.0.1:%d", info.Ports.IdP)
	var users []devidp.User
	for _, u := range devUsers {
		users = append(users, devidp.User{Username: u.name, Password: u.password, Subject: u.name, Name: u.name})
	}
	// The provider keeps its signing key and the records of the sign-ins
	// and tokens it issued in idpDir, so tokens (and hosts' refresh tokens)
	// outlive a restart: the issuer stays the same through ports.json.
	idp, err := devidp.New(ctx, devidp.Config{Issuer: info.Issuer, Users: users, AdapterClientSecret: adapterSecret,
		AccessTokenLifetime: o.AccessTokenLifetime, StateDir: idpDir, Logger: o.Logger.With("component", "idp")})
	if err != nil {
		idpLn.Close()
		return nil, err
	}
	idpSrv := &http.Server{Handler: idp, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = idpSrv.ServeTLS(idpLn, idpCert, idpKey) }()
	return func() {
		idpSrv.Close()
		idp.Close()
	}, nil
}

// ServeGateway serves the reference Gateway and key server from the state
// folder over TLS on 127.0.0.1: on port when it is free, any port otherwise.
// It returns the server and the file holding the admin password.
func ServeGateway(ctx context.Context, state string, ca *devpki.CA, port int, log *slog.Logger) (*reference.Server, string, error) {
	dir := filepath.Join(state, "gateway")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, "", err
	}
	cert, key, err := ca.Issue(dir, "gateway-tls")
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
	if err != nil && port != 0 {
		cfg.Addr = addr(0)
		srv, err = reference.Serve(ctx, cfg)
	}
	return srv, pwFile, err
}

// provision registers the service, seeds the data with the three users,
// binds the provider and maps the users, and writes a caller-identity
// grant, on the first run; later runs reuse what is there and renew the
// grant.
func provision(ctx context.Context, state string, info *Info, ca *devpki.CA, gatewayURL, adminPWFile, providerCA string,
	subjects map[string]string) error {
	info.ServiceConfig = filepath.Join(state, "config.json")
	data := filepath.Join(state, "task-data")
	info.Manifest = filepath.Join(data, "manifest.json")
	info.Grant = filepath.Join(data, "grant.json")
	info.Audit = filepath.Join(data, "audit.jsonl")
	sc, err := gateway.LoadServiceConfig(info.ServiceConfig)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if sc, err = operator.Bootstrap(ctx, operator.BootstrapOptions{GatewayURL: gatewayURL, TrustFile: ca.CertPEM,
			AdminUser: "admin", AdminPasswordFile: adminPWFile, ServiceName: "pdmcp-dev", AllowScoped: true,
			CredentialsDir: filepath.Join(state, "service"), ConfigOut: info.ServiceConfig}); err != nil {
			return err
		}
	case err != nil:
		return err
	case sc.GatewayURL != gatewayURL:
		sc.GatewayURL = gatewayURL
		if err := gateway.WriteServiceConfig(info.ServiceConfig, sc); err != nil {
			return err
		}
	}
	recordPath := filepath.Join(data, "seed-record.json")
	rec, err := grant.LoadSeedRecord(recordPath)
	if errors.Is(err, fs.ErrNotExist) {
		var su []operator.SeedUser
		for _, u := range devUsers {
			su = append(su, operator.SeedUser{Name: u.name, Documents: u.documents, Save: u.save})
		}
		if rec, err = operator.Seed(ctx, operator.SeedOptions{Config: sc, OutDir: data, Tag: "dev", Users: su}); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	prefix := strings.TrimSuffix(rec.AgentUser, "dev.agent")
	if err := provisionCompound(ctx, sc, data, rec, prefix); err != nil {
		return err
	}
	if err := provisionSteps(ctx, sc, data, rec, prefix); err != nil {
		return err
	}
	info.Users = nil
	for _, u := range devUsers {
		info.Users = append(info.Users, User{Name: u.name, Password: u.password, Principal: prefix + "dev." + u.name,
			Documents: append([]string{}, u.documents...), DataTypes: append([]string{}, devDataTypes[u.name]...)})
	}
	// Bind the provider (its port may have changed) and map the users.
	caPEM, err := os.ReadFile(providerCA)
	if err != nil {
		return err
	}
	pw, err := os.ReadFile(adminPWFile)
	if err != nil {
		return err
	}
	c, err := gateway.New(gateway.Config{BaseURL: gatewayURL, TrustFile: ca.CertPEM})
	if err != nil {
		return err
	}
	admin := c.Admin("admin", strings.TrimSpace(string(pw)))
	if err := admin.BindProvider(ctx, api.BindProviderRequest{ServiceID: sc.ServiceID, Issuer: info.Issuer,
		Audience: devidp.DefaultGatewayAudience, AllowedClient: devidp.DefaultAdapterClientID, CAPEM: string(caPEM)}); err != nil {
		return fmt.Errorf("bind the development provider: %w", err)
	}
	for _, u := range info.Users {
		if err := admin.MapIdentity(ctx, api.MapIdentityRequest{ServiceID: sc.ServiceID, Issuer: info.Issuer,
			Subject: subjects[u.Name], Principal: u.Principal}); err != nil {
			return fmt.Errorf("map %s: %w", u.Name, err)
		}
	}
	// A fresh grant each run: every approved document, every destination,
	// each caller acting as themselves.
	_ = os.Remove(info.Grant)
	_, err = grant.Launch(grant.LaunchOptions{ManifestPath: info.Manifest, AllApproved: true, CallerIdentity: true,
		Tools: append(devTools(), grant.ToolHandOff, grant.ToolCloseStep), Steps: devStepIDs(), TTL: 12 * time.Hour,
		Out: info.Grant})
	if err != nil {
		return err
	}
	// The file tools, on files/ in the state folder with a sample file.
	if info.FileRoot, err = fileRoot(state); err != nil {
		return err
	}
	return addFileTools(info.Grant, info.FileRoot)
}

// Token gets a real access token for a development user, through the
// authorization-code flow with PKCE, as a host would.
func Token(ctx context.Context, state, user string) (string, error) {
	info, err := LoadInfo(state)
	if err != nil {
		return "", err
	}
	var pw string
	for _, u := range info.Users {
		if u.Name == user {
			pw = u.Password
		}
	}
	if pw == "" {
		names := make([]string, 0, len(info.Users))
		for _, u := range info.Users {
			names = append(names, u.Name)
		}
		return "", fmt.Errorf("no development user %q; the users are %s", user, strings.Join(names, ", "))
	}
	ca, err := os.ReadFile(info.CAFile)
	if err != nil {
		return "", err
	}
	hc, err := trustingClient(ca)
	if err != nil {
		return "", err
	}
	// Keycloak's sign-in keeps its state in cookies.
	if hc.Jar, err = cookiejar.New(nil); err != nil {
		return "", err
	}
	tok, err := devidp.Login(ctx, hc, devidp.LoginParams{Issuer: info.Issuer, ClientID: info.HostClientID,
		RedirectURL: fmt.Sprintf("http://127.0.0.1:%d/callback", info.CallbackPort), Username: user, Password: pw,
		Scopes: []string{"openid"}, Resource: info.MCPURL})
	if err != nil {
		return "", err
	}
	return tok.AccessToken, nil
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

func portOf(u string) int {
	_, p, err := net.SplitHostPort(strings.TrimPrefix(strings.TrimPrefix(u, "https://"), "http://"))
	if err != nil {
		return 0
	}
	var n int
	fmt.Sscanf(p, "%d", &n)
	return n
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

func writeJSON(path string, v any) error {
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

func rel(base, p string) string {
	if r, err := filepath.Rel(base, p); err == nil {
		return r
	}
	return p
}

// sameFile reports whether two files hold the same bytes.
func sameFile(a, b string) (bool, error) {
	ab, err := os.ReadFile(a)
	if err != nil {
		return false, err
	}
	bb, err := os.ReadFile(b)
	if err != nil {
		return false, err
	}
	return bytes.Equal(ab, bb), nil
}

// trustingClient trusts only the development CA.
func trustingClient(caPEM []byte) (*http.Client, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("the development CA file holds no certificate")
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}, nil
}
