package bench

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/auth/devidp"
	"github.com/pdmcp/pdmcp/auth/devpki"
	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/reference"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/devstack"
	"github.com/pdmcp/pdmcp/internal/operator"
	"github.com/pdmcp/pdmcp/internal/serve"
)

// DocumentID is the 4 KiB document the read figures use.
const DocumentID = "bench-4k"

// DocumentBytes is its size.
const DocumentBytes = 4096

// Destination is where the save figure writes.
const Destination = operator.SeedDestination

// P6's destinations, under Destination's key: one with no history, one
// given 50,000 earlier versions in the record.
const (
	FreshDestination   = "p6-none"
	HistoryDestination = "p6-history"
)

// BigFile is the file root's 16,777,215-byte file of the encrypt_file figure.
const BigFile = "big.bin"

const adapterSecret = "bench-adapter-secret"

// StackOptions configure a Stack.
type StackOptions struct {
	Dir string // the state folder; everything lives under it
	// Users is how many distinct development users are made; each is
	// mapped to the one reader principal, which may read every document
	// and save to the destination.
	Users      int
	MaxCallers int
	// NonDurableJournal opens pdmcp's journal without fsync (see
	// serve.Options.NonDurableJournalForBenchmarks).
	NonDurableJournal bool
	// BigFile writes the 16,777,215-byte file in the file root.
	BigFile bool
	// Mixed maps the users to three principals in turn (see Principals)
	// instead of all to the reader, for tests that check who reads what.
	Mixed  bool
	Logger *slog.Logger
}

// Stack is everything a figure measures, on 127.0.0.1: the reference
// Gateway, the development provider, pdmcp over HTTPS, and a bare go-sdk
// server with one no-op tool behind the same TLS and a bearer check.
type Stack struct {
	o       StackOptions
	ca      *devpki.CA
	GW      *reference.Server
	Issuer  string
	HC      *http.Client // trusts the stack's CA only
	MCPURL  string
	BareURL string
	// BareToken is the bare server's bearer token.
	BareToken string
	Service   *gateway.ServiceConfig
	Reader    string // the reader principal
	Manifest  *grant.Manifest
	FileRoot  string
	users     []devidp.User

	// idpRequests counts every request the provider received.
	idpRequests atomic.Int64

	closers []func()
	runDone chan error
	cancel  context.CancelFunc
}

// Principals are the seed's users: the reader (the 4 KiB document, two
// seeded ones, the destination), partial (one other seeded document) and
// none (nothing at the key server).
var Principals = []string{"reader", "partial", "none"}

var principalDocs = map[string][]string{
	"reader":  {"proposal-aurora", "evaluation-criteria"},
	"partial": {"proposal-borealis"},
}

// PrincipalOf is the seed user user i is mapped to.
func (st *Stack) PrincipalOf(i int) string {
	if !st.o.Mixed {
		return "reader"
	}
	return Principals[i%len(Principals)]
}

// MayRead says whether user i's principal holds READ on document id.
func (st *Stack) MayRead(i int, id string) bool {
	p := st.PrincipalOf(i)
	if id == DocumentID {
		return p == "reader"
	}
	for _, d := range principalDocs[p] {
		if d == id {
			return true
		}
	}
	return false
}

// UserName is the i-th bench user's name.
func UserName(i int) string { return fmt.Sprintf("u%04d", i) }

func userPassword(i int) string { return fmt.Sprintf("pw-%04d", i) }

// StartStack starts the stack; Close stops it.
func StartStack(ctx context.Context, o StackOptions) (st *Stack, err error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MaxCallers == 0 {
		o.MaxCallers = 8
	}
	st = &Stack{o: o}
	defer func() {
		if err != nil {
			st.Close()
		}
	}()
	if st.ca, err = devpki.LoadOrCreateCA(filepath.Join(o.Dir, "ca"), "pdmcp bench"); err != nil {
		return nil, err
	}
	st.HC = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: st.ca.Pool()},
		MaxIdleConnsPerHost: 64}}

	gwCtx, gwCancel := context.WithCancel(context.WithoutCancel(ctx))
	st.closers = append(st.closers, gwCancel)
	gw, pwFile, err := devstack.ServeGateway(gwCtx, o.Dir, st.ca, 0, o.Logger.With("component", "gateway"))
	if err != nil {
		return nil, err
	}
	st.GW = gw
	st.closers = append(st.closers, func() { gw.Close() })

	// The provider.
	idpLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	st.Issuer = "https://" + idpLn.Addr().String()
	for i := range o.Users {
		st.users = append(st.users, devidp.User{Username: UserName(i), Password: userPassword(i)})
	}
	idp, err := devidp.New(ctx, devidp.Config{Issuer: st.Issuer, Users: st.users, AdapterClientSecret: adapterSecret,
		AccessTokenLifetime: 2 * time.Hour, Logger: o.Logger.With("component", "idp")})
	if err != nil {
		idpLn.Close()
		return nil, err
	}
	idpCert, idpKey, err := st.ca.Issue(filepath.Join(o.Dir, "ca"), "idp")
	if err != nil {
		idpLn.Close()
		return nil, err
	}
	idpSrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st.idpRequests.Add(1)
		idp.ServeHTTP(w, r)
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = idpSrv.ServeTLS(idpLn, idpCert, idpKey) }()
	st.closers = append(st.closers, func() { idpSrv.Close(); idp.Close() })

	if err := st.provision(ctx, pwFile); err != nil {
		return nil, err
	}
	if err := st.startPDMCP(ctx); err != nil {
		return nil, err
	}
	if err := st.startBare(); err != nil {
		return nil, err
	}
	return st, nil
}

// provision registers the service, seeds the data with the reader, adds
// the 4 KiB document, maps every user to the reader and writes the grant.
func (st *Stack) provision(ctx context.Context, pwFile string) error {
	dir := st.o.Dir
	cfgPath := filepath.Join(dir, "config.json")
	sc, err := operator.Bootstrap(ctx, operator.BootstrapOptions{GatewayURL: st.GW.URL, TrustFile: st.ca.CertPEM,
		AdminUser: "admin", AdminPasswordFile: pwFile, ServiceName: "pdmcp-bench", AllowScoped: true,
		CredentialsDir: filepath.Join(dir, "service"), ConfigOut: cfgPath})
	if err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	st.Service = sc
	data := filepath.Join(dir, "task-data")
	rec, err := operator.Seed(ctx, operator.SeedOptions{Config: sc, OutDir: data, Tag: "b",
		Users: []operator.SeedUser{{Name: "reader", Documents: principalDocs["reader"], Save: true},
			{Name: "partial", Documents: principalDocs["partial"]}, {Name: "none"}}})
	if err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	st.Reader = sc.Prefix + "b.reader"
	c, err := gateway.New(sc.ClientConfig())
	if err != nil {
		return err
	}
	if err := c.SignIn(ctx); err != nil {
		return err
	}
	// The 4 KiB document, made by the seed's owner and readable by the reader.
	owner, err := c.Mint(ctx, gateway.MintRequest{ActingAs: rec.OwnerUser, TTL: api.MaxScopedTTL})
	if err != nil {
		return err
	}
	defer owner.Revoke(context.WithoutCancel(ctx))
	text := []byte(strings.Repeat("Synthetic benchmark text; nothing in it is real.\n", DocumentBytes/49+1)[:DocumentBytes])
	iv := make([]byte, api.IVBytes)
	if _, err := rand.Read(iv); err != nil {
		return err
	}
	enc, err := owner.Encrypt(ctx, gateway.EncryptInput{IV: iv, Plaintext: text})
	if err != nil {
		return err
	}
	reader, err := c.GetPrincipal(ctx, st.Reader)
	if err != nil {
		return err
	}
	if err := owner.ACLGrant(ctx, api.ACLGrantRequest{TTag: enc.TTag, SystemID: reader.SystemID,
		PrincipalID: reader.PrincipalID, Rights: []string{api.RightRead}}); err != nil {
		return err
	}
	manifestPath := filepath.Join(data, "manifest.json")
	rel := "documents/" + DocumentID + ".v1.bin"
	if err := os.WriteFile(filepath.Join(data, rel), enc.Ciphertext, 0o600); err != nil {
		return err
	}
	sum := sha256.Sum256(text)
	if _, err := grant.UpdateManifest(ctx, manifestPath, func(m *grant.Manifest) error {
		if m.Documents == nil {
			m.Documents = map[string]grant.Document{}
		}
		m.Documents[DocumentID] = grant.Document{Label: "Benchmark text (4 KiB)", Category: "benchmark", Approved: true,
			ContentType: "text/plain; charset=utf-8", Version: 1, Path: rel, TTag: enc.TTag,
			IV: base64.StdEncoding.EncodeToString(enc.IV), SHA256: hex.EncodeToString(sum[:]), Size: int64(len(text))}
		for _, id := range []string{FreshDestination, HistoryDestination} {
			m.Destinations[id] = grant.Destination{Label: "P6 " + id, TTag: m.Destinations[Destination].TTag}
		}
		return nil
	}); err != nil {
		return err
	}
	if st.Manifest, err = grant.LoadManifest(manifestPath); err != nil {
		return err
	}

	// The provider's binding and every user mapped to the reader.
	caPEM, err := os.ReadFile(st.ca.CertPEM)
	if err != nil {
		return err
	}
	pw, err := os.ReadFile(pwFile)
	if err != nil {
		return err
	}
	admin := c.Admin("admin", strings.TrimSpace(string(pw)))
	if err := admin.BindProvider(ctx, api.BindProviderRequest{ServiceID: sc.ServiceID, Issuer: st.Issuer,
		Audience: devidp.DefaultGatewayAudience, AllowedClient: devidp.DefaultAdapterClientID, CAPEM: string(caPEM)}); err != nil {
		return fmt.Errorf("bind the provider: %w", err)
	}
	for i, u := range st.users {
		if err := admin.MapIdentity(ctx, api.MapIdentityRequest{ServiceID: sc.ServiceID, Issuer: st.Issuer,
			Subject: u.Username, Principal: sc.Prefix + "b." + st.PrincipalOf(i)}); err != nil {
			return fmt.Errorf("map %s: %w", u.Username, err)
		}
	}

	// The grant: every approved document, the destination, the file tools
	// on files/.
	st.FileRoot = filepath.Join(dir, "files")
	if err := os.MkdirAll(st.FileRoot, 0o700); err != nil {
		return err
	}
	if st.FileRoot, err = filepath.EvalSymlinks(st.FileRoot); err != nil {
		return err
	}
	grantPath := filepath.Join(data, "grant.json")
	if _, err := grant.Launch(grant.LaunchOptions{ManifestPath: manifestPath, AllApproved: true, CallerIdentity: true,
		TTL: 12 * time.Hour, Out: grantPath}); err != nil {
		return err
	}
	g, err := grant.Load(grantPath)
	if err != nil {
		return err
	}
	g.FileRoot = st.FileRoot
	for _, t := range grant.FileTools() {
		if !g.Allows(t) {
			g.AllowedTools = append(g.AllowedTools, t)
		}
	}
	if err := g.Save(grantPath); err != nil {
		return err
	}
	if st.o.BigFile {
		big := make([]byte, api.MaxDataBytes)
		for i := range big {
			big[i] = byte(i * 7)
		}
		if err := os.WriteFile(filepath.Join(st.FileRoot, BigFile), big, 0o600); err != nil {
			return err
		}
	}
	return nil
}

func (st *Stack) startPDMCP(ctx context.Context) error {
	dir := st.o.Dir
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	cert, key, err := st.ca.Issue(filepath.Join(dir, "ca"), "mcp")
	if err != nil {
		ln.Close()
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "adapter-secret"), []byte(adapterSecret+"\n"), 0o600); err != nil {
		ln.Close()
		return err
	}
	httpCfg := fmt.Sprintf(`{"listen":{"host":"127.0.0.1","port":%d},"tls":{"certificate":%q,"key":%q},
		"provider":{"issuer":%q,"caFile":%q,"allowedAlgs":["ES256","RS256"],"jwksRefreshMinSeconds":5},
		"exchange":{"clientId":%q,"clientSecretFile":"adapter-secret","gatewayAudience":%q},
		"requiredScopes":["openid"],"maxCallers":%d,"maxSessions":%d,"maxSessionsPerUser":4}`,
		port, cert, key, st.Issuer, st.ca.CertPEM, devidp.DefaultAdapterClientID, devidp.DefaultGatewayAudience,
		st.o.MaxCallers, max(64, 2*st.o.Users))
	cfgPath := filepath.Join(dir, "mcp-http.json")
	if err := os.WriteFile(cfgPath, []byte(httpCfg), 0o600); err != nil {
		ln.Close()
		return err
	}
	data := filepath.Join(dir, "task-data")
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	st.cancel, st.runDone = cancel, make(chan error, 1)
	ready := make(chan string, 1)
	go func() {
		st.runDone <- serve.Run(runCtx, serve.Options{ConfigPath: filepath.Join(dir, "config.json"),
			ManifestPath: filepath.Join(data, "manifest.json"), GrantPath: filepath.Join(data, "grant.json"),
			AuditPath: filepath.Join(data, "audit.jsonl"), HTTPConfigPath: cfgPath, Version: "bench", Listener: ln,
			NonDurableJournalForBenchmarks: st.o.NonDurableJournal,
			Logger:                         st.o.Logger.With("component", "mcp"), Ready: func(u string) { ready <- u }})
	}()
	select {
	case st.MCPURL = <-ready:
		return nil
	case err := <-st.runDone:
		st.cancel = nil
		return fmt.Errorf("pdmcp: %w", err)
	}
}

// startBare serves a go-sdk server with one no-op tool over the same kind
// of TLS, behind a bearer check: the floor of any MCP call over HTTPS.
func (st *Stack) startBare() error {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return err
	}
	st.BareToken = hex.EncodeToString(b)
	srv := mcp.NewServer(&mcp.Implementation{Name: "bare", Version: "bench"}, nil)
	type noArgs struct{}
	mcp.AddTool(srv, &mcp.Tool{Name: "noop", Description: "does nothing"},
		func(context.Context, *mcp.CallToolRequest, noArgs) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil, nil
		})
	get := func(*http.Request) *mcp.Server { return srv }
	stateful := mcp.NewStreamableHTTPHandler(get, nil)
	stateless := mcp.NewStreamableHTTPHandler(get, &mcp.StreamableHTTPOptions{Stateless: true})
	want := []byte("Bearer " + st.BareToken)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		if r.Header.Get("Mcp-Protocol-Version") >= StatelessProtocol {
			stateless.ServeHTTP(w, r)
			return
		}
		stateful.ServeHTTP(w, r)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	cert, key, err := st.ca.Issue(filepath.Join(st.o.Dir, "ca"), "bare")
	if err != nil {
		ln.Close()
		return err
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.ServeTLS(ln, cert, key) }()
	st.closers = append(st.closers, func() { hs.Close() })
	st.BareURL = "https://" + ln.Addr().String() + "/mcp"
	return nil
}

// Protocol revisions of the two session modes.
const (
	SessionProtocol   = "2025-11-25"
	StatelessProtocol = "2026-07-28"
)

// Token gets user i's access token through the code flow, as a host would.
func (st *Stack) Token(ctx context.Context, i int) (string, error) {
	tok, err := devidp.Login(ctx, st.HC, devidp.LoginParams{Issuer: st.Issuer, ClientID: devidp.DefaultHostClientID,
		RedirectURL: "http://127.0.0.1:18124/callback", Username: UserName(i), Password: userPassword(i), Resource: st.MCPURL})
	if err != nil {
		return "", fmt.Errorf("login %s: %w", UserName(i), err)
	}
	return tok.AccessToken, nil
}

// Connect opens an MCP client session with token at url speaking protocol.
func (st *Stack) Connect(ctx context.Context, url, token, protocol string) (*mcp.ClientSession, error) {
	hc := &http.Client{Transport: &bearer{token: token, base: st.HC.Transport}}
	c := mcp.NewClient(&mcp.Implementation{Name: "pdmcp-bench", Version: "1"}, nil)
	return c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc},
		&mcp.ClientSessionOptions{ProtocolVersion: protocol})
}

// LiveScopedSessions is the reference Gateway's count of scoped sessions
// minted less those revoked, from its per-route counters.
func (st *Stack) LiveScopedSessions() int {
	c := st.GW.Gateway.Counts()
	return c[api.RouteScoped] - c[api.RouteRevoke]
}

// IdPRequests is how many requests the provider has received.
func (st *Stack) IdPRequests() int64 { return st.idpRequests.Load() }

// Close stops everything, pdmcp first (it revokes its sessions while the
// Gateway still serves).
func (st *Stack) Close() {
	if st.cancel != nil {
		st.cancel()
		<-st.runDone
		st.cancel = nil
	}
	for i := len(st.closers) - 1; i >= 0; i-- {
		st.closers[i]()
	}
	st.closers = nil
}

type bearer struct {
	token string
	base  http.RoundTripper
}

func (b *bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}
