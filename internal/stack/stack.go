// Package stack builds the whole pdmcp stack on 127.0.0.1: the reference
// Gateway and key server (or one already running), the service registered
// at it, the seeded synthetic documents, an OpenID provider (the
// development one, or a running one such as Keycloak) bound at the Gateway
// with the users' identities mapped, a caller-identity grant, and pdmcp
// serving Streamable HTTP over TLS through serve.Run, with every
// certificate issued by one development CA.
//
// `pdmcp dev` (internal/devstack), `pdmcp bench` (internal/bench), the HTTP
// tests and the Keycloak test each build theirs with Start, so provider
// binding, identity mapping and mcp-http.json (WriteHTTPConfig) are written
// once. It is not a deployment: every secret in it is generated locally.
package stack

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/pdmcp/pdmcp/auth"
	"github.com/pdmcp/pdmcp/auth/devidp"
	"github.com/pdmcp/pdmcp/auth/devpki"
	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/reference"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/operator"
	"github.com/pdmcp/pdmcp/internal/serve"
	"github.com/pdmcp/pdmcp/internal/tlspolicy"
)

// Options say what Start builds. Everything it writes lives under Dir; a
// service config and a seed already there are reused, so a second run on
// the same folder serves the same documents.
type Options struct {
	Dir string
	// CA issues the certificates of what the stack serves (and of the
	// Gateway when the stack serves it).
	CA      *devpki.CA
	Logger  *slog.Logger
	Version string

	// Gateway, when set, is a Gateway already running; otherwise the
	// reference Gateway is served from Dir (ServeGateway) on GatewayPort
	// (any free port when 0 or taken).
	Gateway     *Gateway
	GatewayPort int

	// ServiceName is the name the service registers under.
	ServiceName string
	// SeedTag and SeedUsers are the seed's (operator.Seed): user u's
	// principal is Principal(u).
	SeedTag   string
	SeedUsers []operator.SeedUser

	// Provider, when set, is an OpenID provider already running (a
	// Keycloak); otherwise the development provider is served as DevIdP
	// says.
	Provider *Provider
	DevIdP   DevIdP
	// Identities maps the provider's subjects to the seed users they act
	// as; the Gateway maps each.
	Identities map[string]string

	// FileRoot makes files/ in Dir the grant's file root, with the file
	// tools allowed.
	FileRoot bool
	// Prepare runs after the seed and before the grant: the caller adds
	// its documents, destinations and steps.
	Prepare func(ctx context.Context, st *Stack) error
	// Grant changes the grant's launch options (every approved document,
	// caller identity, one hour) before the launch.
	Grant func(*grant.LaunchOptions)
	// MCPPort is pdmcp's port (any free port when 0 or taken).
	MCPPort int
	// HTTP changes mcp-http.json before it is written.
	HTTP func(*auth.HTTPConfig)
	// Serve changes serve.Run's options before the start.
	Serve func(*serve.Options)
}

// Gateway is a running Gateway and its administrator.
type Gateway struct {
	URL               string
	TrustFile         string // the CA its TLS certificate chains to
	AdminUser         string
	AdminPasswordFile string
}

// Provider is the OpenID provider pdmcp trusts and the Gateway is bound to.
type Provider struct {
	Issuer string
	CAFile string // the only trust for its TLS
	// ClientID and ClientSecret are pdmcp's as the provider's confidential
	// client (devidp.DefaultAdapterClientID when empty).
	ClientID     string
	ClientSecret string
	// GatewayAudience is what token exchange asks for
	// (devidp.DefaultGatewayAudience when empty).
	GatewayAudience string
}

// DevIdP configures the development provider the stack serves.
type DevIdP struct {
	Users               []devidp.User
	Port                int // any free port when 0 or taken
	AccessTokenLifetime time.Duration
	// StateDir keeps its keys and sign-ins across restarts (see
	// devidp.Config.StateDir); none when empty.
	StateDir string
	// Handler, when set, wraps the provider's handler (to count requests).
	Handler func(http.Handler) http.Handler
	// Now is the provider's clock (devidp.Config.Now; time.Now when nil),
	// for a test that moves time by hand.
	Now func() time.Time
}

// Stack is a running stack.
type Stack struct {
	o  Options
	CA *devpki.CA
	// Gateway is the reference Gateway when the stack serves it.
	Gateway    *reference.Server
	GatewayURL string
	// GatewayTrustFile is what clients of the Gateway trust.
	GatewayTrustFile  string
	AdminUser         string
	AdminPasswordFile string
	Provider          Provider
	// IdP is the development provider when the stack serves it.
	IdP *devidp.Provider
	// HC trusts the stack's CA only.
	HC *http.Client

	Service      *gateway.ServiceConfig
	ServicePath  string // config.json
	Seed         *grant.SeedRecord
	Data         string // the seed's folder
	ManifestPath string
	GrantPath    string
	AuditPath    string
	FileRoot     string
	// HTTPConfigPath is mcp-http.json; MCPURL is where pdmcp serves it.
	HTTPConfigPath string
	MCPURL         string

	httpCfg auth.HTTPConfig // mcp-http.json as made, its paths absolute
	twins   []func()        // StartTwin's stops
	closers []func()
	cancel  context.CancelFunc
	done    chan error
	err     error
}

// Start builds the stack and returns once pdmcp serves; it serves until
// ctx ends or Close. On an error everything started is stopped.
func Start(ctx context.Context, o Options) (*Stack, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	st := &Stack{o: o, CA: o.CA, HC: &http.Client{Transport: &http.Transport{
		TLSClientConfig: TLSConfig(o.CA), MaxIdleConnsPerHost: 64}}}
	for _, step := range []func(context.Context) error{st.startGateway, st.startProvider, st.provision, st.startMCP} {
		if err := step(ctx); err != nil {
			st.Close()
			return nil, err
		}
	}
	return st, nil
}

// Principal is seed user user's principal name.
func (st *Stack) Principal(user string) string {
	return strings.TrimSuffix(st.Seed.AgentUser, "agent") + user
}

// Wait returns serve.Run's result once pdmcp has stopped (ctx ended).
func (st *Stack) Wait() error {
	if st.done != nil {
		st.err = <-st.done
		st.done, st.cancel = nil, nil
	}
	return st.err
}

// StopMCP stops pdmcp (which revokes every caller's Gateway session while
// the Gateway still serves) and returns serve.Run's result.
func (st *Stack) StopMCP() error {
	if st.cancel != nil {
		st.cancel()
	}
	return st.Wait()
}

// Close stops pdmcp (its twins too) first, then the provider and the Gateway.
func (st *Stack) Close() {
	for _, stop := range st.twins {
		stop()
	}
	st.twins = nil
	_ = st.StopMCP()
	for i := len(st.closers) - 1; i >= 0; i-- {
		st.closers[i]()
	}
	st.closers = nil
}

// startGateway serves the reference Gateway, unless one was given. It
// outlives ctx until pdmcp has revoked its sessions; Close stops it.
func (st *Stack) startGateway(ctx context.Context) error {
	if g := st.o.Gateway; g != nil {
		st.GatewayURL, st.GatewayTrustFile, st.AdminUser, st.AdminPasswordFile = g.URL, g.TrustFile, g.AdminUser, g.AdminPasswordFile
		return nil
	}
	gwCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	st.closers = append(st.closers, cancel)
	gw, pwFile, err := ServeGateway(gwCtx, st.o.Dir, st.CA, st.o.GatewayPort, st.o.Logger.With("component", "gateway"))
	if err != nil {
		return err
	}
	st.closers = append(st.closers, func() { gw.Close() })
	st.Gateway, st.GatewayURL, st.GatewayTrustFile = gw, gw.URL, st.CA.CertPEM
	st.AdminUser, st.AdminPasswordFile = "admin", pwFile
	return nil
}

// startProvider serves the development provider, unless one was given.
func (st *Stack) startProvider(ctx context.Context) error {
	if p := st.o.Provider; p != nil {
		st.Provider = *p
		st.Provider.ClientID = cmp.Or(p.ClientID, devidp.DefaultAdapterClientID)
		st.Provider.GatewayAudience = cmp.Or(p.GatewayAudience, devidp.DefaultGatewayAudience)
		return nil
	}
	d := st.o.DevIdP
	dir, cert, key, err := issue(st.CA, st.o.Dir, "idp")
	if err != nil {
		return err
	}
	secret, err := secretFile(filepath.Join(dir, "adapter-client-secret"))
	if err != nil {
		return err
	}
	ln, err := listen(d.Port)
	if err != nil {
		return err
	}
	issuer := "https://" + ln.Addr().String()
	idp, err := devidp.New(ctx, devidp.Config{Issuer: issuer, Users: d.Users, AdapterClientSecret: secret,
		AccessTokenLifetime: d.AccessTokenLifetime, StateDir: d.StateDir, Now: d.Now, Logger: st.o.Logger.With("component", "idp")})
	if err != nil {
		ln.Close()
		return err
	}
	var h http.Handler = idp
	if d.Handler != nil {
		h = d.Handler(h)
	}
	pair, err := tlspolicy.LoadKeyPair(cert, key)
	if err != nil {
		ln.Close()
		idp.Close()
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, TLSConfig: tlspolicy.Server(pair)}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	st.closers = append(st.closers, func() { srv.Close(); idp.Close() })
	st.IdP = idp
	st.Provider = Provider{Issuer: issuer, CAFile: st.CA.CertPEM, ClientID: devidp.DefaultAdapterClientID,
		ClientSecret: secret, GatewayAudience: devidp.DefaultGatewayAudience}
	return nil
}

// provision registers the service and seeds it (or reuses both), runs
// Prepare, binds the provider, maps the identities and writes a fresh
// grant.
func (st *Stack) provision(ctx context.Context) error {
	if err := st.service(ctx); err != nil {
		return err
	}
	if err := st.seed(ctx); err != nil {
		return err
	}
	if st.o.FileRoot {
		root, err := fileRoot(st.o.Dir)
		if err != nil {
			return err
		}
		st.FileRoot = root
	}
	if st.o.Prepare != nil {
		if err := st.o.Prepare(ctx, st); err != nil {
			return err
		}
	}
	if err := st.bindProvider(ctx); err != nil {
		return err
	}
	return st.launchGrant()
}

// service registers the service, or reuses the config.json of an earlier
// run (with the Gateway's URL as it is now).
func (st *Stack) service(ctx context.Context) error {
	st.ServicePath = filepath.Join(st.o.Dir, "config.json")
	sc, err := gateway.LoadServiceConfig(st.ServicePath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		sc, err = operator.Bootstrap(ctx, operator.BootstrapOptions{GatewayURL: st.GatewayURL, TrustFile: st.GatewayTrustFile,
			AdminUser: st.AdminUser, AdminPasswordFile: st.AdminPasswordFile, ServiceName: st.o.ServiceName, AllowScoped: true,
			CredentialsDir: filepath.Join(st.o.Dir, "service"), ConfigOut: st.ServicePath})
		if err != nil {
			return fmt.Errorf("bootstrap: %w", err)
		}
	case err != nil:
		return err
	case sc.GatewayURL != st.GatewayURL:
		sc.GatewayURL = st.GatewayURL
		if err := gateway.WriteServiceConfig(st.ServicePath, sc); err != nil {
			return err
		}
	}
	st.Service = sc
	return nil
}

// seed seeds the documents and users, or reuses an earlier run's seed.
func (st *Stack) seed(ctx context.Context) error {
	st.Data = filepath.Join(st.o.Dir, "task-data")
	st.ManifestPath = filepath.Join(st.Data, "manifest.json")
	st.GrantPath = filepath.Join(st.Data, "grant.json")
	st.AuditPath = filepath.Join(st.Data, "audit.jsonl")
	recordPath := filepath.Join(st.Data, "seed-record.json")
	rec, err := grant.LoadSeedRecord(recordPath)
	if _, merr := os.Lstat(st.ManifestPath); err == nil && errors.Is(merr, fs.ErrNotExist) {
		// An earlier seed stopped before its manifest.
		if err := st.removeStoppedSeed(ctx, recordPath); err != nil {
			return err
		}
		err = fs.ErrNotExist
	}
	if errors.Is(err, fs.ErrNotExist) {
		rec, err = operator.Seed(ctx, operator.SeedOptions{Config: st.Service, OutDir: st.Data, Tag: st.o.SeedTag, Users: st.o.SeedUsers})
		if err != nil {
			return fmt.Errorf("seed: %w", err)
		}
	} else if err != nil {
		return err
	}
	st.Seed = rec
	return nil
}

// removeStoppedSeed undoes a seed that stopped before its manifest: what
// its record says it made at the Gateway, then the files a seed writes
// (its record and its documents' first versions), one by one, so that the
// folder can be seeded again. A folder that holds anything else (a
// journal, saved results, an audit file, protect's sections: the marks of
// a task that ran, whose manifest was lost) is not a stopped seed: nothing
// is removed, at the Gateway or on disk, and the operator is told what to
// do. The stack never removes a folder it did not create in this run.
func (st *Stack) removeStoppedSeed(ctx context.Context, recordPath string) error {
	seedFiles, others, err := stoppedSeedFiles(st.Data)
	if err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	if len(others) > 0 {
		return fmt.Errorf("seed: %s has a seed record but no manifest.json, and it holds what a stopped seed never leaves (%s): "+
			"a task ran here and its manifest is gone; nothing was removed; restore manifest.json from a backup, "+
			"or move the folder away to start afresh", st.Data, strings.Join(others, ", "))
	}
	if err := operator.Cleanup(ctx, st.Service, recordPath); err != nil {
		return fmt.Errorf("seed: an earlier seed in %s stopped part-way, and removing what it made failed: %w", st.Data, err)
	}
	st.o.Logger.Warn("an earlier seed stopped part-way; removed what it made, seeding again", "folder", st.Data)
	for _, rel := range seedFiles {
		if err := os.Remove(filepath.Join(st.Data, rel)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("seed: %w", err)
		}
	}
	return nil
}

// stoppedSeedFiles sorts what dir holds into the files a seed writes before
// its manifest and everything else, each relative to dir. The seed's files
// are in the order to remove them: the documents' first versions, their
// folder, and last the record and its lock file, so a stop part-way still
// leaves the record that names the rest.
func stoppedSeedFiles(dir string) (seedFiles, others []string, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	var hasDocuments bool
	var record []string
	for _, e := range entries {
		switch name := e.Name(); {
		case (name == "seed-record.json" || name == "seed-record.json.lock") && e.Type().IsRegular():
			record = append(record, name)
		case name == "documents" && e.IsDir():
			hasDocuments = true
		default:
			others = append(others, name)
		}
	}
	if !hasDocuments {
		return record, others, nil
	}
	docs, err := os.ReadDir(filepath.Join(dir, "documents"))
	if err != nil {
		return nil, nil, err
	}
	for _, e := range docs {
		rel := filepath.Join("documents", e.Name())
		if e.Type().IsRegular() && strings.HasSuffix(e.Name(), ".v1.bin") {
			seedFiles = append(seedFiles, rel)
			continue
		}
		others = append(others, rel)
	}
	seedFiles = append(seedFiles, "documents")
	return append(seedFiles, record...), others, nil
}

// bindProvider binds the provider for the service (its issuer may have
// changed since an earlier run) and maps each identity.
func (st *Stack) bindProvider(ctx context.Context) error {
	caPEM, err := os.ReadFile(st.Provider.CAFile)
	if err != nil {
		return err
	}
	pw, err := os.ReadFile(st.AdminPasswordFile)
	if err != nil {
		return err
	}
	c, err := gateway.New(gateway.Config{BaseURL: st.GatewayURL, TrustFile: st.GatewayTrustFile})
	if err != nil {
		return err
	}
	admin := c.Admin(st.AdminUser, strings.TrimSpace(string(pw)))
	p := st.Provider
	if err := admin.BindProvider(ctx, api.BindProviderRequest{ServiceID: st.Service.ServiceID, Issuer: p.Issuer,
		Audience: p.GatewayAudience, AllowedClient: p.ClientID, CAPEM: string(caPEM)}); err != nil {
		return fmt.Errorf("bind the provider: %w", err)
	}
	for _, subject := range slices.Sorted(maps.Keys(st.o.Identities)) {
		user := st.o.Identities[subject]
		if err := admin.MapIdentity(ctx, api.MapIdentityRequest{ServiceID: st.Service.ServiceID, Issuer: p.Issuer,
			Subject: subject, Principal: st.Principal(user)}); err != nil {
			return fmt.Errorf("map %s: %w", user, err)
		}
	}
	return nil
}

// launchGrant writes a fresh grant (each caller acting as themselves) and
// gives it the file tools on the file root.
func (st *Stack) launchGrant() error {
	lo := grant.LaunchOptions{ManifestPath: st.ManifestPath, AllApproved: true, CallerIdentity: true,
		TTL: time.Hour, Out: st.GrantPath}
	if st.o.Grant != nil {
		st.o.Grant(&lo)
	}
	if err := os.Remove(lo.Out); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if _, err := grant.Launch(lo); err != nil {
		return err
	}
	st.GrantPath, st.ManifestPath = lo.Out, lo.ManifestPath
	if st.FileRoot == "" {
		return nil
	}
	return addFileTools(st.GrantPath, st.FileRoot)
}

// startMCP writes mcp-http.json and starts serve.Run on its listener.
func (st *Stack) startMCP(ctx context.Context) error {
	_, cert, key, err := issue(st.CA, st.o.Dir, "mcp")
	if err != nil {
		return err
	}
	secretPath := filepath.Join(st.o.Dir, "idp", "adapter-client-secret")
	if err := os.MkdirAll(filepath.Dir(secretPath), 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(secretPath, []byte(st.Provider.ClientSecret+"\n"), 0o600); err != nil {
		return err
	}
	ln, err := listen(st.o.MCPPort)
	if err != nil {
		return err
	}
	cfg := auth.HTTPConfig{
		Listen:   auth.ListenConfig{Host: auth.ListenHost, Port: ln.Addr().(*net.TCPAddr).Port},
		TLS:      auth.TLSConfig{Certificate: cert, Key: key},
		Provider: auth.ProviderConfig{Issuer: st.Provider.Issuer, CAFile: st.Provider.CAFile, AllowedAlgs: []string{"ES256", "RS256"}, JWKSRefreshMinSeconds: 5},
		Exchange: auth.ExchangeConfig{ClientID: st.Provider.ClientID, ClientSecretFile: secretPath,
			GatewayAudience: st.Provider.GatewayAudience},
		RequiredScopes: []string{"openid"},
		MaxCallers:     8,
	}
	if st.o.HTTP != nil {
		st.o.HTTP(&cfg)
	}
	st.HTTPConfigPath, st.httpCfg = filepath.Join(st.o.Dir, "mcp-http.json"), cfg
	if err := WriteHTTPConfig(st.HTTPConfigPath, cfg); err != nil {
		ln.Close()
		return err
	}
	u, cancel, done, err := st.runMCP(ctx, ln, st.HTTPConfigPath, st.AuditPath, "mcp", nil)
	if err != nil {
		return err
	}
	st.MCPURL, st.cancel, st.done = u, cancel, done
	return nil
}

// runMCP runs serve.Run on ln with the stack's files, cfgPath and
// auditPath, the stack's Serve option and then edit applied, until ctx
// ends or cancel; done gives serve.Run's result. It returns once pdmcp
// serves, with its MCP URL, or with the error it stopped with.
func (st *Stack) runMCP(ctx context.Context, ln net.Listener, cfgPath, auditPath, component string,
	edit func(*serve.Options)) (url string, cancel context.CancelFunc, done chan error, err error) {
	ready := make(chan string, 1)
	so := serve.Options{ConfigPath: st.ServicePath, ManifestPath: st.ManifestPath, GrantPath: st.GrantPath,
		AuditPath: auditPath, HTTPConfigPath: cfgPath, Version: st.o.Version, Listener: ln,
		Logger: st.o.Logger.With("component", component), Ready: func(u string) { ready <- u }}
	if st.o.Serve != nil {
		st.o.Serve(&so)
	}
	if edit != nil {
		edit(&so)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done = make(chan error, 1)
	go func() { done <- serve.Run(runCtx, so) }()
	select {
	case url = <-ready:
		return url, cancel, done, nil
	case err := <-done:
		cancel()
		return "", nil, nil, err
	}
}

// StartTwin starts a second pdmcp beside the first, as a second process on
// the same host would run: the same service, manifest, grant, journal and
// provider, its own port (mcp-http-<name>.json) and its own audit file
// (audit-<name>.jsonl beside the first's). edit changes its serve.Run
// options (a benchmark traces one and not the other, to price tracing in
// the same rounds). It returns the twin's MCP URL; Close stops it first.
func (st *Stack) StartTwin(ctx context.Context, name string, edit func(*serve.Options)) (string, error) {
	ln, err := listen(0)
	if err != nil {
		return "", err
	}
	cfg := st.httpCfg
	cfg.Listen.Port, cfg.Resource = ln.Addr().(*net.TCPAddr).Port, ""
	cfgPath := filepath.Join(st.o.Dir, "mcp-http-"+name+".json")
	if err := WriteHTTPConfig(cfgPath, cfg); err != nil {
		ln.Close()
		return "", err
	}
	u, cancel, done, err := st.runMCP(ctx, ln, cfgPath, filepath.Join(filepath.Dir(st.AuditPath), "audit-"+name+".jsonl"),
		"mcp-"+name, edit)
	if err != nil {
		return "", fmt.Errorf("pdmcp %s: %w", name, err)
	}
	st.twins = append(st.twins, func() { cancel(); <-done })
	return u, nil
}
