package auth

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// configDir copies testdata/mcp-http.json into a fresh folder with the
// files it names (the secret file mode 600), applies edit to the decoded
// JSON, and returns the config file's path.
func configDir(t *testing.T, edit func(m map[string]any)) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "mcp-http.json"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ca := newTestCA(t)
	writePEM(t, filepath.Join(dir, "idp-ca.pem"), "CERTIFICATE", ca.Cert.Raw, 0o644)
	for name, content := range map[string]string{"mcp-tls.pem": "cert", "mcp-tls.key": "key"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "mcp-adapter-client-secret"), []byte("the-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		edit(m)
		if raw, err = json.Marshal(m); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "mcp-http.json")
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func sub(m map[string]any, key string) map[string]any { return m[key].(map[string]any) }

func TestLoadHTTPConfig(t *testing.T) {
	path := configDir(t, nil)
	c, err := LoadHTTPConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(path)
	for got, want := range map[string]string{
		c.TLS.Certificate:                   filepath.Join(dir, "mcp-tls.pem"),
		c.TLS.Key:                           filepath.Join(dir, "mcp-tls.key"),
		c.Provider.CAFile:                   filepath.Join(dir, "idp-ca.pem"),
		c.Exchange.ClientSecretFile:         filepath.Join(dir, "mcp-adapter-client-secret"),
		c.Audience:                          "mcp-adapter",
		c.Resource:                          "https://127.0.0.1:8443/mcp",
		c.ResourceMetadataURL():             "https://127.0.0.1:8443/.well-known/oauth-protected-resource/mcp",
		c.MetadataPath():                    "/.well-known/oauth-protected-resource/mcp",
		c.ListenAddr():                      "127.0.0.1:8443",
		c.Provider.Issuer:                   "https://idp.example/realms/main",
		strings.Join(c.RequiredScopes, " "): "openid",
	} {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
	if c.MaxCallers != 8 || c.JWKSRefreshMin().Seconds() != 5 {
		t.Errorf("maxCallers %d, refresh %s", c.MaxCallers, c.JWKSRefreshMin())
	}
	if s, err := c.ClientSecret(); err != nil || s != "the-secret" {
		t.Errorf("secret: %v", err)
	}
	p, err := c.NewProvider()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.NewVerifier(p, nil); err != nil {
		t.Error(err)
	}
	if _, err := c.NewExchanger(p, nil, nil); err != nil {
		t.Error(err)
	}

	// The per-user limits are read as written (0 where absent: the
	// server's defaults).
	c, err = LoadHTTPConfig(configDir(t, func(m map[string]any) {
		m["maxRequestsPerUser"], m["maxRequests"] = 4, 40
		m["maxBodyBytesPerUser"], m["maxBodyBytes"] = 2<<20, 8<<20
		m["bodyTimeoutSeconds"], m["maxListenStreamsPerUser"] = 3, 2
	}))
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxRequestsPerUser != 4 || c.MaxRequests != 40 || c.MaxBodyBytesPerUser != 2<<20 || c.MaxBodyBytes != 8<<20 ||
		c.BodyTimeoutSeconds != 3 || c.MaxListenStreamsPerUser != 2 || c.MaxListenStreams != 0 {
		t.Errorf("per-user limits read as %+v", c)
	}

	// Explicit audience and resource are kept; the refresh default applies.
	c, err = LoadHTTPConfig(configDir(t, func(m map[string]any) {
		m["audience"] = "https://127.0.0.1:8443/mcp"
		m["resource"] = "https://localhost:9443/tools/mcp"
		delete(sub(m, "provider"), "jwksRefreshMinSeconds")
	}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Audience != "https://127.0.0.1:8443/mcp" || c.Resource != "https://localhost:9443/tools/mcp" ||
		c.ResourceMetadataURL() != "https://localhost:9443/.well-known/oauth-protected-resource/tools/mcp" || c.JWKSRefreshMin() != DefaultJWKSRefreshMin {
		t.Errorf("got %+v", c)
	}
}

// TestLoadHTTPConfigTokenBounds: the token and key-set bounds default
// when absent, are kept when set, and reach the verifier, with the
// resource URL as an accepted audience.
func TestLoadHTTPConfigTokenBounds(t *testing.T) {
	tests := []struct {
		name                    string
		set                     map[string]any
		maxAge, grace, lifetime time.Duration
	}{
		{"defaults", nil, DefaultJWKSMaxAge, DefaultJWKSGrace, DefaultMaxTokenLifetime},
		{"set", map[string]any{"jwksMaxAgeSeconds": 120, "jwksGraceSeconds": 900, "maxTokenLifetimeSeconds": 3600},
			2 * time.Minute, 15 * time.Minute, time.Hour},
		{"a maximum age over the default grace raises the grace", map[string]any{"jwksMaxAgeSeconds": 3600},
			time.Hour, time.Hour, DefaultMaxTokenLifetime},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := LoadHTTPConfig(configDir(t, func(m map[string]any) {
				for k, v := range tc.set {
					sub(m, "provider")[k] = v
				}
			}))
			if err != nil {
				t.Fatal(err)
			}
			p, err := c.NewProvider()
			if err != nil {
				t.Fatal(err)
			}
			v, err := c.NewVerifier(p, nil)
			if err != nil {
				t.Fatal(err)
			}
			if v.maxAge != tc.maxAge || v.grace != tc.grace || v.maxLifetime != tc.lifetime {
				t.Errorf("verifier maximum age %s, grace %s, lifetime %s; want %s, %s, %s",
					v.maxAge, v.grace, v.maxLifetime, tc.maxAge, tc.grace, tc.lifetime)
			}
			if v.resource != "https://127.0.0.1:8443/mcp" || v.audience != "mcp-adapter" {
				t.Errorf("verifier audiences %q and %q", v.audience, v.resource)
			}
		})
	}
}

func TestLoadHTTPConfigRefuses(t *testing.T) {
	// chmod is a prepare that sets the mode of the folder's file name.
	chmod := func(name string, mode os.FileMode) func(*testing.T, string) {
		return func(t *testing.T, dir string) {
			if err := os.Chmod(filepath.Join(dir, name), mode); err != nil {
				t.Fatal(err)
			}
		}
	}
	// symlinked moves name aside and leaves a symbolic link to it in its place.
	symlinked := func(name string) func(*testing.T, string) {
		return func(t *testing.T, dir string) {
			path := filepath.Join(dir, name)
			if err := os.Rename(path, path+".real"); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(path+".real", path); err != nil {
				t.Fatal(err)
			}
		}
	}
	tests := []struct {
		name string
		edit func(m map[string]any)
		// prepare changes the folder after the file is written.
		prepare func(t *testing.T, dir string)
		want    string
	}{
		{"unknown top-level field", func(m map[string]any) { m["listenPort"] = 1 }, nil, `listenPort at line 1, column 161: unknown field: remove it or check its spelling`},
		{"unknown nested field", func(m map[string]any) { sub(m, "provider")["jwksUri"] = "x" }, nil, `provider.jwksUri at line 1, column 311: unknown field`},
		{"unknown tracing field", func(m map[string]any) { m["tracing"] = map[string]any{"endpoint": "http://127.0.0.1:4318", "url": "x"} }, nil, `tracing.url at line 1, column 442: unknown field`},
		{"tracing exporter unknown", func(m map[string]any) { m["tracing"] = map[string]any{"exporter": "zipkin"} }, nil, `tracing: tracing exporter "zipkin" is not offered`},
		{"tracing endpoint not http", func(m map[string]any) { m["tracing"] = map[string]any{"endpoint": "udp://127.0.0.1:6831"} }, nil, "tracing: tracing endpoint is not an http://"},
		{"listen on 0.0.0.0", func(m map[string]any) { sub(m, "listen")["host"] = "0.0.0.0" }, nil, `listen.host is "0.0.0.0"`},
		{"listen on localhost", func(m map[string]any) { sub(m, "listen")["host"] = "localhost" }, nil, `listen.host is "localhost"`},
		{"listen on ::1", func(m map[string]any) { sub(m, "listen")["host"] = "::1" }, nil, `listen.host is "::1"`},
		{"no port", func(m map[string]any) { delete(sub(m, "listen"), "port") }, nil, "listen.port 0"},
		{"port too large", func(m map[string]any) { sub(m, "listen")["port"] = 70000 }, nil, "listen.port 70000"},
		{"no certificate", func(m map[string]any) { delete(sub(m, "tls"), "certificate") }, nil, "tls.certificate is missing"},
		{"key file absent", func(m map[string]any) { sub(m, "tls")["key"] = "absent.key" }, nil, "tls.key"},
		{"http issuer", func(m map[string]any) { sub(m, "provider")["issuer"] = "http://idp.example/realms/main" }, nil, "not an https URL"},
		{"issuer with a fragment", func(m map[string]any) { sub(m, "provider")["issuer"] = "https://idp.example/realms/main#x" }, nil, "query or fragment"},
		{"CA file not PEM", nil, func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, "idp-ca.pem"), []byte("junk"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, "holds no PEM certificate"},
		{"alg none", func(m map[string]any) { sub(m, "provider")["allowedAlgs"] = []string{"RS256", "none"} }, nil, `allowedAlgs names "none"`},
		{"alg HS256", func(m map[string]any) { sub(m, "provider")["allowedAlgs"] = []string{"HS256"} }, nil, `allowedAlgs names "HS256": HMAC`},
		{"alg unknown", func(m map[string]any) { sub(m, "provider")["allowedAlgs"] = []string{"RS1"} }, nil, `allowedAlgs names "RS1"`},
		{"no algs", func(m map[string]any) { sub(m, "provider")["allowedAlgs"] = []string{} }, nil, "allowedAlgs is empty"},
		{"negative refresh", func(m map[string]any) { sub(m, "provider")["jwksRefreshMinSeconds"] = -1 }, nil, "jwksRefreshMinSeconds is -1"},
		{"secret file readable by group", nil, chmod("mcp-adapter-client-secret", 0o640), "has mode 0640"},
		{"secret file readable by all", nil, chmod("mcp-adapter-client-secret", 0o644), "has mode 0644: group and others must have no access"},
		{"TLS key readable by others", nil, chmod("mcp-tls.key", 0o644), "tls.key"},
		{"TLS key writable by group", nil, chmod("mcp-tls.key", 0o620), "has mode 0620: group and others must have no access"},
		{"provider CA file writable by group", nil, chmod("idp-ca.pem", 0o664), "idp-ca.pem has mode 0664: group and others must not be able to write it"},
		{"config writable by group", nil, chmod("mcp-http.json", 0o664), "mcp-http.json has mode 0664: group and others must not be able to write it"},
		{"config writable by others", nil, chmod("mcp-http.json", 0o646), "has mode 0646"},
		{"secret file through a symbolic link", nil, symlinked("mcp-adapter-client-secret"), "a symbolic link, which a secret may not be"},
		{"TLS key through a symbolic link", nil, symlinked("mcp-tls.key"), "a symbolic link, which a secret may not be"},
		{"secret file empty", nil, func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, "mcp-adapter-client-secret"), []byte("\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, "/mcp-adapter-client-secret is empty: it should hold the secret the provider issued to exchange.clientId"},
		{"no client id", func(m map[string]any) { delete(sub(m, "exchange"), "clientId") }, nil, "exchange.clientId is missing"},
		{"no gateway audience", func(m map[string]any) { delete(sub(m, "exchange"), "gatewayAudience") }, nil, "exchange.gatewayAudience is missing"},
		{"maxCallers 0", func(m map[string]any) { m["maxCallers"] = 0 }, nil, "maxCallers is 0"},
		{"empty allowed client", func(m map[string]any) { m["allowedClients"] = []string{"mcp-host", ""} }, nil, `allowedClients has ""`},
		{"negative maxSessions", func(m map[string]any) { m["maxSessions"] = -1 }, nil, "maxSessions (-1) must be 0"},
		{"per-user bound over the total", func(m map[string]any) { m["maxSessionsPerUser"] = 9; m["maxSessions"] = 4 }, nil,
			"maxSessionsPerUser (9) is more than maxSessions (4)"},
		{"negative maxRequestsPerUser", func(m map[string]any) { m["maxRequestsPerUser"] = -1 }, nil, "maxRequestsPerUser (-1) and maxRequests (0) must be 0"},
		{"requests per user over the total", func(m map[string]any) { m["maxRequestsPerUser"] = 20; m["maxRequests"] = 10 }, nil,
			"maxRequestsPerUser (20) is more than maxRequests (10)"},
		{"body budget under one body", func(m map[string]any) { m["maxBodyBytesPerUser"] = 1000 }, nil,
			"maxBodyBytesPerUser is 1000; it must be 0 (the default) or at least 1048576"},
		{"total body budget under one body", func(m map[string]any) { m["maxBodyBytes"] = 1 << 19 }, nil,
			"maxBodyBytes is 524288; it must be 0 (the default) or at least 1048576"},
		{"body bytes per user over the total", func(m map[string]any) { m["maxBodyBytesPerUser"] = 4 << 20; m["maxBodyBytes"] = 2 << 20 }, nil,
			"maxBodyBytesPerUser (4194304) is more than maxBodyBytes (2097152)"},
		{"negative maxListenStreams", func(m map[string]any) { m["maxListenStreams"] = -3 }, nil, "maxListenStreams (-3) must be 0"},
		{"listen streams per user over the total", func(m map[string]any) { m["maxListenStreamsPerUser"] = 9; m["maxListenStreams"] = 4 }, nil,
			"maxListenStreamsPerUser (9) is more than maxListenStreams (4)"},
		{"negative body timeout", func(m map[string]any) { m["bodyTimeoutSeconds"] = -1 }, nil, "bodyTimeoutSeconds is -1; it must be 0 (the default) or 1 to 300"},
		{"body timeout over the bound", func(m map[string]any) { m["bodyTimeoutSeconds"] = 301 }, nil, "bodyTimeoutSeconds is 301"},
		{"scope with a space", func(m map[string]any) { m["requiredScopes"] = []string{"openid profile"} }, nil, "requiredScopes has"},
		{"resource over http", func(m map[string]any) { m["resource"] = "http://127.0.0.1:8443/mcp" }, nil, "not an https URL"},
		{"resource with a query", func(m map[string]any) { m["resource"] = "https://127.0.0.1:8443/mcp?x=1" }, nil, "query or fragment"},
		{"key-set maximum age under the refresh interval", func(m map[string]any) { sub(m, "provider")["jwksMaxAgeSeconds"] = 4 }, nil,
			"provider.jwksMaxAgeSeconds is 4; it must be at least provider.jwksRefreshMinSeconds (5)"},
		{"negative key-set maximum age", func(m map[string]any) { sub(m, "provider")["jwksMaxAgeSeconds"] = -1 }, nil, "jwksMaxAgeSeconds is -1"},
		{"grace under the maximum age", func(m map[string]any) {
			sub(m, "provider")["jwksMaxAgeSeconds"] = 600
			sub(m, "provider")["jwksGraceSeconds"] = 300
		}, nil, "provider.jwksGraceSeconds is 300; it must be at least provider.jwksMaxAgeSeconds (600)"},
		{"grace over a day", func(m map[string]any) { sub(m, "provider")["jwksGraceSeconds"] = 172800 }, nil,
			"provider.jwksGraceSeconds is 172800; keys older than 86400 seconds"},
		{"token lifetime under a minute", func(m map[string]any) { sub(m, "provider")["maxTokenLifetimeSeconds"] = 59 }, nil,
			"provider.maxTokenLifetimeSeconds is 59; it must be between 60 and 2592000"},
		{"token lifetime of 50 years", func(m map[string]any) { sub(m, "provider")["maxTokenLifetimeSeconds"] = 50 * 365 * 86400 }, nil,
			"provider.maxTokenLifetimeSeconds is 1576800000"},
		{"token lifetime as a string", func(m map[string]any) { sub(m, "provider")["maxTokenLifetimeSeconds"] = "86400" }, nil,
			"provider.maxTokenLifetimeSeconds at line 1, column 337: a JSON string where a whole number is wanted"},
		{"token lifetime at the top level", func(m map[string]any) { m["maxTokenLifetimeSeconds"] = 3600 }, nil,
			`maxTokenLifetimeSeconds at line 1, column 176: unknown field`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := configDir(t, tc.edit)
			if tc.prepare != nil {
				tc.prepare(t, filepath.Dir(path))
			}
			_, err := LoadHTTPConfig(path)
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
		})
	}

	t.Run("trailing data", func(t *testing.T) {
		path := configDir(t, nil)
		f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = f.WriteString(`{"again":1}`)
		f.Close()
		if _, err := LoadHTTPConfig(path); err == nil || !strings.HasSuffix(err.Error(), "more after the JSON object; the file holds one object") {
			t.Fatalf("got %v", err)
		}
	})
}

func TestMetadataHandler(t *testing.T) {
	const resource = "https://127.0.0.1:8443/mcp"
	mp, err := MetadataPath(resource)
	if err != nil || mp != "/.well-known/oauth-protected-resource/mcp" {
		t.Fatalf("path %q %v", mp, err)
	}
	srv := httptest.NewUnstartedServer(MetadataHandler(resource, "https://idp.example/realms/main", []string{"openid"}))
	srv.StartTLS()
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + mp)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("%d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"resource":                 resource,
		"authorization_servers":    []any{"https://idp.example/realms/main"},
		"scopes_supported":         []any{"openid"},
		"bearer_methods_supported": []any{"header"},
		"resource_name":            "pdmcp",
	}
	got, _ := json.Marshal(m)
	exp, _ := json.Marshal(want)
	if string(got) != string(exp) {
		t.Errorf("metadata\n got %s\nwant %s", got, exp)
	}

	for _, bad := range []string{"http://127.0.0.1/mcp", "https://127.0.0.1/mcp#f", "https://127.0.0.1/mcp?q", ""} {
		if _, err := MetadataURL(bad); err == nil {
			t.Errorf("resource %q accepted", bad)
		}
	}
	if u, _ := MetadataURL("https://127.0.0.1:8443/"); u != "https://127.0.0.1:8443/.well-known/oauth-protected-resource" {
		t.Errorf("root resource: %q", u)
	}
}

// TestLoadHTTPConfigTracingBlock: a tracing block is read as the OTEL_*
// variables it stands for; absent, the field is nil (tracing follows the
// environment alone).
func TestLoadHTTPConfigTracingBlock(t *testing.T) {
	c, err := LoadHTTPConfig(configDir(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.Tracing != nil {
		t.Fatalf("tracing = %+v without a block", c.Tracing)
	}
	c, err = LoadHTTPConfig(configDir(t, func(m map[string]any) {
		m["tracing"] = map[string]any{"endpoint": "http://127.0.0.1:4318", "serviceName": "pdmcp-a",
			"sampler": "traceidratio", "samplerArg": "0.5", "headers": map[string]string{"api-key": "k"}}
	}))
	if err != nil {
		t.Fatal(err)
	}
	tr := c.Tracing
	if tr == nil || tr.Endpoint != "http://127.0.0.1:4318" || tr.ServiceName != "pdmcp-a" || tr.Sampler != "traceidratio" ||
		tr.SamplerArg != "0.5" || tr.Headers["api-key"] != "k" {
		t.Fatalf("tracing = %+v", tr)
	}
}
