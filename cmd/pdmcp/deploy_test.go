package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/pdmcp/pdmcp/auth"
	"github.com/pdmcp/pdmcp/auth/devidp"
	"github.com/pdmcp/pdmcp/auth/devpki"
	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/devstack"
	"github.com/pdmcp/pdmcp/internal/operator"
	"github.com/pdmcp/pdmcp/internal/serve"
)

// The files under deploy/ are what an operator copies. These tests hold
// them to what the code reads: each file is loaded with the real loader or
// parsed as its consumer parses it, and checked for the settings the server
// depends on. TestDeployCheckersRefuseBrokenFiles proves that each check
// fails when a file loses such a setting.

const deployDir = "../../deploy"

// Names the deploy files share with each other and with the code.
var (
	hostClient    = devidp.DefaultHostClientID    // the hosts' public client
	adapterClient = devidp.DefaultAdapterClientID // this server's confidential client
	gatewayAud    = devidp.DefaultGatewayAudience // the Gateway's API audience
	callbackPort  = devstack.CallbackPort
	serverName    = devstack.ServerName
	exampleMCPURL = "https://127.0.0.1:8443/mcp" // mcp-http.json's port, default resource
	exampleBinary = "/usr/local/bin/pdmcp"
	exampleSrv    = "/srv/pdmcp"
	unitHome      = "/home/operator" // what %h stands for when the unit is checked
	// the hosts' redirects, registered at the development provider and in the realm
	hostRedirects = devidp.DefaultHostRedirectURIs()
)

func readDeploy(t *testing.T, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(deployDir, filepath.FromSlash(rel)))
	if err != nil {
		t.Fatalf("read deploy/%s: %v", rel, err)
	}
	return b
}

// TestDeployFilesPass runs each shipped deploy file through its check.
func TestDeployFilesPass(t *testing.T) {
	for _, tc := range []struct {
		name  string
		check func(t *testing.T) error
	}{
		{"service config loads", func(t *testing.T) error {
			return checkServiceConfig(t.TempDir(), readDeploy(t, "examples/config.json"))
		}},
		{"HTTP config loads", func(t *testing.T) error {
			return checkHTTPConfig(t.TempDir(), readDeploy(t, "examples/mcp-http.json"))
		}},
		{"Keycloak realm", func(t *testing.T) error { return checkRealm(readDeploy(t, "keycloak/realm-pdmcp.json")) }},
		{"systemd unit", func(t *testing.T) error { return checkUnit(readDeploy(t, "systemd/pdmcp.service")) }},
		{"Codex config", func(t *testing.T) error {
			return checkCodexTOML(readDeploy(t, "examples/codex-config.toml"), readDeploy(t, "keycloak/realm-pdmcp.json"))
		}},
		{"Claude Code line", func(t *testing.T) error { return checkClaudeScript(readDeploy(t, "examples/claude-code.sh")) }},
		{"mcpServers JSON", func(t *testing.T) error { return checkMCPServersJSON(readDeploy(t, "examples/mcp-servers.json")) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.check(t); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestDeployCheckersRefuseBrokenFiles breaks one required setting of a
// file at a time and expects its check to fail: a check that passes a
// broken file would let the files drift from the code unnoticed.
func TestDeployCheckersRefuseBrokenFiles(t *testing.T) {
	realm := string(readDeploy(t, "keycloak/realm-pdmcp.json"))
	unit := string(readDeploy(t, "systemd/pdmcp.service"))
	codex := string(readDeploy(t, "examples/codex-config.toml"))
	claude := string(readDeploy(t, "examples/claude-code.sh"))
	servers := string(readDeploy(t, "examples/mcp-servers.json"))
	httpCfg := string(readDeploy(t, "examples/mcp-http.json"))
	svcCfg := string(readDeploy(t, "examples/config.json"))

	// The adapter client's settings after serviceAccountsEnabled: what
	// tells its entry from the other clients'.
	adapterTail := `
      "consentRequired": false,
      "frontchannelLogout": false,
      "fullScopeAllowed": false,
      "redirectUris": [],
      "webOrigins": [],
      "attributes": {
        "standard.token.exchange.enabled": "true"`

	tests := []struct {
		name     string
		file     string
		old, new string
		check    func(t *testing.T, broken []byte) error
	}{
		{"realm: no PKCE on the host client", realm, `"pkce.code.challenge.method": "S256"`, `"pkce.code.challenge.method": ""`, realmCheck},
		{"realm: token exchange off", realm, `"standard.token.exchange.enabled": "true"`, `"standard.token.exchange.enabled": "false"`, realmCheck},
		{"realm: host client confidential", realm, `"publicClient": true`, `"publicClient": false`, realmCheck},
		{"realm: a redirect missing", realm, `"http://127.0.0.1:18124/callback/*"`, `"http://127.0.0.1:18125/callback/*"`, realmCheck},
		{"realm: offline_access for hosts", realm, `"basic",
        "mcp-adapter-audience"
      ],
      "optionalClientScopes": []`, `"basic",
        "mcp-adapter-audience"
      ],
      "optionalClientScopes": ["offline_access"]`, realmCheck},
		{"realm: offline_access in metadata", realm, `"display.on.consent.screen": "true",
        "include.in.openid.provider.metadata": "false"`, `"display.on.consent.screen": "true",
        "include.in.openid.provider.metadata": "true"`, realmCheck},
		{"realm: no audience for the adapter", realm, `"included.client.audience": "mcp-adapter"`, `"included.client.audience": "mcp-host"`, realmCheck},
		{"realm: no gateway-api audience", realm, `"included.client.audience": "gateway-api"`, `"included.client.audience": "account"`, realmCheck},
		{"realm: long tokens", realm, `"accessTokenLifespan": 300`, `"accessTokenLifespan": 3600`, realmCheck},
		{"realm: host tokens within Gemini's margin", realm, `"access.token.lifespan": "600"`, `"access.token.lifespan": "300"`, realmCheck},
		{"realm: a description Keycloak cannot store", realm, `"description": "Public client of MCP hosts: `, `"description": "` + strings.Repeat("x", 250) + ` `, realmCheck},
		{"realm: opencode's redirect missing", realm, `"http://127.0.0.1:18124/mcp/oauth/callback"`, `"http://127.0.0.1:18124/mcp/callback"`, realmCheck},
		{"realm: service account on", realm, `"serviceAccountsEnabled": false,` + adapterTail, `"serviceAccountsEnabled": true,` + adapterTail, realmCheck},
		{"unit: no ProtectHome", unit, "ProtectHome=read-only\n", "", unitCheck},
		{"unit: stdio transport", unit, "serve --transport http", "serve --transport stdio", unitCheck},
		{"unit: a flag serve does not know", unit, "--audit %h", "--audit-file %h", unitCheck},
		{"unit: open network", unit, "IPAddressDeny=any\n", "", unitCheck},
		{"unit: no descriptor limit", unit, "LimitNOFILE=4096\n", "", unitCheck},
		{"unit: descriptors under the connection cap", unit, "LimitNOFILE=4096\n", "LimitNOFILE=1024\n", unitCheck},
		{"unit: no clean environment", unit, "pdmcp clean-env -- %h/.local/bin/pdmcp serve", "pdmcp serve", unitCheck},
		{"unit: audit outside the writable folder", unit, "--audit %h/.local/state/pdmcp/audit.jsonl", "--audit %h/audit.jsonl", unitCheck},
		{"unit: loose umask", unit, "UMask=0077", "UMask=0022", unitCheck},
		{"unit: SIGKILL first", unit, "KillSignal=SIGTERM", "KillSignal=SIGKILL", unitCheck},
		{"unit: a variable the server does not refuse", unit, "UnsetEnvironment=ANTHROPIC_API_KEY", "UnsetEnvironment=HOME", unitCheck},
		{"codex: wrong callback port", codex, "callback_port = 18124", "callback_port = 18125", codexCheck},
		{"codex: wrong client", codex, `client_id = "mcp-host"`, `client_id = "mcp-adapter"`, codexCheck},
		{"codex: misspelt key", codex, "callback_port = 18124", "callback-port = 18124", codexCheck},
		{"codex: unregistered callback", codex, `callback_url = "http://127.0.0.1:18124/callback"`, `callback_url = "http://127.0.0.1:18124/cb"`, codexCheck},
		{"codex: stdio without clean-env", codex, `args = ["clean-env", "--", "/usr/local/bin/pdmcp", "serve"`, `args = ["serve"`, codexCheck},
		{"claude: no callback port", claude, " --callback-port 18124", "", claudeCheck},
		{"claude: SSE transport", claude, "claude mcp add --transport http", "claude mcp add --transport sse", claudeCheck},
		{"claude: the adapter's client", claude, "--client-id mcp-host", "--client-id mcp-adapter", claudeCheck},
		{"mcpServers: no clean-env", servers, `"clean-env",
        "--",
        "/usr/local/bin/pdmcp",`, ``, serversCheck},
		{"mcp-http.json: no maxCallers", httpCfg, `"maxCallers": 8`, `"maxCallers": 0`, httpCheck},
		{"mcp-http.json: not loopback", httpCfg, `"host": "127.0.0.1"`, `"host": "0.0.0.0"`, httpCheck},
		{"mcp-http.json: unknown field", httpCfg, `"maxCallers": 8`, `"maxCallers": 8, "maxcaller": 8`, httpCheck},
		{"mcp-http.json: another gateway audience", httpCfg, `"gatewayAudience": "gateway-api"`, `"gatewayAudience": "gateway"`, httpCheck},
		{"config.json: unknown field", svcCfg, `"prefix": "xa.1a2b3c4d."`, `"prefix": "xa.1a2b3c4d.", "allowScoped": true`, svcCheck},
		{"config.json: plain http", svcCfg, `"https://gateway.example.org:8443"`, `"http://gateway.example.org:8443"`, svcCheck},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(tt.file, tt.old) {
				t.Fatalf("the file no longer holds %q; update this case", tt.old)
			}
			broken := strings.Replace(tt.file, tt.old, tt.new, 1)
			if err := tt.check(t, []byte(broken)); err == nil {
				t.Errorf("the check passed a file with %q replaced by %q", tt.old, tt.new)
			} else {
				t.Logf("refused as it should be: %v", err)
			}
		})
	}
}

func realmCheck(_ *testing.T, b []byte) error { return checkRealm(b) }
func unitCheck(_ *testing.T, b []byte) error  { return checkUnit(b) }
func codexCheck(t *testing.T, b []byte) error {
	return checkCodexTOML(b, readDeploy(t, "keycloak/realm-pdmcp.json"))
}
func claudeCheck(_ *testing.T, b []byte) error  { return checkClaudeScript(b) }
func serversCheck(_ *testing.T, b []byte) error { return checkMCPServersJSON(b) }
func httpCheck(t *testing.T, b []byte) error    { return checkHTTPConfig(t.TempDir(), b) }
func svcCheck(t *testing.T, b []byte) error     { return checkServiceConfig(t.TempDir(), b) }

// problems gathers what a check found, so one run names every problem.
type problems []error

func (p *problems) add(format string, args ...any) { *p = append(*p, fmt.Errorf(format, args...)) }
func (p problems) err() error                      { return errors.Join(p...) }

// checkServiceConfig writes config.json into dir with the files it names
// and loads it as `pdmcp serve` does.
func checkServiceConfig(dir string, data []byte) error {
	var names map[string]any
	if err := json.Unmarshal(data, &names); err != nil {
		return fmt.Errorf("config.json: %w", err)
	}
	for _, field := range []string{"trustFile", "serviceCert", "serviceLoginKey", "senderKey"} {
		rel, _ := names[field].(string)
		if rel == "" {
			continue
		}
		if filepath.IsAbs(rel) {
			return fmt.Errorf("config.json: %s is absolute; the example keeps paths relative to the file", field)
		}
		if _, err := writeIn(dir, rel, []byte("placeholder\n")); err != nil {
			return err
		}
	}
	sc, err := writeAndLoad(dir, "config.json", data, gateway.LoadServiceConfig)
	if err != nil {
		return err
	}
	// The names pdmcp bootstrap gives the credentials it generates.
	if filepath.Base(sc.ServiceCert) != "pdmcp-cert.pem" || filepath.Base(sc.SenderKey) != "pdmcp-sender-key.pem" {
		return fmt.Errorf("config.json: credential files are not named as bootstrap names them: %s, %s", sc.ServiceCert, sc.SenderKey)
	}
	return nil
}

// writeIn writes data (mode 600) to rel, a slash-separated path under dir,
// making its folders, and returns the file's path.
func writeIn(dir, rel string, data []byte) (string, error) {
	p := filepath.Join(dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return "", err
	}
	return p, os.WriteFile(p, data, 0o600)
}

// writeAndLoad writes data to name in dir, as writeIn does, and loads the
// file with load.
func writeAndLoad[T any](dir, name string, data []byte, load func(string) (T, error)) (T, error) {
	path, err := writeIn(dir, name, data)
	if err != nil {
		var zero T
		return zero, err
	}
	return load(path)
}

// checkHTTPConfig writes mcp-http.json into dir with real TLS material (a
// development CA and a server certificate for 127.0.0.1) and a mode 600
// secret, loads it with auth.LoadHTTPConfig, and checks the values the
// other deploy files rely on.
func checkHTTPConfig(dir string, data []byte) error {
	var raw struct {
		TLS struct {
			Certificate string `json:"certificate"`
			Key         string `json:"key"`
		} `json:"tls"`
		Provider struct {
			CAFile string `json:"caFile"`
		} `json:"provider"`
		Exchange struct {
			ClientSecretFile string `json:"clientSecretFile"`
		} `json:"exchange"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return fmt.Errorf("mcp-http.json: %w", err)
	}
	ca, err := devpki.LoadOrCreateCA(filepath.Join(dir, "ca"), "deploy test")
	if err != nil {
		return err
	}
	cert, key, err := ca.Issue(dir, "issued")
	if err != nil {
		return err
	}
	copies := []struct{ from, to string }{
		{cert, raw.TLS.Certificate}, {key, raw.TLS.Key}, {ca.CertPEM, raw.Provider.CAFile},
	}
	for _, c := range copies {
		if c.to == "" || filepath.IsAbs(c.to) {
			return fmt.Errorf("mcp-http.json: %q is not a path relative to the file", c.to)
		}
		b, err := os.ReadFile(c.from)
		if err != nil {
			return err
		}
		if _, err := writeIn(dir, c.to, b); err != nil {
			return err
		}
	}
	if raw.Exchange.ClientSecretFile == "" || filepath.IsAbs(raw.Exchange.ClientSecretFile) {
		return fmt.Errorf("mcp-http.json: exchange.clientSecretFile %q is not a path relative to the file", raw.Exchange.ClientSecretFile)
	}
	if _, err := writeIn(dir, raw.Exchange.ClientSecretFile, []byte("not-a-real-secret\n")); err != nil {
		return err
	}
	cfg, err := writeAndLoad(dir, "mcp-http.json", data, auth.LoadHTTPConfig)
	if err != nil {
		return err
	}
	if err := auth.CheckServerCertificate(cfg.TLS.Certificate); err != nil {
		return err
	}
	var p problems
	if cfg.Resource != exampleMCPURL {
		p.add("mcp-http.json: the served URL is %s; the host examples use %s", cfg.Resource, exampleMCPURL)
	}
	if cfg.Exchange.ClientID != adapterClient || cfg.Audience != adapterClient {
		p.add("mcp-http.json: exchange.clientId/audience %q/%q; the realm's confidential client is %q", cfg.Exchange.ClientID, cfg.Audience, adapterClient)
	}
	if cfg.Exchange.GatewayAudience != gatewayAud {
		p.add("mcp-http.json: exchange.gatewayAudience %q; the realm's Gateway audience is %q", cfg.Exchange.GatewayAudience, gatewayAud)
	}
	if !slices.Equal(cfg.RequiredScopes, []string{"openid"}) {
		p.add("mcp-http.json: requiredScopes %v; the hosts are configured to ask for openid", cfg.RequiredScopes)
	}
	if u, err := url.Parse(cfg.Provider.Issuer); err != nil || !strings.HasSuffix(u.Path, "/realms/pdmcp") {
		p.add("mcp-http.json: provider.issuer %q is not the pdmcp realm's", cfg.Provider.Issuer)
	}
	return p.err()
}

// Keycloak's realm representation, as much of it as the server depends on.
type kcRealm struct {
	Realm                       string     `json:"realm"`
	Enabled                     bool       `json:"enabled"`
	AccessTokenLifespan         int        `json:"accessTokenLifespan"`
	DefaultDefaultClientScopes  []string   `json:"defaultDefaultClientScopes"`
	DefaultOptionalClientScopes []string   `json:"defaultOptionalClientScopes"`
	Clients                     []kcClient `json:"clients"`
	ClientScopes                []kcScope  `json:"clientScopes"`
}

type kcClient struct {
	ClientID                  string            `json:"clientId"`
	Enabled                   bool              `json:"enabled"`
	Protocol                  string            `json:"protocol"`
	PublicClient              bool              `json:"publicClient"`
	BearerOnly                bool              `json:"bearerOnly"`
	ClientAuthenticatorType   string            `json:"clientAuthenticatorType"`
	Secret                    *string           `json:"secret"`
	StandardFlowEnabled       bool              `json:"standardFlowEnabled"`
	ImplicitFlowEnabled       bool              `json:"implicitFlowEnabled"`
	DirectAccessGrantsEnabled bool              `json:"directAccessGrantsEnabled"`
	ServiceAccountsEnabled    bool              `json:"serviceAccountsEnabled"`
	RedirectURIs              []string          `json:"redirectUris"`
	Attributes                map[string]string `json:"attributes"`
	DefaultClientScopes       []string          `json:"defaultClientScopes"`
	OptionalClientScopes      []string          `json:"optionalClientScopes"`
	Name                      string            `json:"name"`
	Description               string            `json:"description"`
}

type kcScope struct {
	Name            string            `json:"name"`
	Description     string            `json:"description"`
	Protocol        string            `json:"protocol"`
	Attributes      map[string]string `json:"attributes"`
	ProtocolMappers []struct {
		ProtocolMapper string            `json:"protocolMapper"`
		Config         map[string]string `json:"config"`
	} `json:"protocolMappers"`
}

func (r *kcRealm) client(id string) *kcClient {
	for i := range r.Clients {
		if r.Clients[i].ClientID == id {
			return &r.Clients[i]
		}
	}
	return nil
}

func (r *kcRealm) scope(name string) *kcScope {
	for i := range r.ClientScopes {
		if r.ClientScopes[i].Name == name {
			return &r.ClientScopes[i]
		}
	}
	return nil
}

// addsAudience reports whether the scope has an audience mapper putting
// the client aud into access tokens.
func (s *kcScope) addsAudience(aud string) bool {
	for _, m := range s.ProtocolMappers {
		if m.ProtocolMapper == "oidc-audience-mapper" && m.Config["included.client.audience"] == aud &&
			m.Config["access.token.claim"] == "true" {
			return true
		}
	}
	return false
}

// addsSubject reports whether the scope puts the user's sub into access
// tokens (Keycloak 25 and later add it only through such a scope).
func (s *kcScope) addsSubject() bool {
	for _, m := range s.ProtocolMappers {
		if m.ProtocolMapper == "oidc-sub-mapper" && m.Config["access.token.claim"] == "true" {
			return true
		}
	}
	return false
}

func checkRealm(data []byte) error {
	var r kcRealm
	if err := json.Unmarshal(data, &r); err != nil {
		return fmt.Errorf("realm: %w", err)
	}
	var p problems
	if r.Realm != "pdmcp" || !r.Enabled {
		p.add("realm: %q (enabled %v); want the enabled realm pdmcp", r.Realm, r.Enabled)
	}
	if r.AccessTokenLifespan != 300 {
		p.add("realm: accessTokenLifespan %d; want 300 (the exchanged token and the Gateway session follow it)", r.AccessTokenLifespan)
	}
	if bytes.Contains(data, []byte(`"secret"`)) {
		p.add("realm: holds a client secret; Keycloak generates one on import and it stays out of the repository")
	}
	if slices.Contains(r.DefaultOptionalClientScopes, "offline_access") || slices.Contains(r.DefaultDefaultClientScopes, "offline_access") {
		p.add("realm: offline_access is among the scopes new clients get")
	}
	// Keycloak stores names and descriptions in columns of 255 characters:
	// a longer one fails the import (and Keycloak's start).
	for _, c := range r.Clients {
		if len(c.Name) > 255 || len(c.Description) > 255 {
			p.add("realm: client %s's name or description is longer than 255 characters", c.ClientID)
		}
	}
	for _, sc := range r.ClientScopes {
		if len(sc.Description) > 255 {
			p.add("realm: scope %s's description is longer than 255 characters", sc.Name)
		}
	}
	// Every scope a client names must be defined, or the import fails.
	for _, c := range r.Clients {
		for _, s := range slices.Concat(c.DefaultClientScopes, c.OptionalClientScopes) {
			if r.scope(s) == nil {
				p.add("realm: client %s names scope %q, which the realm does not define", c.ClientID, s)
			}
		}
	}

	if c := r.client(adapterClient); c == nil {
		p.add("realm: no client %s", adapterClient)
	} else {
		if c.PublicClient || c.BearerOnly || c.ClientAuthenticatorType != "client-secret" {
			p.add("realm: %s must be confidential with a client secret (public %v, bearer-only %v, %q)",
				c.ClientID, c.PublicClient, c.BearerOnly, c.ClientAuthenticatorType)
		}
		if c.Attributes["standard.token.exchange.enabled"] != "true" {
			p.add("realm: %s does not have standard token exchange enabled", c.ClientID)
		}
		if c.ServiceAccountsEnabled || c.StandardFlowEnabled || c.ImplicitFlowEnabled || c.DirectAccessGrantsEnabled {
			p.add("realm: %s must have no flow of its own (it only exchanges tokens)", c.ClientID)
		}
		if len(c.RedirectURIs) != 0 {
			p.add("realm: %s has redirect URIs %v", c.ClientID, c.RedirectURIs)
		}
		if !slices.Contains(c.OptionalClientScopes, gatewayAud) {
			p.add("realm: %s lacks the optional scope %s the exchange asks for", c.ClientID, gatewayAud)
		}
		if !someScope(&r, c.DefaultClientScopes, (*kcScope).addsSubject) {
			p.add("realm: %s's tokens would carry no sub (no default scope with a sub mapper)", c.ClientID)
		}
	}

	if c := r.client(gatewayAud); c == nil {
		p.add("realm: no client %s for the Gateway's API audience", gatewayAud)
	} else if !c.BearerOnly || c.PublicClient || c.StandardFlowEnabled || c.DirectAccessGrantsEnabled {
		p.add("realm: %s must be bearer-only with no flow", c.ClientID)
	}
	if s := r.scope(gatewayAud); s == nil || !s.addsAudience(gatewayAud) {
		p.add("realm: no scope %s with an audience mapper adding %s", gatewayAud, gatewayAud)
	} else if s.Attributes["include.in.openid.provider.metadata"] != "false" {
		p.add("realm: scope %s is advertised in the provider metadata", gatewayAud)
	}

	if c := r.client(hostClient); c == nil {
		p.add("realm: no client %s", hostClient)
	} else {
		if !c.PublicClient || c.BearerOnly {
			p.add("realm: %s must be a public client", c.ClientID)
		}
		if c.Attributes["pkce.code.challenge.method"] != "S256" {
			p.add("realm: %s does not require PKCE S256", c.ClientID)
		}
		if !c.StandardFlowEnabled || c.ImplicitFlowEnabled || c.DirectAccessGrantsEnabled || c.ServiceAccountsEnabled {
			p.add("realm: %s must use the standard (code) flow only", c.ClientID)
		}
		if c.Attributes["standard.token.exchange.enabled"] == "true" {
			p.add("realm: %s may exchange tokens", c.ClientID)
		}
		// Gemini CLI refreshes a token five minutes before it expires: a
		// shorter life makes it refresh on every request; a longer one keeps
		// a stolen token alive longer (docs/operating.md).
		if want := strconv.Itoa(int(devidp.DefaultAccessTokenLifetime.Seconds())); c.Attributes["access.token.lifespan"] != want {
			p.add("realm: %s access.token.lifespan %q; want %s (devidp's DefaultAccessTokenLifetime, past Gemini CLI's 300 s margin)",
				c.ClientID, c.Attributes["access.token.lifespan"], want)
		}
		want := hostRedirects
		if got := slices.Sorted(slices.Values(c.RedirectURIs)); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
			p.add("realm: %s redirects %v; want exactly %v", c.ClientID, c.RedirectURIs, want)
		}
		if !someScope(&r, c.DefaultClientScopes, func(s *kcScope) bool { return s.addsAudience(adapterClient) }) {
			p.add("realm: no default scope of %s puts %s into its access tokens' aud", c.ClientID, adapterClient)
		}
		if !someScope(&r, c.DefaultClientScopes, (*kcScope).addsSubject) {
			p.add("realm: %s's tokens would carry no sub (no default scope with a sub mapper)", c.ClientID)
		}
		if slices.Contains(c.DefaultClientScopes, "offline_access") || slices.Contains(c.OptionalClientScopes, "offline_access") {
			p.add("realm: %s may ask for offline_access", c.ClientID)
		}
	}
	if s := r.scope("offline_access"); s == nil {
		p.add("realm: no offline_access scope (Keycloak would create one that is advertised)")
	} else if s.Attributes["include.in.openid.provider.metadata"] != "false" {
		p.add("realm: offline_access is advertised in the provider metadata; hosts following the MCP rules would ask for it")
	}
	return p.err()
}

func someScope(r *kcRealm, names []string, ok func(*kcScope) bool) bool {
	for _, n := range names {
		if s := r.scope(n); s != nil && ok(s) {
			return true
		}
	}
	return false
}

// unitFile is a systemd unit: each section's keys and their values, in
// order, with continuation lines joined.
type unitFile map[string]map[string][]string

func parseUnit(data []byte) (unitFile, error) {
	u := unitFile{}
	section := ""
	var pending string
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimRight(line, " \t\r")
		if pending == "" {
			trimmed := strings.TrimSpace(line)
			if trimmed == "" || trimmed[0] == '#' || trimmed[0] == ';' {
				continue
			}
		}
		if cont, ok := strings.CutSuffix(line, "\\"); ok {
			pending += cont + " "
			continue
		}
		line, pending = strings.TrimSpace(pending+line), ""
		if strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]") {
			section = line[1 : len(line)-1]
			if u[section] == nil {
				u[section] = map[string][]string{}
			}
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || section == "" {
			return nil, fmt.Errorf("unit line %d: %q is not key=value inside a section", i+1, line)
		}
		k = strings.TrimSpace(k)
		u[section][k] = append(u[section][k], strings.TrimSpace(v))
	}
	if pending != "" {
		return nil, errors.New("unit: ends in a continuation line")
	}
	return u, nil
}

func checkUnit(data []byte) error {
	u, err := parseUnit(data)
	if err != nil {
		return err
	}
	svc := u["Service"]
	if svc == nil {
		return errors.New("unit: no [Service] section")
	}
	var p problems
	one := func(key string) string {
		if vs := svc[key]; len(vs) > 0 {
			return vs[len(vs)-1]
		}
		return ""
	}
	for key, want := range map[string]string{
		"NoNewPrivileges": "yes", "PrivateTmp": "yes", "ProtectSystem": "strict", "ProtectHome": "read-only",
		"UMask": "0077", "KillSignal": "SIGTERM", "IPAddressDeny": "any",
	} {
		if got := one(key); got != want {
			p.add("unit: %s=%q; want %q", key, got, want)
		}
	}
	families := strings.Fields(strings.Join(svc["RestrictAddressFamilies"], " "))
	if !slices.Equal(slices.Sorted(slices.Values(families)), []string{"AF_INET", "AF_INET6", "AF_UNIX"}) {
		p.add("unit: RestrictAddressFamilies=%v; want AF_INET AF_INET6 AF_UNIX", families)
	}
	if allow := strings.Fields(strings.Join(svc["IPAddressAllow"], " ")); !slices.Contains(allow, "localhost") {
		p.add("unit: IPAddressAllow=%v does not allow localhost, where the hosts connect", allow)
	}
	if d, err := time.ParseDuration(one("TimeoutStopSec")); err != nil || d < 10*time.Second {
		p.add("unit: TimeoutStopSec=%q; the server needs a few seconds to revoke every session", one("TimeoutStopSec"))
	}
	// Descriptors for every connection the server admits by default, one
	// outgoing connection for each, and files and the runtime beside them
	// (docs/operating.md, "Limits").
	if n, err := strconv.Atoi(one("LimitNOFILE")); err != nil || n < 2*auth.DefaultMaxConnections+256 {
		p.add("unit: LimitNOFILE=%q; want at least %d for connections.max's default, outgoing connections and files",
			one("LimitNOFILE"), 2*auth.DefaultMaxConnections+256)
	}
	unset := strings.Fields(strings.Join(svc["UnsetEnvironment"], " "))
	if len(unset) == 0 {
		p.add("unit: no UnsetEnvironment=")
	}
	for _, name := range unset {
		if serve.CheckEnvironment([]string{name + "=x"}) == nil {
			p.add("unit: UnsetEnvironment names %s, which is no model credential the server refuses", name)
		}
	}
	writable := strings.Fields(strings.ReplaceAll(strings.Join(svc["ReadWritePaths"], " "), "%h", unitHome))
	if len(writable) == 0 {
		p.add("unit: no ReadWritePaths= for the state folder")
	}

	if len(svc["ExecStart"]) != 1 {
		return errors.Join(append(p, fmt.Errorf("unit: %d ExecStart= lines; want one", len(svc["ExecStart"])))...)
	}
	argv := strings.Fields(strings.ReplaceAll(svc["ExecStart"][0], "%h", unitHome))
	// The launch is `pdmcp clean-env [--keep VAR]... -- pdmcp serve ...`.
	if len(argv) < 4 || argv[1] != "clean-env" {
		return errors.Join(append(p, fmt.Errorf("unit: ExecStart %v does not start the server through pdmcp clean-env", argv))...)
	}
	sep := slices.Index(argv, "--")
	if sep < 0 || sep+2 >= len(argv) || argv[sep+1] != argv[0] || argv[sep+2] != "serve" {
		return errors.Join(append(p, fmt.Errorf("unit: ExecStart %v: want clean-env ... -- <the same pdmcp> serve ...", argv))...)
	}
	clean := newCleanEnvCmd()
	if err := clean.ParseFlags(argv[2:sep]); err != nil {
		p.add("unit: clean-env flags %v: %v", argv[2:sep], err)
	}
	serve := newServeCmd()
	if err := serve.ParseFlags(argv[sep+3:]); err != nil {
		return errors.Join(append(p, fmt.Errorf("unit: serve flags: %w", err))...)
	}
	if err := serve.ValidateRequiredFlags(); err != nil {
		p.add("unit: serve: %v", err)
	}
	if args := serve.Flags().Args(); len(args) > 0 {
		p.add("unit: serve takes no arguments, got %v", args)
	}
	flag := func(name string) string { v, _ := serve.Flags().GetString(name); return v }
	if flag("transport") != "http" || flag("http-config") == "" {
		p.add("unit: ExecStart runs serve --transport %q --http-config %q; want http with an mcp-http.json", flag("transport"), flag("http-config"))
	}
	for _, name := range []string{"manifest", "grant", "audit"} {
		path := flag(name)
		if !slices.ContainsFunc(writable, func(dir string) bool { return strings.HasPrefix(path, strings.TrimSuffix(dir, "/")+"/") }) {
			p.add("unit: --%s %s is outside ReadWritePaths %v; the server writes there", name, path, writable)
		}
	}
	if !strings.Contains(svc["ExecStart"][0], "serve --transport http") {
		p.add("unit: ExecStart does not read `serve --transport http`")
	}
	return p.err()
}

// Keys Codex reads in an [mcp_servers.<name>] table (Codex's configuration
// reference); anything else is most likely a misspelling Codex ignores.
var codexServerKeys = []string{
	"command", "args", "env", "env_vars", "cwd", "url", "bearer_token_env_var", "http_headers", "env_http_headers",
	"enabled", "required", "startup_timeout_sec", "startup_timeout_ms", "tool_timeout_sec", "enabled_tools",
	"disabled_tools", "default_tools_approval_mode", "tools", "scopes", "oauth_resource", "oauth", "auth",
}

var codexOAuthKeys = []string{"client_id", "callback_url", "callback_port"}

func checkCodexTOML(data, realmJSON []byte) error {
	var doc map[string]any
	if err := toml.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("codex-config.toml: %w", err)
	}
	var r kcRealm
	if err := json.Unmarshal(realmJSON, &r); err != nil {
		return fmt.Errorf("realm: %w", err)
	}
	servers, _ := doc["mcp_servers"].(map[string]any)
	var p problems
	for name, v := range servers {
		table, _ := v.(map[string]any)
		for k := range table {
			if !slices.Contains(codexServerKeys, k) {
				p.add("codex-config.toml: [mcp_servers.%s] has %q, which Codex does not read", name, k)
			}
		}
	}

	http, _ := servers[serverName].(map[string]any)
	if http == nil {
		p.add("codex-config.toml: no [mcp_servers.%s]", serverName)
	} else {
		if http["url"] != exampleMCPURL {
			p.add("codex-config.toml: url %v; want %s", http["url"], exampleMCPURL)
		}
		if scopes, _ := http["scopes"].([]any); !slices.Contains(scopes, any("openid")) {
			p.add("codex-config.toml: scopes %v; want openid, the scope the server requires", http["scopes"])
		}
		oauth, _ := http["oauth"].(map[string]any)
		for k := range oauth {
			if !slices.Contains(codexOAuthKeys, k) {
				p.add("codex-config.toml: oauth has %q, which Codex does not read", k)
			}
		}
		if oauth["client_id"] != hostClient {
			p.add("codex-config.toml: oauth.client_id %v; want the hosts' public client %s", oauth["client_id"], hostClient)
		}
		if port, _ := oauth["callback_port"].(int64); port != int64(callbackPort) {
			p.add("codex-config.toml: oauth.callback_port %v; want %d", oauth["callback_port"], callbackPort)
		}
		cb, _ := oauth["callback_url"].(string)
		if !redirectRegistered(&r, cb) {
			p.add("codex-config.toml: oauth.callback_url %q is not a redirect of the realm's %s", cb, hostClient)
		}
	}

	// The stdio form is exactly what `pdmcp host-config --format codex-toml`
	// writes for these paths.
	const stdioName = "protected-documents-stdio"
	stdio, _ := servers[stdioName].(map[string]any)
	want, err := exampleHost(stdioName).CodexTOML()
	if err != nil {
		return err
	}
	var wantDoc map[string]any
	if err := toml.Unmarshal(want, &wantDoc); err != nil {
		return fmt.Errorf("host-config's own TOML: %w", err)
	}
	if wantTable := wantDoc["mcp_servers"].(map[string]any)[stdioName]; !reflect.DeepEqual(stdio, wantTable) {
		p.add("codex-config.toml: [mcp_servers.%s] is\n%v\nbut pdmcp host-config writes\n%v", stdioName, stdio, wantTable)
	}
	return p.err()
}

// redirectRegistered reports whether the host client lists u, exactly or
// under a trailing /* wildcard, as Keycloak matches them.
func redirectRegistered(r *kcRealm, u string) bool {
	c := r.client(hostClient)
	if c == nil || u == "" {
		return false
	}
	for _, reg := range c.RedirectURIs {
		if reg == u {
			return true
		}
		if base, ok := strings.CutSuffix(reg, "*"); ok && strings.HasPrefix(u, base) {
			return true
		}
	}
	return false
}

var mcpURLDefault = regexp.MustCompile(`MCP_URL="\$\{MCP_URL:-([^}]+)\}"`)

func checkClaudeScript(data []byte) error {
	text := strings.ReplaceAll(string(data), "\\\n", " ")
	var add []string
	for _, line := range strings.Split(text, "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "claude" && f[1] == "mcp" && f[2] == "add" {
			if add != nil {
				return errors.New("claude-code.sh: more than one claude mcp add line")
			}
			add = f[3:]
		}
	}
	if add == nil {
		return errors.New("claude-code.sh: no claude mcp add line")
	}
	flags := map[string]string{}
	var positional []string
	for i := 0; i < len(add); i++ {
		if strings.HasPrefix(add[i], "--") {
			if i+1 >= len(add) {
				return fmt.Errorf("claude-code.sh: %s has no value", add[i])
			}
			flags[add[i]] = add[i+1]
			i++
			continue
		}
		positional = append(positional, strings.Trim(add[i], `"'`))
	}
	var p problems
	for flag, want := range map[string]string{
		"--transport": "http", "--client-id": hostClient, "--callback-port": strconv.Itoa(callbackPort),
	} {
		if flags[flag] != want {
			p.add("claude-code.sh: %s %q; want %q", flag, flags[flag], want)
		}
	}
	if len(positional) != 2 || positional[0] != serverName {
		p.add("claude-code.sh: claude mcp add takes the name %s and the URL, got %v", serverName, positional)
	} else if positional[1] != "$MCP_URL" {
		p.add("claude-code.sh: the URL is %q; want $MCP_URL", positional[1])
	}
	if m := mcpURLDefault.FindStringSubmatch(text); m == nil || m[1] != exampleMCPURL {
		p.add("claude-code.sh: MCP_URL does not default to %s", exampleMCPURL)
	}
	if !strings.Contains(text, "claude mcp list") {
		p.add("claude-code.sh: no claude mcp list to show the server")
	}
	return p.err()
}

// exampleHost is the host configuration pdmcp host-config writes for the
// examples' paths, under the given server name.
func exampleHost(name string) operator.HostConfig {
	return operator.HostConfig{ServerName: name, Binary: exampleBinary,
		Config: exampleSrv + "/config.json", Manifest: exampleSrv + "/task-data/manifest.json",
		Grant: exampleSrv + "/task-data/grant.json", Audit: exampleSrv + "/task-data/audit.jsonl",
		AllowedTools: grant.DocumentTools()}
}

// checkMCPServersJSON holds the stdio example to what `pdmcp host-config`
// writes for the same paths.
func checkMCPServersJSON(data []byte) error {
	want, err := exampleHost(serverName).MCPServersJSON()
	if err != nil {
		return err
	}
	var got, wantDoc any
	if err := json.Unmarshal(data, &got); err != nil {
		return fmt.Errorf("mcp-servers.json: %w", err)
	}
	if err := json.Unmarshal(want, &wantDoc); err != nil {
		return err
	}
	if !reflect.DeepEqual(got, wantDoc) {
		return fmt.Errorf("mcp-servers.json is\n%s\nbut pdmcp host-config writes\n%s", data, want)
	}
	return nil
}
