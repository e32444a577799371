// Package devstack runs the whole pdmcp stack on loopback for development
// and demos: a development CA and certificates, the reference Gateway and
// key server, a development OpenID provider, the registered service, the
// seeded synthetic documents with three users, and the MCP server over
// Streamable HTTP. Its state lives in one folder that a second run reuses.
// It is not a deployment: every secret in it is generated for the laptop it
// runs on. It is internal/stack's builder with the development users,
// documents, steps and remembered ports; only cmd/pdmcp (and the Keycloak
// test) use it.
package devstack

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
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
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/operator"
	"github.com/pdmcp/pdmcp/internal/serve"
	"github.com/pdmcp/pdmcp/internal/stack"
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
	// Tracing is the OTEL_* variables the server reads its tracing from
	// (KEY=VALUE; docs/operating.md "Tracing"); none leaves it off. Only
	// these reach the server: dev does not apply serve's refusal of model
	// credentials to a developer's shell.
	Tracing []string
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
	release, err := LockState(state)
	if err != nil {
		return err
	}
	defer release()
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
	so, err := stackOptions(ctx, o, state, ca, info.Ports)
	if err != nil {
		return err
	}
	so.Serve = func(sv *serve.Options) { sv.Environ = o.Tracing }
	st, err := stack.Start(ctx, so)
	if err != nil {
		return err
	}
	defer st.Close()

	info.GatewayURL, info.Issuer, info.MCPURL = st.GatewayURL, st.Provider.Issuer, st.MCPURL
	info.Ports.Gateway, info.Ports.MCP = portOf(st.GatewayURL), portOf(st.MCPURL)
	if st.IdP != nil {
		info.Ports.IdP = portOf(st.Provider.Issuer)
	}
	info.ServiceConfig, info.Manifest, info.Grant, info.Audit = st.ServicePath, st.ManifestPath, st.GrantPath, st.AuditPath
	info.HTTPConfig, info.FileRoot = st.HTTPConfigPath, st.FileRoot
	for _, u := range devUsers {
		info.Users = append(info.Users, User{Name: u.name, Password: u.password, Principal: st.Principal(u.name),
			Documents: append([]string{}, u.documents...), DataTypes: append([]string{}, devDataTypes[u.name]...)})
	}
	if err := stack.WriteJSON(portsFile, info.Ports); err != nil {
		o.Logger.Error("write ports.json", "err", err)
	}
	if err := stack.WriteJSON(InfoPath(state), info); err != nil {
		o.Logger.Error("write dev.json", "err", err)
	}
	if o.Ready != nil {
		o.Ready(info)
	}
	return st.Wait()
}

// stackOptions are the development stack: on the remembered ports, the
// development users seeded with their documents, the compound documents
// and hand-off steps, the file root with its sample, and a twelve-hour
// grant; the provider is the development one or a Keycloak.
func stackOptions(ctx context.Context, o Options, state string, ca *devpki.CA, ports Ports) (stack.Options, error) {
	var seedUsers []operator.SeedUser
	var idpUsers []devidp.User
	identities := map[string]string{}
	for _, u := range devUsers {
		seedUsers = append(seedUsers, operator.SeedUser{Name: u.name, Documents: u.documents, Save: u.save})
		idpUsers = append(idpUsers, devidp.User{Username: u.name, Password: u.password, Subject: u.name, Name: u.name})
		identities[u.name] = u.name
	}
	so := stack.Options{Dir: state, CA: ca, Logger: o.Logger, Version: o.Version, GatewayPort: ports.Gateway,
		ServiceName: "pdmcp-dev", SeedTag: "dev", SeedUsers: seedUsers, Identities: identities, FileRoot: true,
		MCPPort: ports.MCP,
		// The provider keeps its signing key and the records of the
		// sign-ins and tokens it issued in idp/, so tokens (and hosts'
		// refresh tokens) outlive a restart: the issuer stays the same
		// through ports.json.
		DevIdP: stack.DevIdP{Users: idpUsers, Port: ports.IdP, AccessTokenLifetime: o.AccessTokenLifetime,
			StateDir: filepath.Join(state, "idp")},
		Prepare: prepare,
		// Every approved document, every destination, each caller acting
		// as themselves.
		Grant: func(lo *grant.LaunchOptions) {
			lo.Tools = append(devTools(), grant.ToolHandOff, grant.ToolCloseStep)
			lo.Steps, lo.TTL = devStepIDs(), 12*time.Hour
		},
	}
	if o.Keycloak == "" {
		return so, nil
	}
	kc, err := LoadKeycloakInfo(o.Keycloak)
	if err != nil {
		return so, err
	}
	// One CA for everything, so hosts trust one file: Keycloak's
	// certificate comes from this state folder's CA.
	if same, err := sameFile(kc.CAFile, ca.CertPEM); err != nil || !same {
		return so, fmt.Errorf("keycloak's CA %s is not this stack's %s: start Keycloak with deploy/keycloak/test/keycloak.sh start --state %s", kc.CAFile, ca.CertPEM, o.State)
	}
	subjects, secret, err := keycloakProvider(ctx, kc)
	if err != nil {
		return so, err
	}
	so.Identities = map[string]string{}
	for name, subject := range subjects {
		so.Identities[subject] = name
	}
	so.Provider = &stack.Provider{Issuer: kc.Issuer, CAFile: kc.CAFile, ClientSecret: secret}
	return so, nil
}

// prepare adds what the seed lacks: the sample file, the compound
// documents and the hand-off steps (each once; a second run adds nothing).
func prepare(ctx context.Context, st *stack.Stack) error {
	if err := writeSample(st.FileRoot); err != nil {
		return err
	}
	prefix := strings.TrimSuffix(st.Seed.AgentUser, "dev.agent")
	if err := provisionCompound(ctx, st.Service, st.Data, st.Seed, prefix); err != nil {
		return err
	}
	return provisionSteps(ctx, st.Service, st.Data, st.Seed, prefix)
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

func portOf(u string) int {
	_, p, err := net.SplitHostPort(strings.TrimPrefix(strings.TrimPrefix(u, "https://"), "http://"))
	if err != nil {
		return 0
	}
	var n int
	fmt.Sscanf(p, "%d", &n)
	return n
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
