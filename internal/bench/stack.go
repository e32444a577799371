package bench

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/pdmcp/pdmcp/auth"
	"github.com/pdmcp/pdmcp/auth/devidp"
	"github.com/pdmcp/pdmcp/auth/devpki"
	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/reference"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/operator"
	"github.com/pdmcp/pdmcp/internal/serve"
	"github.com/pdmcp/pdmcp/internal/stack"
	"github.com/pdmcp/pdmcp/internal/telemetry"
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
	// Tracing turns pdmcp's tracing on, every span sampled and exported
	// over OTLP/HTTP to a loopback sink that reads and drops each export
	// (startTraceSink): what tracing costs the server, a collector's own
	// work aside.
	Tracing bool
	// TracedTwin starts, beside the untraced pdmcp, a second one on the
	// same files with tracing on as Tracing describes (TracedURL), so
	// that one run reads through both in the same rounds: what tracing
	// costs, against a baseline measured next to it.
	TracedTwin bool
	// BigFile writes the 16,777,215-byte file in the file root.
	BigFile bool
	// Mixed maps the users to three principals in turn (see Principals)
	// instead of all to the reader, for tests that check who reads what.
	Mixed bool
	// Connections is mcp-http.json's connection cap (connections.max);
	// the server's default when 0.
	Connections int
	Logger      *slog.Logger
}

// Stack is everything a figure measures, on 127.0.0.1: the reference
// Gateway, the development provider, pdmcp over HTTPS, and a bare go-sdk
// server with one no-op tool behind the same TLS and a bearer check.
type Stack struct {
	o StackOptions
	// TraceBytes counts the bytes of span exports the trace sink read
	// (StackOptions.Tracing).
	TraceBytes atomic.Int64
	ca         *devpki.CA
	GW         *reference.Server
	Issuer     string
	HC         *http.Client // trusts the stack's CA only
	MCPURL     string
	// TracedURL is the traced twin's MCP URL (StackOptions.TracedTwin).
	TracedURL string
	// twinTracing is the twin's tracing, flushed at the end of each of
	// its measured windows so that its export is charged to it.
	twinTracing *telemetry.Tracing
	BareURL     string
	// BareToken is the bare server's bearer token.
	BareToken string
	Service   *gateway.ServiceConfig
	Reader    string // the reader principal
	Manifest  *grant.Manifest
	FileRoot  string
	stack     *stack.Stack

	// idpRequests counts every request the provider received.
	idpRequests atomic.Int64

	closers []func() // the bare server's

	// bareResult is what the bare server's "result" tool answers: a copy
	// of one pdmcp read's result (see readTargets).
	bareResult atomic.Pointer[mcp.CallToolResult]
	bareSrv    *mcp.Server
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

// NoAccessUser is a development user besides the numbered ones, mapped to
// the principal "none", who may read nothing: the signed-in attacker of
// the abuse suite.
const NoAccessUser = "carol"

const noAccessPassword = "pw-carol"

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
	var users []devidp.User
	identities := map[string]string{}
	for i := range o.Users {
		users = append(users, devidp.User{Username: UserName(i), Password: userPassword(i)})
		identities[UserName(i)] = st.PrincipalOf(i)
	}
	users = append(users, devidp.User{Username: NoAccessUser, Password: noAccessPassword})
	identities[NoAccessUser] = "none"
	var tracing *telemetry.Tracing
	if o.Tracing {
		if tracing, err = st.startTracing(ctx, o.Logger); err != nil {
			return nil, err
		}
	}
	if o.TracedTwin {
		if st.twinTracing, err = st.startTracing(ctx, o.Logger); err != nil {
			return nil, err
		}
	}
	st.stack, err = stack.Start(ctx, stack.Options{Dir: o.Dir, CA: st.ca, Logger: o.Logger, Version: "bench",
		ServiceName: "pdmcp-bench", SeedTag: "b", SeedUsers: []operator.SeedUser{
			{Name: "reader", Documents: principalDocs["reader"], Save: true},
			{Name: "partial", Documents: principalDocs["partial"]}, {Name: "none"}},
		Identities: identities, FileRoot: true,
		DevIdP: stack.DevIdP{Users: users, AccessTokenLifetime: 2 * time.Hour, Handler: func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				st.idpRequests.Add(1)
				h.ServeHTTP(w, r)
			})
		}},
		Prepare: st.prepare,
		Grant:   func(lo *grant.LaunchOptions) { lo.TTL = 12 * time.Hour },
		HTTP: func(c *auth.HTTPConfig) {
			c.MaxCallers, c.MaxSessions, c.MaxSessionsPerUser = o.MaxCallers, max(64, 2*o.Users), 4
			c.Connections.Max = o.Connections
		},
		Serve: func(so *serve.Options) {
			so.NonDurableJournalForBenchmarks, so.Tracing = o.NonDurableJournal, tracing
		},
	})
	if err != nil {
		return nil, fmt.Errorf("pdmcp: %w", err)
	}
	s := st.stack
	st.GW, st.Issuer, st.HC, st.MCPURL = s.Gateway, s.Provider.Issuer, s.HC, s.MCPURL
	st.Service, st.Reader, st.FileRoot = s.Service, s.Principal("reader"), s.FileRoot
	if st.Manifest, err = grant.LoadManifest(s.ManifestPath); err != nil {
		return nil, err
	}
	if o.TracedTwin {
		if st.TracedURL, err = s.StartTwin(ctx, "traced", func(so *serve.Options) { so.Tracing = st.twinTracing }); err != nil {
			return nil, err
		}
	}
	if err := st.startBare(); err != nil {
		return nil, err
	}
	return st, nil
}

// prepare adds the 4 KiB document, made by the seed's owner and readable
// by the reader, P6's two destinations and, when asked, the big file.
func (st *Stack) prepare(ctx context.Context, s *stack.Stack) error {
	c, err := gateway.New(s.Service.ClientConfig())
	if err != nil {
		return err
	}
	if err := c.SignIn(ctx); err != nil {
		return err
	}
	owner, err := c.Mint(ctx, gateway.MintRequest{ActingAs: s.Seed.OwnerUser, TTL: api.MaxScopedTTL})
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
	reader, err := c.GetPrincipal(ctx, s.Principal("reader"))
	if err != nil {
		return err
	}
	if err := owner.ACLGrant(ctx, api.ACLGrantRequest{TTag: enc.TTag, SystemID: reader.SystemID,
		PrincipalID: reader.PrincipalID, Rights: []string{api.RightRead}}); err != nil {
		return err
	}
	rel := "documents/" + DocumentID + ".v1.bin"
	if err := os.WriteFile(filepath.Join(s.Data, rel), enc.Ciphertext, 0o600); err != nil {
		return err
	}
	sum := sha256.Sum256(text)
	if _, err := grant.UpdateManifest(ctx, s.ManifestPath, func(m *grant.Manifest) error {
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
	if !st.o.BigFile {
		return nil
	}
	big := make([]byte, api.MaxDataBytes)
	for i := range big {
		big[i] = byte(i * 7)
	}
	return os.WriteFile(filepath.Join(s.FileRoot, BigFile), big, 0o600)
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
	// "result" (BareResultTool) is added by SetBareResult, with the read
	// tool's input schema.
	st.bareSrv = srv
	get := func(*http.Request) *mcp.Server { return srv }
	// A call's answer is one JSON body, as pdmcp's is (its stack grants no
	// hand-off, so it never keeps a call's stream open): the floor pays no
	// SSE framing pdmcp does not.
	stateful := mcp.NewStreamableHTTPHandler(get, &mcp.StreamableHTTPOptions{JSONResponse: true})
	stateless := mcp.NewStreamableHTTPHandler(get, &mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true})
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

// BareResultTool is the bare server's tool that answers a copy of a read's
// result.
const BareResultTool = "result"

// SetBareResult makes res the answer of the bare server's result tool,
// and in (the read tool's input schema as pdmcp lists it) its input
// schema: the floor of a call that carries what a read carries, its
// arguments and their schema's checks in the SDK included. The tool is
// registered as pdmcp's tools are, with an untyped handler that does not
// look at its arguments.
func (st *Stack) SetBareResult(res *mcp.CallToolResult, in any) {
	st.bareResult.Store(res)
	st.bareSrv.AddTool(&mcp.Tool{Name: BareResultTool, Description: "answers a copy of a read's result", InputSchema: in},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			r := st.bareResult.Load()
			if r == nil {
				return nil, errors.New("no result to answer yet")
			}
			return &mcp.CallToolResult{Content: r.Content, StructuredContent: r.StructuredContent}, nil
		})
}

// Protocol revisions of the two session modes.
const (
	SessionProtocol   = "2025-11-25"
	StatelessProtocol = "2026-07-28"
)

// Token gets user i's access token through the code flow, as a host would.
func (st *Stack) Token(ctx context.Context, i int) (string, error) {
	return st.login(ctx, UserName(i), userPassword(i), st.MCPURL)
}

// NoAccessToken is NoAccessUser's access token for the server at resource.
func (st *Stack) NoAccessToken(ctx context.Context, resource string) (string, error) {
	return st.login(ctx, NoAccessUser, noAccessPassword, resource)
}

// tokenFor is user i's access token for the server at resource.
func (st *Stack) tokenFor(ctx context.Context, i int, resource string) (string, error) {
	return st.login(ctx, UserName(i), userPassword(i), resource)
}

func (st *Stack) login(ctx context.Context, user, password, resource string) (string, error) {
	tok, err := devidp.Login(ctx, st.HC, devidp.LoginParams{Issuer: st.Issuer, ClientID: devidp.DefaultHostClientID,
		RedirectURL: "http://127.0.0.1:18124/callback", Username: user, Password: password, Resource: resource})
	if err != nil {
		return "", fmt.Errorf("login %s: %w", user, err)
	}
	return tok.AccessToken, nil
}

// AbuseTarget is the stack's pdmcp as the abuse suite's target, with
// NoAccessUser's token.
func (st *Stack) AbuseTarget(ctx context.Context) (AbuseTarget, error) {
	tok, err := st.NoAccessToken(ctx, st.MCPURL)
	if err != nil {
		return AbuseTarget{}, err
	}
	return AbuseTarget{URL: st.MCPURL, TLS: st.HC.Transport.(*http.Transport).TLSClientConfig, Token: tok}, nil
}

// ConnectUser signs user i in and opens their MCP session with pdmcp,
// speaking protocol.
func (st *Stack) ConnectUser(ctx context.Context, i int, protocol string) (*mcp.ClientSession, error) {
	tok, err := st.Token(ctx, i)
	if err != nil {
		return nil, err
	}
	return st.Connect(ctx, st.MCPURL, tok, protocol)
}

// Connect opens an MCP client session with token at url speaking protocol.
func (st *Stack) Connect(ctx context.Context, url, token, protocol string) (*mcp.ClientSession, error) {
	return stack.Connect(ctx, st.HC, url, token, "pdmcp-bench", &mcp.ClientSessionOptions{ProtocolVersion: protocol})
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
// startTracing starts the trace sink and an always-sampling tracer
// exporting to it; both end with the stack, the tracer flushed first.
func (st *Stack) startTracing(ctx context.Context, log *slog.Logger) (*telemetry.Tracing, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("trace sink: %w", err)
	}
	sink := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		st.TraceBytes.Add(n)
		w.WriteHeader(http.StatusOK)
	})}
	go func() { _ = sink.Serve(ln) }()
	t, err := telemetry.Start(ctx, telemetry.Config{Enabled: true, URL: "http://" + ln.Addr().String() + "/v1/traces",
		ServiceName: "pdmcp-bench", Sampler: sdktrace.AlwaysSample()}, "bench", log)
	if err != nil {
		sink.Close()
		return nil, err
	}
	// closers run last first: the tracer's flush before the sink closes.
	st.closers = append(st.closers, func() { sink.Close() }, func() { _ = t.Shutdown(context.Background()) })
	return t, nil
}

func (st *Stack) Close() {
	if st.stack != nil {
		st.stack.Close()
	}
	for i := len(st.closers) - 1; i >= 0; i-- {
		st.closers[i]()
	}
	st.closers = nil
}
