package devidp

import (
	"encoding/json"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"
)

// realmFile is the Keycloak realm pdmcp ships. The development provider
// must register what it registers, so that a host that signs in at `pdmcp
// dev` signs in at that Keycloak too.
const realmFile = "../../deploy/keycloak/realm-pdmcp.json"

type realmJSON struct {
	AccessTokenLifespan   int  `json:"accessTokenLifespan"`
	SSOSessionIdleTimeout int  `json:"ssoSessionIdleTimeout"`
	SSOSessionMaxLifespan int  `json:"ssoSessionMaxLifespan"`
	RevokeRefreshToken    bool `json:"revokeRefreshToken"`
	RefreshTokenMaxReuse  int  `json:"refreshTokenMaxReuse"`
	Clients               []struct {
		ClientID     string            `json:"clientId"`
		RedirectURIs []string          `json:"redirectUris"`
		Attributes   map[string]string `json:"attributes"`
	} `json:"clients"`
}

func loadRealm(t *testing.T) *realmJSON {
	t.Helper()
	b, err := os.ReadFile(realmFile)
	if err != nil {
		t.Fatal(err)
	}
	var r realmJSON
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("%s: %v", realmFile, err)
	}
	return &r
}

// clientLifespan is a client's access.token.lifespan attribute, or the
// realm's accessTokenLifespan when the client sets none (as Keycloak reads
// it).
func (r *realmJSON) clientLifespan(t *testing.T, clientID string) time.Duration {
	t.Helper()
	for _, c := range r.Clients {
		if c.ClientID != clientID {
			continue
		}
		v, ok := c.Attributes["access.token.lifespan"]
		if !ok || v == "" {
			return time.Duration(r.AccessTokenLifespan) * time.Second
		}
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("client %s: access.token.lifespan %q is not a positive number of seconds", clientID, v)
		}
		return time.Duration(n) * time.Second
	}
	t.Fatalf("the realm has no client %s", clientID)
	return 0
}

func TestRealmParityRedirectURIs(t *testing.T) {
	r := loadRealm(t)
	for _, c := range r.Clients {
		if c.ClientID != DefaultHostClientID {
			continue
		}
		if !slices.Equal(c.RedirectURIs, DefaultHostRedirectURIs()) {
			t.Errorf("the realm's %s redirectUris\n  %q\nare not DefaultHostRedirectURIs\n  %q\n(same entries, same order)",
				c.ClientID, c.RedirectURIs, DefaultHostRedirectURIs())
		}
		return
	}
	t.Fatalf("the realm has no client %s", DefaultHostClientID)
}

func TestRealmParityLifetimes(t *testing.T) {
	r := loadRealm(t)
	sec := func(n int) time.Duration { return time.Duration(n) * time.Second }
	for _, c := range []struct {
		what  string
		realm time.Duration
		dev   time.Duration
	}{
		{"host client's access tokens (mcp-host access.token.lifespan)", r.clientLifespan(t, DefaultHostClientID), DefaultAccessTokenLifetime},
		{"exchanged tokens (mcp-adapter's, the realm's accessTokenLifespan)", r.clientLifespan(t, DefaultAdapterClientID), DefaultExchangedTokenLifetime},
		{"an unused refresh token (ssoSessionIdleTimeout)", sec(r.SSOSessionIdleTimeout), DefaultRefreshTokenLifetime},
		{"one sign-in kept alive by refreshing (ssoSessionMaxLifespan)", sec(r.SSOSessionMaxLifespan), DefaultSignInLifetime},
	} {
		if c.realm != c.dev {
			t.Errorf("%s: the realm says %s, devidp %s", c.what, c.realm, c.dev)
		}
	}
	// Gemini CLI counts a token as expired five minutes early: a host
	// token must outlive that margin, or Gemini refreshes on every request.
	if DefaultAccessTokenLifetime <= 5*time.Minute {
		t.Errorf("host access tokens live %s: Gemini CLI would refresh them on every request", DefaultAccessTokenLifetime)
	}
	// Rotation as devidp does it: every refresh token is single-use.
	if !r.RevokeRefreshToken || r.RefreshTokenMaxReuse != 0 {
		t.Errorf("the realm's refresh tokens: revokeRefreshToken %v, refreshTokenMaxReuse %d; want true, 0 (single use, as devidp)",
			r.RevokeRefreshToken, r.RefreshTokenMaxReuse)
	}
}
