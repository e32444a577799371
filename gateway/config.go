package gateway

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/pdmcp/pdmcp/internal/safefile"
	"github.com/pdmcp/pdmcp/internal/strictjson"
)

// DefaultTimeout bounds one request when Config.Timeout is zero.
const DefaultTimeout = 30 * time.Second

// Config says which Gateway to reach, how to trust it and, for the calls
// that need a service session, who the service is. The service credentials
// are given either as files or already loaded (tests), all three or none: a
// client without them can still run the admin routes.
type Config struct {
	// BaseURL is the Gateway's URL, e.g. https://gateway.example:8443. Routes
	// are appended to its path.
	BaseURL string
	// TrustFile is a PEM file of CA certificates. When set, only these are
	// trusted, not the system roots.
	TrustFile string
	// AllowHTTPLoopback permits a plain http:// BaseURL whose host is a
	// loopback address or "localhost". Otherwise only https is used.
	AllowHTTPLoopback bool

	ServiceCertFile string // PEM certificate the service registered
	LoginKeyFile    string // PEM key of ServiceCertFile (P-256 ECDSA or RSA)
	SenderKeyFile   string // PEM P-256 key the service's proofs are signed with
	// Prefix is the service's principal prefix (config.json's "prefix"):
	// every minted scoped session must act inside it. When empty, the
	// prefix the service's sign-in answers is used instead.
	Prefix string

	ServiceCert *x509.Certificate // instead of ServiceCertFile
	LoginKey    crypto.Signer     // instead of LoginKeyFile
	SenderKey   *ecdsa.PrivateKey // instead of SenderKeyFile

	// Timeout bounds each request (DefaultTimeout when zero); the caller's
	// context bounds the whole call.
	Timeout time.Duration
	// Logger gets one line per request (route, status, code, latency).
	// Nil discards.
	Logger *slog.Logger
	// Tracer, when set, makes a CLIENT span of each request (route, status,
	// refusal code) and sends its W3C trace context to the Gateway; nil
	// traces nothing and sends no trace headers.
	Tracer trace.Tracer
	// HTTPClient replaces the client built from TrustFile; its transport
	// then decides what is trusted. Redirects are never followed either way.
	HTTPClient *http.Client
}

// ServiceConfig is the operator's config.json: where the Gateway is, how to
// trust it, and the registered service's files and identity. File paths in
// the file are relative to the file; LoadServiceConfig makes them absolute.
type ServiceConfig struct {
	GatewayURL        string `json:"gatewayUrl"`
	TrustFile         string `json:"trustFile,omitempty"`
	AllowHTTPLoopback bool   `json:"allowHttpLoopback,omitempty"`
	ServiceCert       string `json:"serviceCert"`
	ServiceLoginKey   string `json:"serviceLoginKey"`
	SenderKey         string `json:"senderKey"`
	ServiceID         string `json:"serviceId"`
	SystemID          int64  `json:"systemId"`
	Prefix            string `json:"prefix"`
}

// ClientConfig is the Config for a client acting as this service. Logger,
// Timeout and HTTPClient are left for the caller.
func (sc *ServiceConfig) ClientConfig() Config {
	return Config{
		BaseURL:           sc.GatewayURL,
		TrustFile:         sc.TrustFile,
		AllowHTTPLoopback: sc.AllowHTTPLoopback,
		ServiceCertFile:   sc.ServiceCert,
		LoginKeyFile:      sc.ServiceLoginKey,
		SenderKeyFile:     sc.SenderKey,
		Prefix:            sc.Prefix,
	}
}

// ConfigError names the config.json field that is missing or bad:
// "<path>: <field>: <problem>", the wording of every operator file.
type ConfigError struct {
	Path  string // the file
	Field string // its JSON name; "" for the file as a whole
	Err   error
	// named: Err names the file itself (a refusal of its mode, its JSON
	// or its emptiness), so the message is Err's alone.
	named bool
}

func (e *ConfigError) Error() string {
	switch {
	case e.named:
		return e.Err.Error()
	case e.Field == "":
		return fmt.Sprintf("%s: %v", e.Path, e.Err)
	}
	return fmt.Sprintf("%s: %s: %v", e.Path, e.Field, e.Err)
}

func (e *ConfigError) Unwrap() error { return e.Err }

// errMissing is the cause of a ConfigError for a field that is absent.
var errMissing = errors.New("missing; it is required")

// ServiceConfigHolds is what config.json holds, for the refusal of an
// empty file.
const ServiceConfigHolds = "the service's settings as a JSON object (pdmcp bootstrap writes it)"

// LoadServiceConfig reads and checks a config.json. It refuses unknown
// fields, member names in another case and names given twice
// (internal/strictjson), names the first field that is missing or bad,
// resolves file paths against the file's directory and checks that those
// files exist. Every refusal is a [*ConfigError] naming the file as path
// names it.
func LoadServiceConfig(path string) (*ServiceConfig, error) {
	// It names the Gateway, the trust file and the service's keys: a file
	// group or others can write could point the server elsewhere.
	data, err := safefile.ReadConfig(path, 0)
	if err != nil {
		return nil, &ConfigError{Path: path, Err: err, named: true}
	}
	var sc ServiceConfig
	if err := (strictjson.File{Path: path, Holds: ServiceConfigHolds}).Decode(data, &sc); err != nil {
		return nil, &ConfigError{Path: path, Err: err, named: true}
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, &ConfigError{Path: path, Err: err}
	}
	dir := filepath.Dir(abs)
	for _, p := range []*string{&sc.TrustFile, &sc.ServiceCert, &sc.ServiceLoginKey, &sc.SenderKey} {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
	if err := sc.check(path, true); err != nil {
		return nil, err
	}
	return &sc, nil
}

// WriteServiceConfig checks cfg and writes it to path with mode 0600,
// atomically: a reader sees the old file or the new one, never a part.
func WriteServiceConfig(path string, cfg *ServiceConfig) error {
	if cfg == nil {
		return &ConfigError{Path: path, Err: errors.New("nothing to write")}
	}
	if err := cfg.check(path, false); err != nil {
		return err
	}
	data, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return &ConfigError{Path: path, Err: err}
	}
	data = append(data, '\n')
	if err := writeFileAtomic(path, data); err != nil {
		return &ConfigError{Path: path, Err: err}
	}
	return nil
}

// check validates the fields; with files it also checks that the named
// files exist (LoadServiceConfig, after resolving them).
func (sc *ServiceConfig) check(path string, files bool) error {
	bad := func(field string, err error) error { return &ConfigError{Path: path, Field: field, Err: err} }
	if strings.TrimSpace(sc.GatewayURL) == "" {
		return bad("gatewayUrl", errMissing)
	}
	if _, err := parseBaseURL(sc.GatewayURL, sc.AllowHTTPLoopback); err != nil {
		return bad("gatewayUrl", err)
	}
	required := []struct {
		field, value string
	}{
		{"serviceCert", sc.ServiceCert},
		{"serviceLoginKey", sc.ServiceLoginKey},
		{"senderKey", sc.SenderKey},
		{"serviceId", sc.ServiceID},
		{"prefix", sc.Prefix},
	}
	for _, r := range required {
		if strings.TrimSpace(r.value) == "" {
			return bad(r.field, errMissing)
		}
	}
	if sc.SystemID <= 0 {
		if sc.SystemID == 0 {
			return bad("systemId", errMissing)
		}
		return bad("systemId", fmt.Errorf("%d is not a system id; it must be positive", sc.SystemID))
	}
	if !files {
		return nil
	}
	for _, f := range []struct {
		field, path string
	}{
		{"trustFile", sc.TrustFile},
		{"serviceCert", sc.ServiceCert},
		{"serviceLoginKey", sc.ServiceLoginKey},
		{"senderKey", sc.SenderKey},
	} {
		if f.path == "" {
			continue
		}
		fi, err := os.Stat(f.path)
		if err != nil {
			return bad(f.field, err)
		}
		if !fi.Mode().IsRegular() {
			return bad(f.field, fmt.Errorf("%s is not a regular file", f.path))
		}
	}
	return nil
}

// writeFileAtomic writes data to a temporary file beside path and renames
// it into place.
func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if err := f.Chmod(0o600); err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	ok = true
	return nil
}

// parseBaseURL checks a Gateway URL: absolute https, or http on a loopback
// host when allowed; no user, query or fragment. The path loses its
// trailing slash so that routes can be appended.
func parseBaseURL(raw string, allowHTTPLoopback bool) (*url.URL, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		return nil, fmt.Errorf("not a URL: %w", err)
	}
	if u.Host == "" || u.Opaque != "" {
		return nil, fmt.Errorf("%q is not an absolute URL with a host", raw)
	}
	if u.User != nil {
		return nil, errors.New("must not carry a user or password")
	}
	if u.RawQuery != "" || u.Fragment != "" || u.ForceQuery {
		return nil, errors.New("must not carry a query or fragment")
	}
	switch strings.ToLower(u.Scheme) {
	case "https":
	case "http":
		if !allowHTTPLoopback {
			return nil, errors.New("plain http is refused; use https, or allow http on a loopback address explicitly")
		}
		if !isLoopbackHost(u.Hostname()) {
			return nil, fmt.Errorf("plain http is allowed only to a loopback address, not %q", u.Hostname())
		}
	default:
		return nil, fmt.Errorf("scheme %q is not https", u.Scheme)
	}
	u.Scheme = strings.ToLower(u.Scheme)
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	return u, nil
}

// isLoopbackHost is true for "localhost" and loopback IP literals. Other
// names are not resolved: what a name resolves to can change.
func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
