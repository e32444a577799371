//go:build keycloak

package keycloaktest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
)

// kcAdmin calls Keycloak's admin REST API for the realm, as the bootstrap
// administrator keycloak.sh made.
type kcAdmin struct {
	kc    *kcInfo
	hc    *http.Client
	token string
}

func newAdmin(t *testing.T, kc *kcInfo, hc *http.Client) *kcAdmin {
	t.Helper()
	pw, err := os.ReadFile(kc.AdminPasswordFile)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.PostForm(kc.URL+"/realms/master/protocol/openid-connect/token", url.Values{
		"grant_type": {"password"}, "client_id": {"admin-cli"},
		"username": {kc.AdminUser}, "password": {strings.TrimSpace(string(pw))},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var tr struct {
		AccessToken string `json:"access_token"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&tr); err != nil || tr.AccessToken == "" {
		t.Fatalf("admin sign-in: HTTP %d", resp.StatusCode)
	}
	return &kcAdmin{kc: kc, hc: hc, token: tr.AccessToken}
}

// do sends one admin request for the realm; path is under
// /admin/realms/<realm>. It returns the status, the Location header and
// the body.
func (a *kcAdmin) do(t *testing.T, method, path string, body any) (int, string, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, a.kc.URL+"/admin/realms/"+a.kc.Realm+path, rd)
	req.Header.Set("Authorization", "Bearer "+a.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Location"), b
}

func (a *kcAdmin) must(t *testing.T, method, path string, body any, want ...int) []byte {
	t.Helper()
	st, _, b := a.do(t, method, path, body)
	for _, w := range want {
		if st == w {
			return b
		}
	}
	t.Fatalf("admin %s %s: HTTP %d: %s", method, path, st, b)
	return nil
}

// ensureUser makes an enabled user with a password and returns its id.
func (a *kcAdmin) ensureUser(t *testing.T, name, password string) string {
	t.Helper()
	id := a.userID(t, name)
	if id == "" {
		a.must(t, http.MethodPost, "/users", map[string]any{
			"username": name, "enabled": true, "emailVerified": true,
			"email": name + "@example.test", "firstName": name, "lastName": "Test",
		}, http.StatusCreated)
		id = a.userID(t, name)
	}
	a.setEnabled(t, id, true)
	a.must(t, http.MethodPut, "/users/"+id+"/reset-password",
		map[string]any{"type": "password", "value": password, "temporary": false}, http.StatusNoContent)
	return id
}

func (a *kcAdmin) userID(t *testing.T, name string) string {
	t.Helper()
	ids := a.idsWhere(t, "/users?exact=true&username="+url.QueryEscape(name), "username", name)
	if len(ids) == 0 {
		return ""
	}
	return ids[0]
}

// idsWhere lists the ids of the entities the listing at path returns
// whose field is value.
func (a *kcAdmin) idsWhere(t *testing.T, path, field, value string) []string {
	t.Helper()
	var list []map[string]any
	_ = json.Unmarshal(a.must(t, http.MethodGet, path, nil, http.StatusOK), &list)
	var ids []string
	for _, e := range list {
		if e[field] == value {
			id, _ := e["id"].(string)
			ids = append(ids, id)
		}
	}
	return ids
}

func (a *kcAdmin) setEnabled(t *testing.T, id string, on bool) {
	t.Helper()
	a.must(t, http.MethodPut, "/users/"+id, map[string]any{"enabled": on}, http.StatusNoContent)
}

// clientUUID is the internal id of the client with this client id.
func (a *kcAdmin) clientUUID(t *testing.T, clientID string) string {
	t.Helper()
	ids := a.idsWhere(t, "/clients?clientId="+url.QueryEscape(clientID), "clientId", clientID)
	if len(ids) != 1 {
		t.Fatalf("client %s: %d found", clientID, len(ids))
	}
	return ids[0]
}

func (a *kcAdmin) clientSecret(t *testing.T, clientID string) string {
	t.Helper()
	var s struct {
		Value string `json:"value"`
	}
	_ = json.Unmarshal(a.must(t, http.MethodGet, "/clients/"+a.clientUUID(t, clientID)+"/client-secret", nil, http.StatusOK), &s)
	if s.Value == "" {
		t.Fatalf("client %s has no secret", clientID)
	}
	return s.Value
}

func (a *kcAdmin) scopeID(t *testing.T, name string) string {
	t.Helper()
	ids := a.idsWhere(t, "/client-scopes", "name", name)
	if len(ids) == 0 {
		t.Fatalf("no client scope %s", name)
	}
	return ids[0]
}

// addOptionalScope gives a client an optional scope until the test ends.
func (a *kcAdmin) addOptionalScope(t *testing.T, clientID, scope string) {
	t.Helper()
	path := fmt.Sprintf("/clients/%s/optional-client-scopes/%s", a.clientUUID(t, clientID), a.scopeID(t, scope))
	a.must(t, http.MethodPut, path, nil, http.StatusNoContent)
	t.Cleanup(func() { a.must(t, http.MethodDelete, path, nil, http.StatusNoContent) })
}

// realmKeys lists the realm's keys: kid, algorithm, status and provider.
type realmKey struct {
	Kid        string `json:"kid"`
	Algorithm  string `json:"algorithm"`
	Status     string `json:"status"`
	ProviderID string `json:"providerId"`
	Use        string `json:"use"`
}

func (a *kcAdmin) keys(t *testing.T) []realmKey {
	t.Helper()
	var k struct {
		Keys []realmKey `json:"keys"`
	}
	_ = json.Unmarshal(a.must(t, http.MethodGet, "/keys", nil, http.StatusOK), &k)
	return k.Keys
}

// rotateRSAKey adds a new RS256 signing key with a priority above every
// other, which Keycloak then signs with; the old keys stay published. It
// returns the component id.
func (a *kcAdmin) rotateRSAKey(t *testing.T, name string) string {
	t.Helper()
	var realm struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(a.must(t, http.MethodGet, "", nil, http.StatusOK), &realm)
	st, loc, b := a.do(t, http.MethodPost, "/components", map[string]any{
		"name": name, "providerId": "rsa-generated", "providerType": "org.keycloak.keys.KeyProvider", "parentId": realm.ID,
		"config": map[string][]string{"priority": {"1000"}, "enabled": {"true"}, "active": {"true"},
			"algorithm": {"RS256"}, "keySize": {"2048"}},
	})
	if st != http.StatusCreated {
		t.Fatalf("add key: HTTP %d: %s", st, b)
	}
	return loc[strings.LastIndex(loc, "/")+1:]
}

// endOnlineSessions ends the user's online sessions, as an idle timeout or
// a sign-out would, and leaves the offline ones. It returns how many it
// ended.
func (a *kcAdmin) endOnlineSessions(t *testing.T, userID string) int {
	t.Helper()
	var ss []struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(a.must(t, http.MethodGet, "/users/"+userID+"/sessions", nil, http.StatusOK), &ss)
	for _, s := range ss {
		a.must(t, http.MethodDelete, "/sessions/"+s.ID, nil, http.StatusNoContent)
	}
	return len(ss)
}
