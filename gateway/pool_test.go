package gateway_test

import (
	"bytes"
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/auth"
	"github.com/pdmcp/pdmcp/auth/devidp"
	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/reference"
	"github.com/pdmcp/pdmcp/gateway/reference/reftest"
	"github.com/pdmcp/pdmcp/internal/testutil"
)

// poolWorld is a reference Gateway with one service, bound to a development
// OpenID provider on TLS whose users alice and bob are mapped to principals
// of the service (carol signs in but is not mapped), and one key that only
// alice may read.
type poolWorld struct {
	env       *reftest.Env
	svc       *gateway.ServiceConfig
	c         *gateway.Client
	admin     *gateway.Admin
	idp       *devidp.Provider
	idpSrv    *httptest.Server
	exchanger *auth.Exchanger
	ttag      string
	iv, ct    []byte
	plaintext []byte

	mu    sync.Mutex
	users map[string]*poolUser
}

// poolUser is a signed-in user of the provider.
type poolUser struct {
	name        string
	principal   string // inside the service's prefix
	caller      *auth.Caller
	accessToken string
}

var poolUsers = []devidp.User{
	{Username: "alice", Password: "alice-password", Subject: "sub-alice"},
	{Username: "bob", Password: "bob-password", Subject: "sub-bob"},
	{Username: "carol", Password: "carol-password", Subject: "sub-carol"},
	{Username: "user1", Password: "user1-password", Subject: "sub-user1"},
	{Username: "user2", Password: "user2-password", Subject: "sub-user2"},
	{Username: "user3", Password: "user3-password", Subject: "sub-user3"},
	{Username: "user4", Password: "user4-password", Subject: "sub-user4"},
	{Username: "user5", Password: "user5-password", Subject: "sub-user5"},
	{Username: "user6", Password: "user6-password", Subject: "sub-user6"},
	{Username: "user7", Password: "user7-password", Subject: "sub-user7"},
	{Username: "user8", Password: "user8-password", Subject: "sub-user8"},
}

func newPoolWorld(t *testing.T) *poolWorld {
	t.Helper()
	ctx := context.Background()
	w := &poolWorld{env: reftest.Start(t, reference.Config{}), users: map[string]*poolUser{}}
	w.svc = w.env.Service(t, "pool", true)
	w.c = w.env.ServiceClient(t, w.svc)
	w.admin = w.env.Client(t).Admin(reftest.AdminUser, reftest.AdminPassword)

	// The provider, on TLS at 127.0.0.1; the listener exists first so that
	// the issuer is known when the provider is built.
	w.idpSrv = httptest.NewUnstartedServer(nil)
	t.Cleanup(w.idpSrv.Close)
	idp, err := devidp.New(ctx, devidp.Config{
		Issuer: "https://" + w.idpSrv.Listener.Addr().String(),
		Users:  poolUsers,
		// Long-lived tokens, so that the 300 s session cap is what binds.
		AccessTokenLifetime:    time.Hour,
		ExchangedTokenLifetime: time.Hour,
		Logger:                 slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = idp.Close() })
	w.idp = idp
	w.idpSrv.Config.Handler = idp
	w.idpSrv.StartTLS()
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: w.idpSrv.Certificate().Raw})
	caFile := filepath.Join(t.TempDir(), "idp-ca.pem")
	if err := os.WriteFile(caFile, caPEM, 0o600); err != nil {
		t.Fatal(err)
	}

	err = w.admin.BindProvider(ctx, api.BindProviderRequest{ServiceID: w.svc.ServiceID, Issuer: idp.Issuer(),
		Audience: idp.GatewayAudience(), AllowedClient: idp.AdapterClientID(), CAPEM: string(caPEM)})
	if err != nil {
		t.Fatalf("bind provider: %v", err)
	}
	hc, err := auth.NewProviderClient(caFile, 0)
	if err != nil {
		t.Fatal(err)
	}
	w.exchanger, err = auth.NewExchanger(auth.ExchangerConfig{Provider: auth.NewProvider(idp.Issuer(), hc),
		ClientID: idp.AdapterClientID(), ClientSecret: idp.AdapterClientSecret(), GatewayAudience: idp.GatewayAudience()})
	if err != nil {
		t.Fatal(err)
	}

	for _, u := range poolUsers {
		reftest.Principal(t, w.c, w.svc.Prefix+u.Username)
	}
	w.mapUser(t, "alice")
	w.mapUser(t, "bob")

	// A key its owner made, readable by alice alone.
	owner := reftest.Principal(t, w.c, w.svc.Prefix+"owner")
	ownerSess, err := w.c.Mint(ctx, gateway.MintRequest{ActingAs: owner.Name, TTL: time.Minute})
	if err != nil {
		t.Fatalf("owner session: %v", err)
	}
	w.plaintext = []byte("quarterly figures: synthetic text")
	enc, err := ownerSess.Encrypt(ctx, gateway.EncryptInput{IV: bytes.Repeat([]byte{3}, api.IVBytes), Plaintext: w.plaintext})
	if err != nil {
		t.Fatalf("mint key: %v", err)
	}
	w.ttag, w.iv, w.ct = enc.TTag, enc.IV, enc.Ciphertext
	alice, err := w.c.GetPrincipal(ctx, w.svc.Prefix+"alice")
	if err != nil {
		t.Fatal(err)
	}
	err = ownerSess.ACLGrant(ctx, api.ACLGrantRequest{TTag: w.ttag, SystemID: alice.SystemID, PrincipalID: alice.PrincipalID,
		Rights: []string{api.RightRead}})
	if err != nil {
		t.Fatalf("grant alice: %v", err)
	}
	if err := ownerSess.Revoke(ctx); err != nil {
		t.Fatal(err)
	}
	return w
}

// mapUser maps the user's identity at the provider to their principal.
func (w *poolWorld) mapUser(t *testing.T, name string) {
	t.Helper()
	err := w.admin.MapIdentity(context.Background(), api.MapIdentityRequest{ServiceID: w.svc.ServiceID,
		Issuer: w.idp.Issuer(), Subject: "sub-" + name, Principal: w.svc.Prefix + name})
	if err != nil {
		t.Fatalf("map %s: %v", name, err)
	}
}

// user signs name in at the provider with the code flow, once per world.
func (w *poolWorld) user(t *testing.T, name string) *poolUser {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if u := w.users[name]; u != nil {
		return u
	}
	tok, err := devidp.Login(context.Background(), w.idpSrv.Client(), devidp.LoginParams{
		Issuer: w.idp.Issuer(), ClientID: w.idp.HostClientID(), RedirectURL: "http://127.0.0.1:18124/callback",
		Username: name, Password: name + "-password",
	})
	if err != nil {
		t.Fatalf("sign %s in: %v", name, err)
	}
	u := &poolUser{name: name, principal: w.svc.Prefix + name, accessToken: tok.AccessToken,
		caller: &auth.Caller{Issuer: w.idp.Issuer(), Subject: "sub-" + name, Expiry: tok.Expiry}}
	w.users[name] = u
	return u
}

// source exchanges the user's token for one issued to the Gateway, counting
// how often it is asked.
func (w *poolWorld) source(u *poolUser, asked *atomic.Int32) gateway.SubjectSource {
	return func(ctx context.Context) (gateway.SubjectToken, error) {
		if asked != nil {
			asked.Add(1)
		}
		xt, err := w.exchanger.Exchange(ctx, u.caller, u.accessToken)
		if err != nil {
			return gateway.SubjectToken{}, err
		}
		return gateway.SubjectToken{Token: xt.AccessToken, Expiry: xt.Expiry}, nil
	}
}

// session gets the user's session from the pool, failing the test on error.
func (w *poolWorld) session(t *testing.T, p *gateway.Pool, u *poolUser) *gateway.Session {
	t.Helper()
	s, err := p.Session(context.Background(), u.caller.ID(), w.source(u, nil))
	if err != nil {
		t.Fatalf("session for %s: %v", u.name, err)
	}
	return s
}

func (w *poolWorld) pool(t *testing.T, cfg gateway.PoolConfig) *gateway.Pool {
	t.Helper()
	cfg.Minter = w.c
	if cfg.Objects == nil {
		cfg.Objects = []string{w.ttag}
	}
	p, err := gateway.NewPool(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.EndAll(context.Background()) })
	return p
}

func (w *poolWorld) count(route string) int { return w.env.Gateway.Count(route) }

// wantRefusalCode asserts err is a refusal by layer with code.
func wantRefusalCode(t *testing.T, err error, layer, code string) *api.Error {
	t.Helper()
	var ae *api.Error
	if !errors.As(err, &ae) {
		t.Fatalf("got %v, want %s refusal %s", err, layer, code)
	}
	if ae.Layer != layer || ae.Code != code {
		t.Fatalf("got %s %s (%s), want %s %s", ae.Layer, ae.Code, ae.Detail, layer, code)
	}
	return ae
}

// wantEnded asserts s was revoked by this process: the call is refused
// SESSION_REVOKED before anything is sent.
func (w *poolWorld) wantEnded(t *testing.T, s *gateway.Session) {
	t.Helper()
	_, err := s.Decrypt(context.Background(), w.ttag, w.iv, w.ct)
	wantRefusalCode(t, err, api.LayerAdapter, api.CodeSessionRevoked)
	if !errors.Is(err, gateway.ErrSessionEnded) {
		t.Errorf("refusal %v does not wrap ErrSessionEnded", err)
	}
}

// hookHandler calls on for each record before handling it.
type hookHandler struct {
	slog.Handler
	on func(slog.Record)
}

// Enabled is true for every record: the hook sees them all, whatever the
// wrapped handler keeps.
func (h hookHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h hookHandler) Handle(ctx context.Context, r slog.Record) error {
	h.on(r)
	if !h.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h hookHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return hookHandler{h.Handler.WithAttrs(as), h.on}
}

func (h hookHandler) WithGroup(name string) slog.Handler {
	return hookHandler{h.Handler.WithGroup(name), h.on}
}

// fakeClock is the real time moved on by a settable offset.
type fakeClock struct{ offset atomic.Int64 }

func (c *fakeClock) Now() time.Time           { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *fakeClock) Advance(d time.Duration)  { c.offset.Add(int64(d)) }
func (c *fakeClock) Set(offset time.Duration) { c.offset.Store(int64(offset)) }

func TestPoolGivesEachUserTheirOwnSession(t *testing.T) {
	w := newPoolWorld(t)
	logs := &testutil.LogBuffer{}
	p := w.pool(t, gateway.PoolConfig{Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	alice, bob := w.user(t, "alice"), w.user(t, "bob")
	mints := w.count(api.RouteScoped)

	got := map[string]*gateway.Session{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, u := range []*poolUser{alice, bob} {
		wg.Go(func() {
			s, err := p.Session(context.Background(), u.caller.ID(), w.source(u, nil))
			if err != nil {
				t.Errorf("session for %s: %v", u.name, err)
				return
			}
			mu.Lock()
			got[u.name] = s
			mu.Unlock()
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	as, bs := got["alice"], got["bob"]
	if as.JKT() == bs.JKT() || as.HandleDigest() == bs.HandleDigest() {
		t.Fatal("two users share a holder key or a session")
	}
	if as.ActingAs() != alice.principal || bs.ActingAs() != bob.principal {
		t.Fatalf("acting as %q and %q, want %q and %q", as.ActingAs(), bs.ActingAs(), alice.principal, bob.principal)
	}
	if n := w.count(api.RouteScoped) - mints; n != 2 {
		t.Fatalf("%d mints for two users, want 2", n)
	}
	if p.Len() != 2 {
		t.Fatalf("Len = %d, want 2", p.Len())
	}

	ctx := context.Background()
	pt, err := as.Decrypt(ctx, w.ttag, w.iv, w.ct)
	if err != nil || !bytes.Equal(pt, w.plaintext) {
		t.Fatalf("alice decrypt = %q, %v", pt, err)
	}
	_, err = bs.Decrypt(ctx, w.ttag, w.iv, w.ct)
	wantRefusalCode(t, err, api.LayerKeyServer, api.CodeACLDenied)

	// A second call is served by the session the user holds.
	if again := w.session(t, p, alice); again != as {
		t.Fatal("alice's live session was not reused")
	}
	if n := w.count(api.RouteScoped) - mints; n != 2 {
		t.Fatalf("%d mints after a reuse, want 2", n)
	}

	text := logs.String()
	if !strings.Contains(text, "session minted") {
		t.Fatalf("no mint logged: %s", text)
	}
	for _, u := range []*poolUser{alice, bob} {
		xt, err := w.source(u, nil)(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for what, secret := range map[string]string{"caller id": u.caller.ID(), "subject": u.caller.Subject,
			"access token": u.accessToken, "exchanged token": xt.Token} {
			if strings.Contains(text, secret) {
				t.Errorf("the log holds %s's %s", u.name, what)
			}
		}
	}
}

func TestPoolMintsOncePerUserUnderConcurrency(t *testing.T) {
	w := newPoolWorld(t)
	p := w.pool(t, gateway.PoolConfig{})
	alice := w.user(t, "alice")
	mints := w.count(api.RouteScoped)
	var asked atomic.Int32

	const n = 8
	sessions := make([]*gateway.Session, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			s, err := p.Session(context.Background(), alice.caller.ID(), w.source(alice, &asked))
			if err != nil {
				t.Errorf("call %d: %v", i, err)
			}
			sessions[i] = s
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for i, s := range sessions {
		if s != sessions[0] {
			t.Fatalf("call %d got another session than call 0", i)
		}
	}
	if got := w.count(api.RouteScoped) - mints; got != 1 {
		t.Fatalf("%d concurrent calls of one user minted %d sessions, want 1", n, got)
	}
	if asked.Load() != 1 {
		t.Fatalf("subject token asked for %d times, want 1", asked.Load())
	}
}

func TestPoolUsersDoNotWaitForEachOther(t *testing.T) {
	w := newPoolWorld(t)
	clock := &fakeClock{}
	p := w.pool(t, gateway.PoolConfig{MaxCallers: 1, Now: clock.Now})
	alice, bob := w.user(t, "alice"), w.user(t, "bob")
	aliceOld := w.session(t, p, alice)

	// Alice's session is due for renewal, and her next call stops inside
	// her exchange. Bob's call, with the pool full, must finish meanwhile:
	// no lock is held across another user's calls, and alice, whose old
	// session was revoked before her new one is minted, holds none.
	clock.Set(api.MaxScopedTTL - 10*time.Second)
	entered, release := make(chan struct{}), make(chan struct{})
	blocked := func(ctx context.Context) (gateway.SubjectToken, error) {
		close(entered)
		<-release
		return w.source(alice, nil)(ctx)
	}
	type result struct {
		s   *gateway.Session
		err error
	}
	aliceDone := make(chan result, 1)
	go func() {
		s, err := p.Session(context.Background(), alice.caller.ID(), blocked)
		aliceDone <- result{s, err}
	}()
	<-entered
	w.wantEnded(t, aliceOld)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bs, err := p.Session(ctx, bob.caller.ID(), w.source(bob, nil))
	if err != nil {
		t.Fatalf("bob waited for alice: %v", err)
	}
	if p.Len() != 1 {
		t.Fatalf("Len = %d while alice renews, want 1 (bob)", p.Len())
	}
	close(release)
	r := <-aliceDone
	if r.err != nil {
		t.Fatalf("alice: %v", r.err)
	}
	// Alice's session arrived last with the pool full: bob, the only
	// other holder, is ended.
	if p.Len() != 1 {
		t.Fatalf("Len = %d, want 1", p.Len())
	}
	w.wantEnded(t, bs)
	if _, err := r.s.Decrypt(context.Background(), w.ttag, w.iv, w.ct); err != nil {
		t.Fatalf("alice decrypt: %v", err)
	}
}

func TestPoolRenewsNearExpiry(t *testing.T) {
	w := newPoolWorld(t)
	clock := &fakeClock{}
	p := w.pool(t, gateway.PoolConfig{Now: clock.Now})
	alice := w.user(t, "alice")
	var asked atomic.Int32
	src := w.source(alice, &asked)
	ctx := context.Background()

	first, err := p.Session(ctx, alice.caller.ID(), src)
	if err != nil {
		t.Fatal(err)
	}
	if life := time.Until(first.ExpiresAt()); life > api.MaxScopedTTL {
		t.Fatalf("session lives %s, over the %s cap", life, api.MaxScopedTTL)
	}
	mints, revokes := w.count(api.RouteScoped), w.count(api.RouteRevoke)

	// 50 s before the end: still reused.
	clock.Set(api.MaxScopedTTL - 50*time.Second)
	if s, err := p.Session(ctx, alice.caller.ID(), src); err != nil || s != first {
		t.Fatalf("with 50 s left: %v, %v; want the same session", s, err)
	}
	// 20 s before the end: a new one, and the old one revoked.
	clock.Set(api.MaxScopedTTL - 20*time.Second)
	second, err := p.Session(ctx, alice.caller.ID(), src)
	if err != nil {
		t.Fatal(err)
	}
	if second == first || second.JKT() == first.JKT() {
		t.Fatal("not renewed with a new session and holder key")
	}
	if got := w.count(api.RouteScoped) - mints; got != 1 {
		t.Fatalf("%d mints at renewal, want 1", got)
	}
	if got := w.count(api.RouteRevoke) - revokes; got != 1 {
		t.Fatalf("%d revokes at renewal, want 1", got)
	}
	if asked.Load() != 2 {
		t.Fatalf("subject token asked for %d times, want 2 (one per mint)", asked.Load())
	}
	w.wantEnded(t, first)
	if pt, err := second.Decrypt(ctx, w.ttag, w.iv, w.ct); err != nil || !bytes.Equal(pt, w.plaintext) {
		t.Fatalf("renewed session decrypt: %q, %v", pt, err)
	}
	if p.Len() != 1 {
		t.Fatalf("Len = %d, want 1", p.Len())
	}
}

func TestPoolSessionNeverOutlivesSubjectToken(t *testing.T) {
	w := newPoolWorld(t)
	alice := w.user(t, "alice")
	ctx := context.Background()
	xt, err := w.source(alice, nil)(ctx)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("a token with 100 s left gives a session ending before it", func(t *testing.T) {
		p := w.pool(t, gateway.PoolConfig{})
		short := gateway.SubjectToken{Token: xt.Token, Expiry: time.Now().Add(100 * time.Second)}
		s, err := p.Session(ctx, alice.caller.ID(), func(context.Context) (gateway.SubjectToken, error) { return short, nil })
		if err != nil {
			t.Fatal(err)
		}
		if s.ExpiresAt().After(short.Expiry) {
			t.Fatalf("session ends %s, after its subject token (%s)", s.ExpiresAt(), short.Expiry)
		}
	})
	t.Run("an expired token mints nothing", func(t *testing.T) {
		p := w.pool(t, gateway.PoolConfig{})
		mints := w.count(api.RouteScoped)
		old := gateway.SubjectToken{Token: xt.Token, Expiry: time.Now().Add(-time.Minute)}
		_, err := p.Session(ctx, alice.caller.ID(), func(context.Context) (gateway.SubjectToken, error) { return old, nil })
		if !errors.Is(err, gateway.ErrSubjectTokenExpired) {
			t.Fatalf("got %v, want ErrSubjectTokenExpired", err)
		}
		if w.count(api.RouteScoped) != mints || p.Len() != 0 {
			t.Fatal("an expired subject token reached the Gateway or was cached")
		}
	})
}

func TestPoolEvictsLeastRecentCaller(t *testing.T) {
	w := newPoolWorld(t)
	w.mapUser(t, "carol")
	p := w.pool(t, gateway.PoolConfig{MaxCallers: 2})
	alice, bob, carol := w.user(t, "alice"), w.user(t, "bob"), w.user(t, "carol")
	ctx := context.Background()

	aliceOld := w.session(t, p, alice)
	bobSess := w.session(t, p, bob)
	revokes := w.count(api.RouteRevoke)

	// Carol is the third: alice called least recently and is ended.
	carolSess := w.session(t, p, carol)
	if p.Len() != 2 {
		t.Fatalf("Len = %d, want 2", p.Len())
	}
	if got := w.count(api.RouteRevoke) - revokes; got != 1 {
		t.Fatalf("%d revokes at eviction, want 1", got)
	}
	w.wantEnded(t, aliceOld)
	if s := w.session(t, p, bob); s != bobSess {
		t.Fatal("bob lost his session to carol's arrival")
	}
	if carolSess.ActingAs() != carol.principal {
		t.Fatalf("carol acts as %q", carolSess.ActingAs())
	}

	// Alice returns: a new session, and now carol called least recently.
	aliceNew := w.session(t, p, alice)
	if aliceNew == aliceOld || aliceNew.JKT() == aliceOld.JKT() {
		t.Fatal("alice was not served by a new session")
	}
	if pt, err := aliceNew.Decrypt(ctx, w.ttag, w.iv, w.ct); err != nil || !bytes.Equal(pt, w.plaintext) {
		t.Fatalf("alice's new session decrypt: %q, %v", pt, err)
	}
	w.wantEnded(t, carolSess)
	if p.Len() != 2 {
		t.Fatalf("Len = %d, want 2", p.Len())
	}
	if got := w.count(api.RouteRevoke) - revokes; got != 2 {
		t.Fatalf("%d revokes after two evictions, want 2", got)
	}
}

// TestPoolIdentityNotMappedIsFinal: a user the Gateway will not serve
// (no mapping) is refused IDENTITY_NOT_MAPPED, 403, once asked; their next
// call, within RefusedFor, gets the same refusal without the Gateway being
// asked again. A refused user takes a free place only for the mint and
// gives it back, and never costs alice her session.
func TestPoolIdentityNotMappedIsFinal(t *testing.T) {
	w := newPoolWorld(t)
	p := w.pool(t, gateway.PoolConfig{MaxCallers: 2})
	alice, carol := w.user(t, "alice"), w.user(t, "carol")
	ctx := context.Background()
	as := w.session(t, p, alice)
	mints, revokes := w.count(api.RouteScoped), w.count(api.RouteRevoke)

	var first *api.Error
	for try := 1; try <= 2; try++ {
		_, err := p.Session(ctx, carol.caller.ID(), w.source(carol, nil))
		ae := wantRefusalCode(t, err, api.LayerGateway, api.CodeIdentityNotMapped)
		if ae.Status != 403 {
			t.Errorf("status %d, want 403", ae.Status)
		}
		if first == nil {
			first = ae
		} else if ae.Detail != first.Detail || ae.Status != first.Status {
			t.Errorf("remembered refusal %d %q, want %d %q", ae.Status, ae.Detail, first.Status, first.Detail)
		}
		// The Gateway is asked once, with no retry; the second call is
		// answered from the pool's memory of the final refusal.
		if got := w.count(api.RouteScoped) - mints; got != 1 {
			t.Fatalf("after %d refused calls, %d mints, want 1", try, got)
		}
	}
	if w.count(api.RouteRevoke) != revokes {
		t.Fatal("carol's refusal revoked a session")
	}
	if p.Len() != 1 || p.Places() != 1 {
		t.Fatalf("Len = %d, places %d, want 1 and 1", p.Len(), p.Places())
	}
	if s := w.session(t, p, alice); s != as {
		t.Fatal("alice lost her session to carol's refusal")
	}
	if _, err := as.Decrypt(ctx, w.ttag, w.iv, w.ct); err != nil {
		t.Fatalf("alice decrypt after carol's refusal: %v", err)
	}
}

func TestPoolIdPUnavailable(t *testing.T) {
	w := newPoolWorld(t)
	alice := w.user(t, "alice")
	// The fault answers Retry-After in whole seconds: 1 s here.
	const short = time.Second
	const maxWait = 2 * time.Second

	// poolWithHook is a pool whose log calls on when it starts to wait out
	// an IDP_UNAVAILABLE: before the wait, so the test acts in step.
	poolWithHook := func(t *testing.T, on func()) *gateway.Pool {
		h := hookHandler{Handler: slog.DiscardHandler, on: func(r slog.Record) {
			if strings.Contains(r.Message, "waiting out IDP_UNAVAILABLE") {
				on()
			}
		}}
		return w.pool(t, gateway.PoolConfig{MaxRetryWait: maxWait, Logger: slog.New(h)})
	}
	t.Cleanup(func() { w.env.Gateway.SetFaults(reference.Faults{}) })

	t.Run("a short Retry-After is waited out and the mint tried again", func(t *testing.T) {
		w.env.Gateway.SetFaults(reference.Faults{IdPUnavailable: short})
		waited := 0
		p := poolWithHook(t, func() {
			waited++
			w.env.Gateway.SetFaults(reference.Faults{}) // the provider is back
		})
		mints := w.count(api.RouteScoped)
		s, err := p.Session(context.Background(), alice.caller.ID(), w.source(alice, nil))
		if err != nil {
			t.Fatalf("after waiting out IDP_UNAVAILABLE: %v", err)
		}
		if waited != 1 || w.count(api.RouteScoped)-mints != 2 {
			t.Fatalf("waited %d times, %d mints; want 1 and 2", waited, w.count(api.RouteScoped)-mints)
		}
		if s.ActingAs() != alice.principal || p.Len() != 1 {
			t.Fatalf("session acts as %q, Len %d", s.ActingAs(), p.Len())
		}
	})
	t.Run("a second one is returned with its Retry-After", func(t *testing.T) {
		w.env.Gateway.SetFaults(reference.Faults{IdPUnavailable: short})
		p := poolWithHook(t, func() {})
		mints := w.count(api.RouteScoped)
		_, err := p.Session(context.Background(), alice.caller.ID(), w.source(alice, nil))
		ae := wantRefusalCode(t, err, api.LayerGateway, api.CodeIdPUnavailable)
		if ae.Status != 503 || ae.RetryAfter != short {
			t.Fatalf("status %d, Retry-After %s; want 503 and %s", ae.Status, ae.RetryAfter, short)
		}
		if got := w.count(api.RouteScoped) - mints; got != 2 {
			t.Fatalf("%d mints, want 2 (one retry only)", got)
		}
		if p.Len() != 0 {
			t.Fatalf("Len = %d after a failure, want 0", p.Len())
		}
	})
	t.Run("a long Retry-After is returned at once", func(t *testing.T) {
		w.env.Gateway.SetFaults(reference.Faults{IdPUnavailable: time.Hour})
		waited := false
		p := poolWithHook(t, func() { waited = true })
		mints := w.count(api.RouteScoped)
		// Bounded, so that a pool that did wait the hour fails here.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := p.Session(ctx, alice.caller.ID(), w.source(alice, nil))
		ae := wantRefusalCode(t, err, api.LayerGateway, api.CodeIdPUnavailable)
		if ae.RetryAfter != time.Hour {
			t.Fatalf("Retry-After %s, want 1h", ae.RetryAfter)
		}
		if waited || w.count(api.RouteScoped)-mints != 1 {
			t.Fatalf("waited %v, %d mints; want no wait and 1", waited, w.count(api.RouteScoped)-mints)
		}
	})
	t.Run("the wait ends with the caller's context", func(t *testing.T) {
		w.env.Gateway.SetFaults(reference.Faults{IdPUnavailable: short})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		p := poolWithHook(t, cancel)
		mints := w.count(api.RouteScoped)
		_, err := p.Session(ctx, alice.caller.ID(), w.source(alice, nil))
		wantRefusalCode(t, err, api.LayerGateway, api.CodeIdPUnavailable)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("%v does not say the wait was cancelled", err)
		}
		if got := w.count(api.RouteScoped) - mints; got != 1 {
			t.Fatalf("%d mints, want 1", got)
		}
	})
}

func TestPoolEndAndEndAll(t *testing.T) {
	w := newPoolWorld(t)
	p := w.pool(t, gateway.PoolConfig{})
	alice, bob := w.user(t, "alice"), w.user(t, "bob")
	ctx := context.Background()
	as, bs := w.session(t, p, alice), w.session(t, p, bob)
	revokes := w.count(api.RouteRevoke)

	p.End(ctx, alice.caller.ID())
	if got := w.count(api.RouteRevoke) - revokes; got != 1 {
		t.Fatalf("%d revokes for End, want 1", got)
	}
	w.wantEnded(t, as)
	if p.Len() != 1 {
		t.Fatalf("Len = %d after End, want 1", p.Len())
	}
	p.End(ctx, alice.caller.ID()) // nothing left to end
	if got := w.count(api.RouteRevoke) - revokes; got != 1 {
		t.Fatalf("%d revokes after a second End, want 1", got)
	}
	as2 := w.session(t, p, alice)
	if as2 == as {
		t.Fatal("alice got her ended session back")
	}

	// A cancelled context (as on a signal) still revokes.
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	p.EndAll(cancelled)
	if got := w.count(api.RouteRevoke) - revokes; got != 3 {
		t.Fatalf("%d revokes after EndAll, want 3", got)
	}
	w.wantEnded(t, as2)
	w.wantEnded(t, bs)
	if p.Len() != 0 {
		t.Fatalf("Len = %d after EndAll, want 0", p.Len())
	}
	mints := w.count(api.RouteScoped)
	if _, err := p.Session(ctx, bob.caller.ID(), w.source(bob, nil)); !errors.Is(err, gateway.ErrPoolClosed) {
		t.Fatalf("after EndAll: %v, want ErrPoolClosed", err)
	}
	if w.count(api.RouteScoped) != mints {
		t.Fatal("a closed pool minted")
	}
}

func TestNewPoolRefusesBadConfig(t *testing.T) {
	var c gateway.Client // never used: NewPool sends nothing
	many := make([]string, api.MaxObjects+1)
	for i := range many {
		many[i] = fmt.Sprintf("tag-%d", i)
	}
	for _, tc := range []struct {
		name string
		cfg  gateway.PoolConfig
		want string
	}{
		{"no minter", gateway.PoolConfig{Objects: []string{"t"}}, "no minter"},
		{"no objects", gateway.PoolConfig{Minter: &c}, "no objects"},
		{"empty object", gateway.PoolConfig{Minter: &c, Objects: []string{"t", ""}}, "empty"},
		{"too many objects", gateway.PoolConfig{Minter: &c, Objects: many}, "at most 64"},
		{"negative MaxCallers", gateway.PoolConfig{Minter: &c, Objects: []string{"t"}, MaxCallers: -1}, "MaxCallers"},
		{"negative MaxRetryWait", gateway.PoolConfig{Minter: &c, Objects: []string{"t"}, MaxRetryWait: -time.Second}, "MaxRetryWait"},
		{"negative RefusedFor", gateway.PoolConfig{Minter: &c, Objects: []string{"t"}, RefusedFor: -time.Second}, "RefusedFor"},
		{"negative MaxRefusedCallers", gateway.PoolConfig{Minter: &c, Objects: []string{"t"}, MaxRefusedCallers: -1}, "MaxRefusedCallers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := gateway.NewPool(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewPool = %v, %v; want an error naming %q", p, err, tc.want)
			}
		})
	}

	p, err := gateway.NewPool(gateway.PoolConfig{Minter: &c, Objects: []string{"t"}})
	if err != nil {
		t.Fatal(err)
	}
	src := func(context.Context) (gateway.SubjectToken, error) { return gateway.SubjectToken{}, nil }
	if _, err := p.Session(context.Background(), "", src); err == nil || !strings.Contains(err.Error(), "caller id") {
		t.Errorf("empty caller id: %v", err)
	}
	if _, err := p.Session(context.Background(), "someone", nil); err == nil || !strings.Contains(err.Error(), "subject") {
		t.Errorf("no subject source: %v", err)
	}
	if _, err := p.Session(context.Background(), "someone", src); err == nil || !strings.Contains(err.Error(), "empty token") {
		t.Errorf("empty subject token: %v", err)
	}
	if p.Len() != 0 {
		t.Errorf("Len = %d after refused calls, want 0", p.Len())
	}
}

func TestSubjectTokenNeverPrinted(t *testing.T) {
	const secret = "eyJhbGciOiJFUzI1NiJ9.secret-payload.signature"
	tok := gateway.SubjectToken{Token: secret, Expiry: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	var out bytes.Buffer
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%d"} {
		fmt.Fprintf(&out, verb+"\n", tok)
	}
	slog.New(slog.NewJSONHandler(&out, nil)).Info("token", "subject", tok)
	slog.New(slog.NewTextHandler(&out, nil)).Info("token", "subject", tok)
	if strings.Contains(out.String(), "secret-payload") {
		t.Fatalf("the token was printed:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "2030-01-02T03:04:05Z") {
		t.Fatalf("the expiry is not shown:\n%s", out.String())
	}
}

// Widen: a key the user's session covers changes nothing; another key
// revokes that session first and mints one covering it, which renewals
// keep; past api.MaxObjects keys it is a *ScopeFullError and nothing is
// minted.
func TestPoolWiden(t *testing.T) {
	w := newPoolWorld(t)
	clock := &fakeClock{}
	objects := []string{w.ttag}
	for i := len(objects); i < api.MaxObjects-1; i++ {
		objects = append(objects, fmt.Sprintf("filler-%02d", i))
	}
	p := w.pool(t, gateway.PoolConfig{Now: clock.Now, Objects: objects})
	alice := w.user(t, "alice")
	src := w.source(alice, nil)
	ctx := context.Background()

	first := w.session(t, p, alice)
	if s, err := p.Widen(ctx, alice.caller.ID(), src, w.ttag); err != nil || s != first {
		t.Fatalf("Widen to a covered key: %v, same %v", err, s == first)
	}
	mints, revokes := w.count(api.RouteScoped), w.count(api.RouteRevoke)
	wider, err := p.Widen(ctx, alice.caller.ID(), src, "minted-in-the-folder")
	if err != nil {
		t.Fatal(err)
	}
	if wider == first || !slices.Contains(wider.Objects(), "minted-in-the-folder") {
		t.Fatalf("not widened: %v", wider.Objects())
	}
	if w.count(api.RouteScoped)-mints != 1 || w.count(api.RouteRevoke)-revokes != 1 {
		t.Fatal("widening did not revoke one session and mint one")
	}
	w.wantEnded(t, first)
	// A renewal keeps the widened key.
	clock.Set(api.MaxScopedTTL - 20*time.Second)
	renewed := w.session(t, p, alice)
	if renewed == wider || !slices.Contains(renewed.Objects(), "minted-in-the-folder") {
		t.Fatalf("renewed session covers %v", renewed.Objects())
	}
	// One more key would be 65.
	mints = w.count(api.RouteScoped)
	_, err = p.Widen(ctx, alice.caller.ID(), src, "one-too-many")
	var full *gateway.ScopeFullError
	if !errors.As(err, &full) || full.Count != api.MaxObjects+1 || full.Max != api.MaxObjects {
		t.Fatalf("Widen past the cap: %v", err)
	}
	if w.count(api.RouteScoped) != mints {
		t.Fatal("a refused widen minted a session")
	}
	if s := w.session(t, p, alice); s != renewed {
		t.Fatal("a refused widen changed the user's session")
	}
}
