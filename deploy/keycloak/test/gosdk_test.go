//go:build keycloak

package keycloaktest

import (
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/pdmcp/pdmcp/internal/mcptest"
)

// TestGoSDKOAuthClient signs two users in at Keycloak with the go-sdk's own
// OAuth client, configured as docs/hosts.md's "The go-sdk client" says
// (the pre-registered client mcp-host, the redirect on 127.0.0.1:18124):
// from the bare 401 it discovers the metadata and the realm and runs the
// code flow with PKCE; the person at the browser is a script filling
// Keycloak's own login page. Then alice reads the shared document and bob
// is refused it by the key server.
func TestGoSDKOAuthClient(t *testing.T) {
	s := newStack(t)
	connect := func(user string) *mcp.ClientSession {
		jar, _ := cookiejar.New(nil)
		return mcptest.ConnectOAuth(t, s.mcpURL, mcptest.SignIn{Issuer: s.kc.Issuer, ClientID: hostClient,
			RedirectURL: redirectURL, User: user, Password: password(user), HC: s.hc,
			Browser: &http.Client{Timeout: 60 * time.Second, Transport: s.hc.Transport, Jar: jar},
			Check: func(u *url.URL) {
				if !strings.HasPrefix(u.String(), s.kc.Issuer+"/") || u.Query().Get("redirect_uri") != redirectURL {
					t.Errorf("the SDK sends the browser to %s://%s%s with redirect %q", u.Scheme, u.Host, u.Path, u.Query().Get("redirect_uri"))
				}
			}})
	}
	m, isErr := read(t, connect("alice"), sharedDocument)
	if isErr || !strings.Contains(str(m["text"]), "Supplier proposal") {
		t.Errorf("alice reads %s: %v", sharedDocument, m)
	}
	m, isErr = read(t, connect("bob"), sharedDocument)
	if !isErr || m["layer"] != "keyserver" || m["code"] != "ACL_DENIED" {
		t.Errorf("bob reads %s: %v, want keyserver ACL_DENIED", sharedDocument, m)
	}
}
