package devstack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/pdmcp/pdmcp/auth/devidp"
)

// KeycloakInfo is keycloak.json, which deploy/keycloak/test/keycloak.sh
// writes once its Keycloak serves the realm.
type KeycloakInfo struct {
	Version           string `json:"version"`
	URL               string `json:"url"`
	Issuer            string `json:"issuer"`
	Realm             string `json:"realm"`
	CAFile            string `json:"caFile"`
	AdminUser         string `json:"adminUser"`
	AdminPasswordFile string `json:"adminPasswordFile"`
}

// LoadKeycloakInfo reads keycloak.json.
func LoadKeycloakInfo(path string) (*KeycloakInfo, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s (start Keycloak with deploy/keycloak/test/keycloak.sh start --state <the same state folder>): %w", path, err)
	}
	var k KeycloakInfo
	if err := json.Unmarshal(b, &k); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if k.URL == "" || k.Issuer == "" || k.Realm == "" || k.CAFile == "" || k.AdminUser == "" || k.AdminPasswordFile == "" {
		return nil, fmt.Errorf("%s lacks one of url, issuer, realm, caFile, adminUser, adminPasswordFile", path)
	}
	return &k, nil
}

// keycloakProvider readies a running Keycloak with the realm of
// deploy/keycloak for the stack: it makes the development users (enabled,
// with their development passwords), writes the adapter client's secret
// (which Keycloak generated at import), and returns each user's subject
// (Keycloak's user id), which the Gateway maps, and that secret.
func keycloakProvider(ctx context.Context, k *KeycloakInfo) (subjects map[string]string, secret string, err error) {
	caPEM, err := os.ReadFile(k.CAFile)
	if err != nil {
		return nil, "", fmt.Errorf("keycloak: %w", err)
	}
	hc, err := trustingClient(caPEM)
	if err != nil {
		return nil, "", fmt.Errorf("keycloak: %w", err)
	}
	a, err := newKeycloakAdmin(ctx, hc, k)
	if err != nil {
		return nil, "", err
	}
	subjects = map[string]string{}
	for _, u := range devUsers {
		id, err := a.ensureUser(ctx, u.name, u.password)
		if err != nil {
			return nil, "", fmt.Errorf("keycloak: user %s: %w", u.name, err)
		}
		subjects[u.name] = id
	}
	secret, err = a.clientSecret(ctx, devidp.DefaultAdapterClientID)
	if err != nil {
		return nil, "", err
	}
	return subjects, secret, nil
}

// keycloakAdmin is the little of Keycloak's admin REST API the stack uses,
// as the administrator keycloak.sh made.
type keycloakAdmin struct {
	hc    *http.Client
	base  string // <url>/admin/realms/<realm>
	token string
}

func newKeycloakAdmin(ctx context.Context, hc *http.Client, k *KeycloakInfo) (*keycloakAdmin, error) {
	pw, err := os.ReadFile(k.AdminPasswordFile)
	if err != nil {
		return nil, fmt.Errorf("keycloak: %w", err)
	}
	form := url.Values{"grant_type": {"password"}, "client_id": {"admin-cli"},
		"username": {k.AdminUser}, "password": {strings.TrimSpace(string(pw))}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, k.URL+"/realms/master/protocol/openid-connect/token",
		strings.NewReader(form.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("keycloak: admin sign-in: %w", err)
	}
	defer resp.Body.Close()
	var tr struct {
		AccessToken string `json:"access_token"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&tr); err != nil || tr.AccessToken == "" {
		return nil, fmt.Errorf("keycloak: admin sign-in as %s refused (HTTP %d)", k.AdminUser, resp.StatusCode)
	}
	return &keycloakAdmin{hc: hc, base: k.URL + "/admin/realms/" + url.PathEscape(k.Realm), token: tr.AccessToken}, nil
}

var errKeycloakNotFound = errors.New("not found")

// do sends one admin request; a status other than want is an error that
// names it (never the body, which may echo a password).
func (a *keycloakAdmin) do(ctx context.Context, method, path string, body, out any, want int) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return fmt.Errorf("keycloak: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return fmt.Errorf("keycloak: %s %s: %w", method, path, errKeycloakNotFound)
	}
	if resp.StatusCode != want {
		return fmt.Errorf("keycloak: %s %s: HTTP %d", method, path, resp.StatusCode)
	}
	if out != nil {
		return json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(out)
	}
	return nil
}

// ensureUser makes the user when missing, enables it, sets its password and
// returns its id.
func (a *keycloakAdmin) ensureUser(ctx context.Context, name, password string) (string, error) {
	id, err := a.userID(ctx, name)
	if err != nil {
		return "", err
	}
	if id == "" {
		if err := a.do(ctx, http.MethodPost, "/users", map[string]any{"username": name, "enabled": true,
			"emailVerified": true, "email": name + "@example.test", "firstName": name, "lastName": "Dev"}, nil, http.StatusCreated); err != nil {
			return "", err
		}
		if id, err = a.userID(ctx, name); err != nil || id == "" {
			return "", fmt.Errorf("keycloak: user %s not found after creating it: %v", name, err)
		}
	}
	if err := a.do(ctx, http.MethodPut, "/users/"+id, map[string]any{"enabled": true}, nil, http.StatusNoContent); err != nil {
		return "", err
	}
	return id, a.do(ctx, http.MethodPut, "/users/"+id+"/reset-password",
		map[string]any{"type": "password", "value": password, "temporary": false}, nil, http.StatusNoContent)
}

func (a *keycloakAdmin) userID(ctx context.Context, name string) (string, error) {
	var users []struct {
		ID       string `json:"id"`
		Username string `json:"username"`
	}
	if err := a.do(ctx, http.MethodGet, "/users?exact=true&username="+url.QueryEscape(name), nil, &users, http.StatusOK); err != nil {
		return "", err
	}
	for _, u := range users {
		if u.Username == name {
			return u.ID, nil
		}
	}
	return "", nil
}

// clientSecret reads a confidential client's secret.
func (a *keycloakAdmin) clientSecret(ctx context.Context, clientID string) (string, error) {
	var cs []struct {
		ID string `json:"id"`
	}
	if err := a.do(ctx, http.MethodGet, "/clients?clientId="+url.QueryEscape(clientID), nil, &cs, http.StatusOK); err != nil {
		return "", err
	}
	if len(cs) != 1 {
		return "", fmt.Errorf("keycloak: the realm has no client %s: import deploy/keycloak/realm-pdmcp.json", clientID)
	}
	var s struct {
		Value string `json:"value"`
	}
	if err := a.do(ctx, http.MethodGet, "/clients/"+cs[0].ID+"/client-secret", nil, &s, http.StatusOK); err != nil {
		return "", err
	}
	if s.Value == "" {
		return "", fmt.Errorf("keycloak: client %s has no secret", clientID)
	}
	return s.Value, nil
}
