//go:build keycloak

package keycloaktest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/auth/devidp"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/internal/devstack"
	"github.com/pdmcp/pdmcp/internal/testutil"
)

func slogTo(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }

// TestKeycloak runs every check against one Keycloak and one pdmcp: the
// cases share the realm, so they run in order, and the key rotation, which
// changes the realm for good, runs last.
func TestKeycloak(t *testing.T) {
	s := newStack(t)
	gw := s.env.Gateway
	t.Logf("Keycloak %s at %s", s.kc.Version, s.kc.Issuer)

	var alice, bob *signInResult
	t.Run("sign-in as the TypeScript SDK does it, for two users", func(t *testing.T) {
		alice = s.mustSignIn(t, "alice")
		bob = s.mustSignIn(t, "bob")
		t.Logf("authorization server metadata read from %s", alice.metadataURL)
		t.Logf("token response: expires_in %d, scope %q, refresh token %v, ID token %v",
			alice.ExpiresIn, alice.Scope, alice.RefreshToken != "", alice.IDToken != "")

		if alice.RefreshToken != "" {
			_, rc := claims(t, alice.RefreshToken)
			t.Logf("refresh token: typ %v, lifetime %vs", rc["typ"], num(rc["exp"])-num(rc["iat"]))
		}
		if alice.IDToken != "" {
			ih, ic := claims(t, alice.IDToken)
			t.Logf("ID token: header typ %v; typ %v, aud %v, azp %v, nonce %v", ih["typ"], ic["typ"], ic["aud"], ic["azp"], ic["nonce"] != nil)
		}
		// What pdmcp relies on, as Keycloak puts it in the host's token.
		h, c := claims(t, alice.AccessToken)
		t.Logf("access token header %v; claims typ=%v azp=%v aud=%v scope=%q lifetime=%vs sid? %v",
			h, c["typ"], c["azp"], c["aud"], c["scope"], num(c["exp"])-num(c["iat"]), c["sid"] != nil)
		if h["typ"] != "JWT" || h["alg"] != "RS256" || h["kid"] == nil {
			t.Errorf("access token header %v: want typ JWT, alg RS256, a kid", h)
		}
		if c["typ"] != "Bearer" || c["azp"] != hostClient || c["sub"] != s.subject["alice"] || c["iss"] != s.kc.Issuer {
			t.Errorf("access token claims: typ %v azp %v sub %v iss %v", c["typ"], c["azp"], c["sub"], c["iss"])
		}
		if aud := audiences(c["aud"]); !slices.Contains(aud, adapterClient) {
			t.Errorf("access token aud %v lacks %s: the realm's mcp-adapter-audience mapper is missing", aud, adapterClient)
		}
		if !slices.Contains(strings.Fields(c["scope"].(string)), "openid") {
			t.Errorf("access token scope %q lacks openid", c["scope"])
		}
		if c["nonce"] != nil {
			t.Error("the access token carries a nonce")
		}
		// mcp-host's access.token.lifespan, which devidp's default equals.
		if got, want := num(c["exp"])-num(c["iat"]), devidp.DefaultAccessTokenLifetime.Seconds(); got != want {
			t.Errorf("access token lifetime %vs, want mcp-host's %vs", got, want)
		}
		// Keycloak answers expires_in as exp less its clock at the answer, in
		// whole seconds: a token issued late in a second says one less.
		if life := int(devidp.DefaultAccessTokenLifetime.Seconds()); alice.ExpiresIn != life && alice.ExpiresIn != life-1 {
			t.Errorf("expires_in %d, want %d (or %d when issued across a second)", alice.ExpiresIn, life, life-1)
		}
		if alice.RefreshToken != "" {
			if _, rc := claims(t, alice.RefreshToken); num(rc["exp"])-num(rc["iat"]) != devidp.DefaultRefreshTokenLifetime.Seconds() {
				t.Errorf("refresh token lifetime %vs, want devidp's %v", num(rc["exp"])-num(rc["iat"]), devidp.DefaultRefreshTokenLifetime)
			}
		}
	})
	if alice == nil || bob == nil {
		t.FailNow()
	}

	t.Run("the exchanged token is for the Gateway", func(t *testing.T) {
		st, m := s.exchange(t, alice.AccessToken)
		if st != 200 {
			t.Fatalf("exchange: HTTP %d %v", st, m)
		}
		t.Logf("exchange answer: token_type %v issued_token_type %v expires_in %v refresh token %v scope %v",
			m["token_type"], m["issued_token_type"], m["expires_in"], m["refresh_token"] != nil, m["scope"])
		_, c := claims(t, m["access_token"].(string))
		t.Logf("exchanged token: azp=%v aud=%v scope=%q sub same=%v lifetime=%vs", c["azp"], c["aud"], c["scope"],
			c["sub"] == s.subject["alice"], num(c["exp"])-num(c["iat"]))
		if c["azp"] != adapterClient || c["sub"] != s.subject["alice"] {
			t.Errorf("exchanged token azp %v sub %v", c["azp"], c["sub"])
		}
		if aud := audiences(c["aud"]); !slices.Equal(aud, []string{gatewayAud}) {
			t.Errorf("exchanged token aud %v, want only %s", aud, gatewayAud)
		}
		if got := num(c["exp"]) - num(c["iat"]); got != devidp.DefaultExchangedTokenLifetime.Seconds() {
			t.Errorf("exchanged token lifetime %vs, want devidp's %v", got, devidp.DefaultExchangedTokenLifetime)
		}
	})

	t.Run("a used refresh token is refused: rotation", func(t *testing.T) {
		r := s.mustSignIn(t, "bob")
		next, st, body := s.refreshRaw(t, r.RefreshToken)
		if st != http.StatusOK || next.RefreshToken == "" {
			t.Fatalf("first refresh: HTTP %d %s", st, body)
		}
		if _, st, body = s.refreshRaw(t, r.RefreshToken); st != http.StatusBadRequest || !strings.Contains(body, "invalid_grant") {
			t.Errorf("second use of one refresh token: HTTP %d %s, want 400 invalid_grant", st, body)
		}
		t.Logf("Keycloak on a reused refresh token: %s", body)
	})

	t.Run("two users read the same document: text and ACL_DENIED", func(t *testing.T) {
		before := gw.Count(api.RouteScoped)
		a := s.connect(t, alice.AccessToken)
		b := s.connect(t, bob.AccessToken)
		m, isErr := read(t, a, sharedDocument)
		if isErr || !strings.Contains(str(m["text"]), "Supplier proposal") {
			t.Errorf("alice reads %s: %v", sharedDocument, m)
		}
		m, isErr = read(t, b, sharedDocument)
		if !isErr || m["layer"] != "keyserver" || m["code"] != "ACL_DENIED" {
			t.Errorf("bob reads %s: %v, want keyserver ACL_DENIED", sharedDocument, m)
		}
		if got := gw.Count(api.RouteScoped) - before; got != 2 {
			t.Errorf("scoped sessions minted: %d, want one per user", got)
		}
		// Each acted as their own principal.
		acting := map[string]bool{}
		for _, l := range s.auditLines(t) {
			if l["tool"] == "read_protected_document" {
				acting[str(l["actingAs"])] = true
			}
		}
		if !acting[s.principal("alice")] || !acting[s.principal("bob")] {
			t.Errorf("audit acting-as principals %v, want alice's and bob's", acting)
		}
	})

	t.Run("an ID token is refused", func(t *testing.T) {
		st, ch := s.bearerStatus(t, alice.IDToken)
		if st != 401 || !strings.Contains(ch, `error="invalid_token"`) {
			t.Errorf("ID token: HTTP %d %q", st, ch)
		}
		if c := s.lastRefusalClass(t); c != "not-an-access-token" {
			t.Errorf("audit class %q, want not-an-access-token", c)
		}
	})

	t.Run("a token for another client's audience is refused", func(t *testing.T) {
		st, m := s.exchange(t, alice.AccessToken)
		if st != 200 {
			t.Fatalf("exchange: %d %v", st, m)
		}
		st, ch := s.bearerStatus(t, m["access_token"].(string))
		if st != 401 || !strings.Contains(ch, `error="invalid_token"`) {
			t.Errorf("gateway-api token at pdmcp: HTTP %d %q", st, ch)
		}
		if c := s.lastRefusalClass(t); c != "wrong-audience" {
			t.Errorf("audit class %q, want wrong-audience", c)
		}
	})

	t.Run("offline_access at sign-in is refused: invalid_scope", func(t *testing.T) {
		_, err := s.signIn(t, "erin", "openid offline_access")
		var ae *devidp.AuthorizationError
		if !errors.As(err, &ae) || ae.Code != "invalid_scope" {
			t.Fatalf("sign-in with offline_access: %v, want invalid_scope", err)
		}
		t.Logf("Keycloak: %s: %s", ae.Code, ae.Description)
	})

	t.Run("a token from an offline session: pdmcp reports what Keycloak answers", func(t *testing.T) {
		// A realm that let the host ask for offline_access (what the realm
		// file prevents).
		s.admin.addOptionalScope(t, hostClient, "offline_access")
		r, err := s.signIn(t, "erin", "openid offline_access")
		if err != nil {
			t.Fatal(err)
		}
		if _, rc := claims(t, r.RefreshToken); rc["typ"] != "Offline" {
			t.Fatalf("refresh token typ %v, want Offline", rc["typ"])
		}
		st, em := s.exchange(t, r.AccessToken)
		t.Logf("Keycloak %s, exchange of the sign-in's access token: HTTP %d %v", s.kc.Version, st, em["error_description"])
		// Once the online session is gone (sign-out, idle timeout) the host
		// refreshes with its offline token: that access token is the
		// offline session's.
		t.Logf("online sessions ended: %d", s.admin.endOnlineSessions(t, s.subject["erin"]))
		offline := s.refresh(t, r.RefreshToken)
		st, em = s.exchange(t, offline)
		t.Logf("Keycloak %s, exchange of the offline session's access token: HTTP %d %v %v", s.kc.Version, st, em["error"], em["error_description"])

		before := gw.Count(api.RouteScoped)
		m, isErr := read(t, s.connect(t, offline), "proposal-aurora")
		switch {
		case st == 200:
			// Keycloak exchanges it: the user reads.
			if isErr || !strings.Contains(str(m["text"]), "Supplier proposal") {
				t.Errorf("Keycloak exchanged the offline-session token, but pdmcp answered %v", m)
			}
		default:
			if !isErr || m["layer"] != "adapter" || m["code"] != "TOKEN_EXCHANGE_REFUSED" ||
				!strings.Contains(str(m["detail"]), str(em["error_description"])) {
				t.Errorf("Keycloak refused the exchange (%v), pdmcp answered %v, want adapter TOKEN_EXCHANGE_REFUSED with Keycloak's reason", em, m)
			}
			if got := gw.Count(api.RouteScoped) - before; got != 0 {
				t.Errorf("the Gateway was asked for %d sessions", got)
			}
		}
	})

	t.Run("a disabled user's token is not exchanged", func(t *testing.T) {
		r := s.mustSignIn(t, "dave")
		s.admin.setEnabled(t, s.subject["dave"], false)
		t.Cleanup(func() { s.admin.setEnabled(t, s.subject["dave"], true) })
		before := gw.Count(api.RouteScoped)
		m, isErr := read(t, s.connect(t, r.AccessToken), "proposal-aurora")
		if !isErr || m["layer"] != "adapter" || m["code"] != "TOKEN_EXCHANGE_REFUSED" {
			t.Fatalf("disabled user: %v, want adapter TOKEN_EXCHANGE_REFUSED", m)
		}
		t.Logf("refusal detail: %s", m["detail"])
		if got := gw.Count(api.RouteScoped) - before; got != 0 {
			t.Errorf("the Gateway was asked for %d sessions", got)
		}
	})

	t.Run("claude mcp add with the realm's host client needs authentication", func(t *testing.T) {
		bin := claudeBin(t)
		home := t.TempDir()
		for _, d := range []string{"work", "config"} {
			if err := os.MkdirAll(filepath.Join(home, d), 0o700); err != nil {
				t.Fatal(err)
			}
		}
		out := runClaude(t, bin, home, s.kc.CAFile, "mcp", "add", "--transport", "http", "--client-id", hostClient,
			"--callback-port", "18124", serverName, s.mcpURL)
		if !strings.Contains(out, "Added HTTP MCP server "+serverName) {
			t.Fatalf("claude mcp add: %s", out)
		}
		out = runClaude(t, bin, home, s.kc.CAFile, "mcp", "list")
		want := serverName + ": " + s.mcpURL + " (HTTP) - ! Needs authentication"
		if !slices.Contains(strings.Split(out, "\n"), want) {
			t.Errorf("claude mcp list:\n%s\nwant the line %q", out, want)
		}
	})

	t.Run("a rotated realm key: new tokens after the key refresh, old ones while published", func(t *testing.T) {
		oldKid := kid(t, alice.AccessToken)
		s.admin.rotateRSAKey(t, "rotated-"+time.Now().Format("150405"))
		bobNew := s.mustSignIn(t, "bob")
		newKid := kid(t, bobNew.AccessToken)
		if newKid == oldKid {
			t.Fatalf("Keycloak still signs with %s after the rotation", oldKid)
		}
		published := false
		for _, k := range s.admin.keys(t) {
			if k.Kid == oldKid && (k.Status == "ACTIVE" || k.Status == "PASSIVE") {
				published = true
			}
		}
		if !published {
			t.Fatalf("the old key %s is not published any more", oldKid)
		}
		// The new kid is unknown to pdmcp and the Gateway until they fetch
		// the keys again: pdmcp does so at once for an unknown kid (at most
		// once per jwksRefreshMinSeconds, 1 here), so the first call may meet
		// the rate limit; it is retried until the refresh is due.
		var m map[string]any
		var isErr bool
		deadline := time.Now().Add(time.Minute)
		for {
			st, _ := s.bearerStatus(t, bobNew.AccessToken)
			if st != 401 || time.Now().After(deadline) {
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
		m, isErr = read(t, s.connect(t, bobNew.AccessToken), "proposal-aurora")
		if isErr {
			t.Errorf("token signed with the new key: %v", m)
		}
		m, isErr = read(t, s.connect(t, alice.AccessToken), "proposal-aurora")
		if isErr {
			t.Errorf("token signed with the old, still published key: %v", m)
		}
	})

	// Nothing secret in the audit or the log.
	s.stop()
	b, _ := os.ReadFile(s.audit)
	for _, where := range []string{string(b), s.log.String()} {
		for _, tok := range []string{alice.AccessToken, bob.AccessToken, s.secret} {
			if strings.Contains(where, tok[len(tok)/2:len(tok)/2+20]) {
				t.Error("a token or the client secret reached the audit file or the log")
			}
		}
	}
}

func kid(t *testing.T, token string) string {
	h, _ := claims(t, token)
	return str(h["kid"])
}

func num(v any) float64 {
	f, _ := v.(float64)
	return f
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// TestDevProviderKeycloak runs `pdmcp dev --provider keycloak`'s stack
// against the Keycloak keycloak.sh started, in its state folder (so the
// stack and Keycloak share the CA): a development user's token from
// Keycloak's sign-in reads a document, another user is refused by the key
// server.
func TestDevProviderKeycloak(t *testing.T) {
	kc := loadInfo(t)
	state := filepath.Dir(filepath.Dir(os.Getenv("KEYCLOAK_INFO")))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan *devstack.Info, 1)
	done := make(chan error, 1)
	log := &testutil.LogBuffer{}
	go func() {
		done <- devstack.Run(ctx, devstack.Options{State: state, Version: "test", Logger: slogTo(log),
			Keycloak: os.Getenv("KEYCLOAK_INFO"), Ready: func(i *devstack.Info) { ready <- i }})
	}()
	var info *devstack.Info
	select {
	case info = <-ready:
	case err := <-done:
		t.Fatalf("devstack.Run: %v\n%s", err, log.String())
	}
	if info.Issuer != kc.Issuer {
		t.Errorf("dev.json issuer %s, want Keycloak's %s", info.Issuer, kc.Issuer)
	}
	s := &stack{kc: kc, mcpURL: info.MCPURL}
	caPEM, _ := os.ReadFile(info.CAFile)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	s.hc = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	for user, want := range map[string]string{"alice": "", "bob": "ACL_DENIED"} {
		tok, err := devstack.Token(ctx, state, user)
		if err != nil {
			t.Fatalf("pdmcp dev token %s: %v", user, err)
		}
		if _, c := claims(t, tok); c["iss"] != kc.Issuer || c["azp"] != hostClient {
			t.Errorf("%s's token: iss %v azp %v", user, c["iss"], c["azp"])
		}
		m, isErr := read(t, s.connect(t, tok), sharedDocument)
		switch {
		case want == "" && (isErr || !strings.Contains(str(m["text"]), "Supplier proposal")):
			t.Errorf("%s reads %s: %v", user, sharedDocument, m)
		case want != "" && (!isErr || m["layer"] != "keyserver" || m["code"] != want):
			t.Errorf("%s reads %s: %v, want keyserver %s", user, sharedDocument, m, want)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("devstack.Run after Ctrl-C: %v", err)
	}
}
