package devidp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// server is the library's LegacyServer with the provider's policy on top.
// Each override says what the library does not do by itself.
type server struct {
	*op.LegacyServer
	p *Provider
}

// VerifyAuthRequest applies the host client's redirect rule (matchRedirect). It runs before
// the library's redirect check, and a refusal here is shown, never sent to
// the unchecked redirect URI.
func (s *server) VerifyAuthRequest(ctx context.Context, r *op.Request[oidc.AuthRequest]) (*op.ClientRequest[oidc.AuthRequest], error) {
	if r.Data.ClientID != s.p.host.id {
		return nil, oidc.ErrInvalidRequestRedirectURI().WithDescription("only client %s signs users in here", s.p.host.id)
	}
	if err := matchRedirect(s.p.host.redirectURIs, r.Data.RedirectURI); err != nil {
		return nil, oidc.ErrInvalidRequestRedirectURI().WithDescription("%s", err.Error())
	}
	cr, err := s.LegacyServer.VerifyAuthRequest(ctx, r)
	if err != nil {
		return nil, err
	}
	// The library then matches the URI exactly against this copy's list.
	cr.Client = s.p.host.withRedirect(r.Data.RedirectURI)
	return cr, nil
}

// Authorize requires PKCE S256 (the library also lets plain and no PKCE
// through) and refuses offline_access and prompt=none. The redirect URI is
// checked by now, so these refusals go back to the client as RFC 6749 error
// redirects.
func (s *server) Authorize(ctx context.Context, r *op.ClientRequest[oidc.AuthRequest]) (*op.Redirect, error) {
	switch {
	case r.Data.CodeChallenge == "":
		return nil, oidc.ErrInvalidRequest().WithDescription("code_challenge is required: use PKCE with S256")
	case r.Data.CodeChallengeMethod != oidc.CodeChallengeMethodS256:
		return nil, oidc.ErrInvalidRequest().WithDescription("code_challenge_method must be S256")
	case slices.Contains(r.Data.Scopes, oidc.ScopeOfflineAccess):
		return nil, oidc.ErrInvalidScope().WithDescription("offline_access is not offered")
	case slices.Contains(r.Data.Prompt, oidc.PromptNone):
		// No sign-in session is kept, so every sign-in needs the form.
		return nil, oidc.ErrLoginRequired().WithDescription("no session is kept; sign in with the form")
	case r.Data.ResponseMode != "" && r.Data.ResponseMode != oidc.ResponseModeQuery:
		// Only query responses are offered (and carry iss); the refusal
		// itself goes back in the query.
		r.Data.ResponseMode = oidc.ResponseModeQuery
		return nil, oidc.ErrInvalidRequest().WithDescription("response_mode must be query")
	}
	return s.LegacyServer.Authorize(ctx, r)
}

// VerifyClient answers a failed client authentication with 401 (RFC 6749
// section 5.2); the library answers 400.
func (s *server) VerifyClient(ctx context.Context, r *op.Request[op.ClientCredentials]) (op.Client, error) {
	c, err := s.LegacyServer.VerifyClient(ctx, r)
	var oe *oidc.Error
	if errors.As(err, &oe) && oe.ErrorType == oidc.InvalidClient {
		if oe.Description == "" {
			oe.Description = "client authentication failed"
		}
		return nil, op.NewStatusError(oe, http.StatusUnauthorized)
	}
	return c, err
}

// CodeExchange redeems a code with the library, then finishes the tokens
// (finishTokens) and, for the host client, adds the sign-in's first refresh
// token: the library issues one only with offline_access, which is never
// granted here.
func (s *server) CodeExchange(ctx context.Context, r *op.ClientRequest[oidc.AccessTokenRequest]) (*op.Response, error) {
	resp, err := s.LegacyServer.CodeExchange(ctx, r)
	if err != nil {
		return nil, err
	}
	tr, rec, err := s.finishTokens(resp)
	if err != nil {
		return nil, err
	}
	tr.RefreshToken = ""
	if rec.clientID == s.p.host.id {
		if tr.RefreshToken, err = s.p.store.issueRefresh(rec); err != nil {
			return nil, oidc.ErrServerError().WithParent(err)
		}
	}
	return resp, nil
}

// RefreshToken redeems a host client's refresh token with the library
// (which retires it and returns the next one through the storage), then
// finishes the tokens like a code's.
func (s *server) RefreshToken(ctx context.Context, r *op.ClientRequest[oidc.RefreshTokenRequest]) (*op.Response, error) {
	resp, err := s.LegacyServer.RefreshToken(ctx, r)
	if err != nil {
		return nil, err
	}
	if _, _, err := s.finishTokens(resp); err != nil {
		return nil, err
	}
	s.p.log.Info("tokens refreshed", "client", r.Client.GetID())
	return resp, nil
}

// finishTokens completes a library-made token response: the access token
// gets typ at+jwt and the provider's clock, the ID token gets aud = the host
// client and the at_hash of the final access token, and is left out when
// openid was not granted (the library always makes one).
func (s *server) finishTokens(resp *op.Response) (*oidc.AccessTokenResponse, tokenRecord, error) {
	tr, ok := resp.Data.(*oidc.AccessTokenResponse)
	if !ok {
		return nil, tokenRecord{}, oidc.ErrServerError().WithParent(fmt.Errorf("devidp: unexpected token response %T", resp.Data))
	}
	at, rec, err := s.p.finishAccessToken(tr.AccessToken)
	if err != nil {
		return nil, tokenRecord{}, oidc.ErrServerError().WithParent(err)
	}
	idToken := ""
	if slices.Contains(rec.scopes, oidc.ScopeOpenID) && tr.IDToken != "" {
		if idToken, err = s.p.finishIDToken(tr.IDToken, at); err != nil {
			return nil, tokenRecord{}, oidc.ErrServerError().WithParent(err)
		}
	}
	tr.AccessToken, tr.IDToken = at, idToken
	tr.ExpiresIn = s.p.expiresIn(rec)
	return tr, rec, nil
}

// TokenExchange names the target for the library, which takes the issued
// token's aud from the audience parameter only: a request that asks for the
// Gateway by scope or resource alone gets audience set here, and any other
// target is refused. The issued token is then finished like a user's.
func (s *server) TokenExchange(ctx context.Context, r *op.ClientRequest[oidc.TokenExchangeRequest]) (*op.Response, error) {
	gw := s.p.gatewayAud
	targets := append(slices.Clone([]string(r.Data.Audience)), r.Data.Resource...)
	if len(targets) == 0 && slices.Contains(r.Data.Scopes, gw) {
		targets = []string{gw}
	}
	if len(targets) == 0 {
		return nil, oidc.ErrInvalidTarget().WithDescription("name the target: audience=%s", gw)
	}
	for _, t := range targets {
		if t != gw {
			return nil, oidc.ErrInvalidTarget().WithDescription("only audience %s can be requested", gw)
		}
	}
	r.Data.Audience, r.Data.Resource = oidc.Audience{gw}, nil

	resp, err := s.LegacyServer.TokenExchange(ctx, r)
	if err != nil {
		return nil, err
	}
	xr, ok := resp.Data.(*oidc.TokenExchangeResponse)
	if !ok {
		return nil, oidc.ErrServerError().WithParent(fmt.Errorf("devidp: unexpected exchange response %T", resp.Data))
	}
	at, rec, err := s.p.finishAccessToken(xr.AccessToken)
	if err != nil {
		return nil, oidc.ErrServerError().WithParent(err)
	}
	xr.AccessToken, xr.RefreshToken = at, ""
	xr.ExpiresIn = s.p.expiresIn(rec)
	return resp, nil
}

// JWTProfile is refused: the library offers the grant whenever it can.
func (s *server) JWTProfile(context.Context, *op.Request[oidc.JWTProfileGrantRequest]) (*op.Response, error) {
	return nil, oidc.ErrUnsupportedGrantType().WithDescription("the JWT bearer grant is not offered")
}

// Discovery serves the same document as the metadata handler in front.
func (s *server) Discovery(context.Context, *op.Request[struct{}]) (*op.Response, error) {
	return op.NewResponse(s.p.discovery()), nil
}

// finishAccessToken re-signs a library-minted access token with typ at+jwt
// (RFC 9068; the library hard-codes JWT) and with iat and nbf from the
// provider's clock, and returns the token's record.
func (p *Provider) finishAccessToken(raw string) (string, tokenRecord, error) {
	var rec tokenRecord
	out, err := p.resign(raw, typAccessToken, func(c map[string]any) error {
		jti, _ := c["jti"].(string)
		r, ok := p.store.token(jti)
		if !ok {
			return errors.New("devidp: access token without a record")
		}
		if c["sub"] != r.subject {
			return errors.New("devidp: access token subject differs from its record")
		}
		rec = r
		c["iat"] = r.issued.Unix()
		c["nbf"] = r.issued.Unix()
		c["exp"] = r.expires.Unix()
		return nil
	})
	return out, rec, err
}

// finishIDToken sets the ID token's aud to the host client alone (the library
// joins in the access token's audience), its at_hash to that of the final
// access token, and its times to the provider's clock.
func (p *Provider) finishIDToken(raw, accessToken string) (string, error) {
	return p.resign(raw, typIDToken, func(c map[string]any) error {
		hash, err := oidc.ClaimHash(accessToken, p.keys.signing().alg)
		if err != nil {
			return err
		}
		now := p.now()
		c["aud"] = []string{p.host.id}
		c["at_hash"] = hash
		c["iat"] = now.Unix()
		c["exp"] = now.Add(p.atLifetime).Unix()
		delete(c, "nbf")
		return nil
	})
}

func (p *Provider) expiresIn(rec tokenRecord) uint64 {
	d := rec.expires.Sub(p.now())
	if d < 0 {
		return 0
	}
	return uint64(d / time.Second)
}

// metadataServer serves discovery and RFC 8414 metadata for the one issuer.
type metadataServer struct {
	op.UnimplementedMetadataServer
	p *Provider
}

func (m *metadataServer) OpenIDConfiguration(_ context.Context, r *op.Request[op.MetadataRequest]) (*op.Response, error) {
	return m.serve(r)
}

func (m *metadataServer) AuthorizationServerMetadata(_ context.Context, r *op.Request[op.MetadataRequest]) (*op.Response, error) {
	return m.serve(r)
}

func (m *metadataServer) serve(r *op.Request[op.MetadataRequest]) (*op.Response, error) {
	if r.Data.IssuerPath != m.p.issuerPath {
		return nil, op.NewStatusError(oidc.ErrInvalidRequest().WithDescription("no issuer at this path"), http.StatusNotFound)
	}
	return op.NewResponse(m.p.discovery()), nil
}

// discoveryDocument is the library's metadata type plus what it has no field
// for.
type discoveryDocument struct {
	*oidc.DiscoveryConfiguration
	// AuthorizationResponseIssParameterSupported (RFC 9207): every
	// authorization response carries iss (withIssParameter).
	AuthorizationResponseIssParameterSupported bool `json:"authorization_response_iss_parameter_supported"`
}

// discovery is the provider's metadata. It lists only what is served: the
// library's defaults would add implicit and JWT bearer grants, the id_token
// response types, plain PKCE, offline_access and endpoints not routed here.
// Refresh tokens are listed as a grant but offline_access is not a scope:
// the host client gets a refresh token without asking for one.
func (p *Provider) discovery() *discoveryDocument {
	return &discoveryDocument{AuthorizationResponseIssParameterSupported: true, DiscoveryConfiguration: &oidc.DiscoveryConfiguration{
		Issuer:                            p.issuer,
		AuthorizationEndpoint:             p.issuer + authorizePath,
		TokenEndpoint:                     p.issuer + tokenPath,
		JwksURI:                           p.issuer + keysPath,
		ScopesSupported:                   hostScopes(),
		ResponseTypesSupported:            []string{string(oidc.ResponseTypeCode)},
		ResponseModesSupported:            []string{string(oidc.ResponseModeQuery)},
		GrantTypesSupported:               []oidc.GrantType{oidc.GrantTypeCode, oidc.GrantTypeRefreshToken, oidc.GrantTypeTokenExchange},
		SubjectTypesSupported:             []string{"public"},
		IDTokenSigningAlgValuesSupported:  []string{string(p.keys.signing().alg)},
		TokenEndpointAuthMethodsSupported: []oidc.AuthMethod{oidc.AuthMethodNone, oidc.AuthMethodBasic, oidc.AuthMethodPost},
		CodeChallengeMethodsSupported:     []oidc.CodeChallengeMethod{oidc.CodeChallengeMethodS256},
		ClaimsSupported: []string{"iss", "sub", "aud", "exp", "iat", "nbf", "jti", "auth_time", "nonce", "amr",
			"azp", "client_id", "scope", "at_hash", "c_hash", "name", "preferred_username", "email", "email_verified"},
	}}
}
