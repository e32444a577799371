package devidp

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// forgetAfter is how long past its expiry a token's record is kept, so a
// late presentation is refused as expired rather than as unknown.
const forgetAfter = time.Hour

// tokenKind says which flow minted an access token.
type tokenKind int

const (
	kindUser    tokenKind = iota + 1 // code flow: a user's token for the adapter
	kindGateway                      // token exchange: for the Gateway audience
)

// tokenRecord is what the provider remembers about an access token it
// issued, keyed by jti. Token exchange accepts only subject tokens found here:
// the library verifies a subject token's issuer, signature and expiry but not
// its kind, so an ID token would otherwise pass as an access token.
type tokenRecord struct {
	kind     tokenKind
	subject  string
	clientID string
	audience []string
	scopes   []string
	authTime time.Time // of the sign-in behind a user's token
	issued   time.Time
	expires  time.Time
}

// storage is the op.Storage and op.TokenExchangeStorage. It lives in
// memory; with a state folder (Config.StateDir) every change is also
// written to the state file before it takes effect, so a restarted provider
// knows every sign-in and token the last one did.
type storage struct {
	p   *Provider
	dir string // "" when nothing is persisted

	mu       sync.Mutex
	authReqs map[string]*authRequest
	codes    map[string]string // code -> auth request id
	tokens   map[string]tokenRecord
	refresh  map[string]refreshRecord // by refreshKey
}

func newStorage(p *Provider, dir string) *storage {
	return &storage{p: p, dir: dir, authReqs: map[string]*authRequest{}, codes: map[string]string{},
		tokens: map[string]tokenRecord{}, refresh: map[string]refreshRecord{}}
}

// load fills the storage from a state file.
func (s *storage) load(st *stateFile) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, a := range st.AuthRequests {
		s.authReqs[id] = a.authRequest(id)
	}
	for code, id := range st.Codes {
		s.codes[code] = id
	}
	for jti, t := range st.Tokens {
		s.tokens[jti] = t.record()
	}
	for k, r := range st.Refresh {
		s.refresh[k] = r.record()
	}
}

// save writes the state file (see saveLocked).
func (s *storage) save() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.saveLocked()
}

// addSaved puts v under k in m, one of s's maps, after pruning, and saves
// the state; when the save fails, v is taken out again.
func addSaved[K comparable, V any](s *storage, m map[K]V, k K, v V) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pruneLocked()
	m[k] = v
	if err := s.saveLocked(); err != nil {
		delete(m, k)
		return err
	}
	return nil
}

// saveLocked writes the whole state to the state folder, if there is one.
// The caller holds s.mu and undoes its change when this fails, so memory
// never promises what a restart would not keep.
func (s *storage) saveLocked() error {
	if s.dir == "" {
		return nil
	}
	keys, err := marshalKeys(s.p.keys.all())
	if err != nil {
		return err
	}
	st := &stateFile{Version: stateVersion, CodeKey: s.p.codeKey[:], Keys: keys,
		AuthRequests: make(map[string]stateAuthRequest, len(s.authReqs)), Codes: s.codes,
		Tokens: make(map[string]stateToken, len(s.tokens)), Refresh: make(map[string]stateRefresh, len(s.refresh))}
	for id, a := range s.authReqs {
		st.AuthRequests[id] = a.toState()
	}
	for jti, t := range s.tokens {
		st.Tokens[jti] = t.toState()
	}
	for k, r := range s.refresh {
		st.Refresh[k] = r.toState()
	}
	return writeState(s.dir, st)
}

var (
	_ op.Storage                        = (*storage)(nil)
	_ op.TokenExchangeStorage           = (*storage)(nil)
	_ op.CanSetUserinfoFromRequest      = (*storage)(nil)
	_ op.CanGetPrivateClaimsFromRequest = (*storage)(nil)
)

// errUnknownAuthRequest is the answer for an unknown, expired or finished
// sign-in request.
var errUnknownAuthRequest = errors.New("sign-in request unknown or expired")

func (s *storage) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.authReqs)
	clear(s.codes)
	clear(s.tokens)
	clear(s.refresh)
}

// authRequest is one started sign-in. The storage hands out copies, so the
// library never sees a value the login handler is changing.
type authRequest struct {
	id           string
	clientID     string
	redirectURI  string
	state        string
	nonce        string
	scopes       []string
	responseType oidc.ResponseType
	responseMode oidc.ResponseMode
	challenge    *oidc.CodeChallenge
	audience     []string
	created      time.Time
	subject      string
	authTime     time.Time
	done         bool
	code         string
}

func (a *authRequest) GetID() string                         { return a.id }
func (a *authRequest) GetACR() string                        { return "" }
func (a *authRequest) GetAMR() []string                      { return []string{"pwd"} }
func (a *authRequest) GetAudience() []string                 { return a.audience }
func (a *authRequest) GetAuthTime() time.Time                { return a.authTime }
func (a *authRequest) GetClientID() string                   { return a.clientID }
func (a *authRequest) GetCodeChallenge() *oidc.CodeChallenge { return a.challenge }
func (a *authRequest) GetNonce() string                      { return a.nonce }
func (a *authRequest) GetRedirectURI() string                { return a.redirectURI }
func (a *authRequest) GetResponseType() oidc.ResponseType    { return a.responseType }
func (a *authRequest) GetResponseMode() oidc.ResponseMode    { return a.responseMode }
func (a *authRequest) GetScopes() []string                   { return a.scopes }
func (a *authRequest) GetState() string                      { return a.state }
func (a *authRequest) GetSubject() string                    { return a.subject }
func (a *authRequest) Done() bool                            { return a.done }

func (a *authRequest) clone() *authRequest {
	cp := *a
	cp.scopes = slices.Clone(a.scopes)
	cp.audience = slices.Clone(a.audience)
	if a.challenge != nil {
		ch := *a.challenge
		cp.challenge = &ch
	}
	return &cp
}

func (s *storage) CreateAuthRequest(_ context.Context, req *oidc.AuthRequest, _ string) (op.AuthRequest, error) {
	p := s.p
	if req.ClientID != p.host.id {
		return nil, oidc.ErrUnauthorizedClient().WithDescription("only the host client signs users in")
	}
	if req.CodeChallenge == "" || req.CodeChallengeMethod != oidc.CodeChallengeMethodS256 {
		return nil, oidc.ErrInvalidRequest().WithDescription("PKCE with code_challenge_method S256 is required")
	}
	var scopes []string
	for _, sc := range req.Scopes {
		if slices.Contains(hostScopes(), sc) && !slices.Contains(scopes, sc) {
			scopes = append(scopes, sc)
		}
	}
	if len(scopes) == 0 {
		return nil, oidc.ErrInvalidScope().WithDescription("no offered scope was requested; offered: %s", strings.Join(hostScopes(), " "))
	}
	id, err := randomString(24)
	if err != nil {
		return nil, err
	}
	a := &authRequest{
		id:           id,
		clientID:     req.ClientID,
		redirectURI:  req.RedirectURI,
		state:        req.State,
		nonce:        req.Nonce,
		scopes:       scopes,
		responseType: req.ResponseType,
		responseMode: req.ResponseMode,
		challenge:    &oidc.CodeChallenge{Challenge: req.CodeChallenge, Method: req.CodeChallengeMethod},
		// Every user access token is for the MCP server, named by the
		// adapter's client id, whatever resource the host asked for.
		audience: []string{p.adapter.id},
		created:  p.now(),
	}
	if err := addSaved(s, s.authReqs, id, a); err != nil {
		return nil, err
	}
	return a.clone(), nil
}

// authRequestLocked returns the live auth request id names.
func (s *storage) authRequestLocked(id string) (*authRequest, error) {
	a, ok := s.authReqs[id]
	if !ok || !s.p.now().Before(a.created.Add(authRequestLifetime)) {
		return nil, errUnknownAuthRequest
	}
	return a, nil
}

func (s *storage) AuthRequestByID(_ context.Context, id string) (op.AuthRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, err := s.authRequestLocked(id)
	if err != nil {
		return nil, err
	}
	return a.clone(), nil
}

func (s *storage) AuthRequestByCode(_ context.Context, code string) (op.AuthRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, ok := s.codes[code]
	if !ok {
		return nil, errUnknownAuthRequest
	}
	a, err := s.authRequestLocked(id)
	if err != nil {
		return nil, err
	}
	if !a.done {
		return nil, errUnknownAuthRequest
	}
	return a.clone(), nil
}

func (s *storage) SaveAuthCode(_ context.Context, id, code string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, err := s.authRequestLocked(id)
	if err != nil {
		return err
	}
	if a.code != "" {
		// One code per sign-in: a replayed callback must not mint a second.
		return oidc.ErrInvalidRequest().WithDescription("a code was already issued for this sign-in")
	}
	a.code = code
	s.codes[code] = id
	if err := s.saveLocked(); err != nil {
		a.code = ""
		delete(s.codes, code)
		return err
	}
	return nil
}

// DeleteAuthRequest is called once the code is redeemed, which makes the code
// single-use.
func (s *storage) DeleteAuthRequest(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a, ok := s.authReqs[id]; ok {
		delete(s.codes, a.code)
		delete(s.authReqs, id)
		// On a failed write the library hands out no tokens for the code.
		return s.saveLocked()
	}
	return nil
}

// completeAuthRequest records a successful sign-in.
func (s *storage) completeAuthRequest(id, subject string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, err := s.authRequestLocked(id)
	if err != nil {
		return err
	}
	if a.done {
		return errUnknownAuthRequest
	}
	a.subject, a.authTime, a.done = subject, s.p.now(), true
	if err := s.saveLocked(); err != nil {
		a.subject, a.authTime, a.done = "", time.Time{}, false
		return err
	}
	return nil
}

// pendingAuthRequest returns a copy of a live sign-in not yet completed.
func (s *storage) pendingAuthRequest(id string) (*authRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, err := s.authRequestLocked(id)
	if err != nil {
		return nil, err
	}
	if a.done {
		return nil, errUnknownAuthRequest
	}
	return a.clone(), nil
}

// pruneLocked forgets sign-ins and tokens long past use.
func (s *storage) pruneLocked() {
	now := s.p.now()
	for id, a := range s.authReqs {
		if !now.Before(a.created.Add(authRequestLifetime)) {
			delete(s.codes, a.code)
			delete(s.authReqs, id)
		}
	}
	for jti, t := range s.tokens {
		if now.After(t.expires.Add(forgetAfter)) {
			delete(s.tokens, jti)
		}
	}
	for k, r := range s.refresh {
		if !now.Before(r.expires) {
			delete(s.refresh, k)
		}
	}
}

func (s *storage) token(jti string) (tokenRecord, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tokens[jti]
	return t, ok
}

// CreateAccessToken records the token about to be minted and returns its
// jti and expiry, both taken from the provider's clock.
func (s *storage) CreateAccessToken(_ context.Context, tr op.TokenRequest) (string, time.Time, error) {
	p := s.p
	now := p.now()
	var rec tokenRecord
	switch r := tr.(type) {
	case op.TokenExchangeRequest:
		subj, ok := s.token(r.GetExchangeSubjectTokenIDOrToken())
		if !ok {
			return "", time.Time{}, oidc.ErrInvalidRequest().WithDescription("subject_token is not an access token issued by this provider")
		}
		exp := now.Add(p.xLifetime)
		if subj.expires.Before(exp) {
			// Never outlive the token it was exchanged from.
			exp = subj.expires
		}
		rec = tokenRecord{kind: kindGateway, subject: r.GetSubject(), clientID: r.GetClientID(),
			audience: slices.Clone(r.GetAudience()), scopes: slices.Clone(r.GetScopes()), issued: now, expires: exp}
	case *authRequest:
		rec = tokenRecord{kind: kindUser, subject: r.subject, clientID: r.clientID, audience: slices.Clone(r.audience),
			scopes: slices.Clone(r.scopes), authTime: r.authTime, issued: now, expires: now.Add(p.atLifetime)}
	default:
		return "", time.Time{}, fmt.Errorf("devidp: no access tokens for %T", tr)
	}
	jti, err := randomString(18)
	if err != nil {
		return "", time.Time{}, err
	}
	if err := addSaved(s, s.tokens, jti, rec); err != nil {
		return "", time.Time{}, err
	}
	return jti, rec.expires, nil
}

func (s *storage) TerminateSession(context.Context, string, string) error { return nil }

func (s *storage) RevokeToken(context.Context, string, string, string) *oidc.Error {
	return oidc.ErrInvalidRequest().WithDescription("revocation is not offered")
}

func (s *storage) SigningKey(context.Context) (op.SigningKey, error) {
	return s.p.keys.signing(), nil
}

func (s *storage) SignatureAlgorithms(context.Context) ([]jose.SignatureAlgorithm, error) {
	return []jose.SignatureAlgorithm{s.p.keys.signing().alg}, nil
}

func (s *storage) KeySet(context.Context) ([]op.Key, error) {
	return s.p.keys.publicKeys(), nil
}

func (s *storage) GetClientByClientID(_ context.Context, id string) (op.Client, error) {
	switch id {
	case s.p.host.id:
		return s.p.host, nil
	case s.p.adapter.id:
		return s.p.adapter, nil
	}
	return nil, oidc.ErrInvalidClient().WithDescription("unknown client")
}

func (s *storage) AuthorizeClientIDSecret(_ context.Context, id, secret string) error {
	if id != s.p.adapter.id {
		return errors.New("not a confidential client")
	}
	if subtle.ConstantTimeCompare([]byte(secret), []byte(s.p.adapter.secret)) != 1 {
		return errors.New("wrong client secret")
	}
	return nil
}

// SetUserinfoFromScopes is left empty as the library asks; the ID token's
// user claims come from SetUserinfoFromRequest.
func (s *storage) SetUserinfoFromScopes(context.Context, *oidc.UserInfo, string, string, []string) error {
	return nil
}

func (s *storage) SetUserinfoFromRequest(_ context.Context, info *oidc.UserInfo, req op.IDTokenRequest, scopes []string) error {
	// Without the subject here the ID token would carry no sub.
	info.Subject = req.GetSubject()
	u, ok := s.p.userBySubject(req.GetSubject())
	if !ok {
		return nil
	}
	if slices.Contains(scopes, oidc.ScopeProfile) {
		info.Name = u.Name
		info.PreferredUsername = u.Username
	}
	if slices.Contains(scopes, oidc.ScopeEmail) && u.Email != "" {
		info.Email = u.Email
		info.EmailVerified = true
	}
	return nil
}

func (s *storage) SetUserinfoFromToken(context.Context, *oidc.UserInfo, string, string, string) error {
	return errors.New("userinfo is not offered")
}

func (s *storage) SetIntrospectionFromToken(context.Context, *oidc.IntrospectionResponse, string, string, string) error {
	return errors.New("introspection is not offered")
}

func (s *storage) GetPrivateClaimsFromScopes(context.Context, string, string, []string) (map[string]any, error) {
	return nil, nil
}

// GetPrivateClaimsFromRequest adds azp and scope to a user's access token
// (from a code or a refresh token);
// the library sets neither.
func (s *storage) GetPrivateClaimsFromRequest(_ context.Context, tr op.TokenRequest, _ []string) (map[string]any, error) {
	switch r := tr.(type) {
	case *authRequest:
		return accessClaims(r.clientID, r.scopes), nil
	case *refreshRequest:
		return accessClaims(r.rec.clientID, r.scopes), nil
	}
	return nil, nil
}

func accessClaims(azp string, scopes []string) map[string]any {
	c := map[string]any{"azp": azp}
	if len(scopes) > 0 {
		c["scope"] = strings.Join(scopes, " ")
	}
	return c
}

func (s *storage) GetKeyByIDAndClientID(context.Context, string, string) (*jose.JSONWebKey, error) {
	return nil, errors.New("JWT client authentication is not offered")
}

func (s *storage) ValidateJWTProfileScopes(context.Context, string, []string) ([]string, error) {
	return nil, errors.New("the JWT profile grant is not offered")
}

func (s *storage) Health(context.Context) error { return nil }

// ValidateTokenExchangeRequest is the exchange policy; the library has
// already authenticated the client and verified the subject token's issuer,
// signature and expiry.
func (s *storage) ValidateTokenExchangeRequest(_ context.Context, req op.TokenExchangeRequest) error {
	p := s.p
	if req.GetClientID() != p.adapter.id {
		return oidc.ErrUnauthorizedClient().WithDescription("this client may not exchange tokens")
	}
	if req.GetExchangeSubjectTokenType() != oidc.AccessTokenType {
		return oidc.ErrInvalidRequest().WithDescription("subject_token_type must be %s", oidc.AccessTokenType)
	}
	if req.GetExchangeActorTokenType() != "" || req.GetExchangeActor() != "" {
		return oidc.ErrInvalidRequest().WithDescription("actor_token is not supported")
	}
	switch req.GetRequestedTokenType() {
	case "":
		req.SetRequestedTokenType(oidc.AccessTokenType)
	case oidc.AccessTokenType:
	default:
		return oidc.ErrInvalidRequest().WithDescription("only access tokens are issued by token exchange")
	}

	subj, ok := s.token(req.GetExchangeSubjectTokenIDOrToken())
	switch {
	case !ok:
		return oidc.ErrInvalidRequest().WithDescription("subject_token is not an access token issued by this provider")
	case subj.kind != kindUser || !slices.Contains(subj.audience, p.adapter.id):
		return oidc.ErrInvalidRequest().WithDescription("subject_token was not issued for audience %s", p.adapter.id)
	case !p.now().Before(subj.expires):
		return oidc.ErrInvalidRequest().WithDescription("subject_token has expired")
	case subj.subject != req.GetExchangeSubject():
		return oidc.ErrInvalidRequest().WithDescription("subject_token is inconsistent")
	}

	if aud := req.GetAudience(); len(aud) != 1 || aud[0] != p.gatewayAud {
		return oidc.ErrInvalidTarget().WithDescription("only audience %s can be requested", p.gatewayAud)
	}
	var scopes []string
	for _, sc := range req.GetScopes() {
		if sc != p.gatewayAud {
			return oidc.ErrInvalidScope().WithDescription("only scope %s can be requested", p.gatewayAud)
		}
		if !slices.Contains(scopes, sc) {
			scopes = append(scopes, sc)
		}
	}
	req.SetCurrentScopes(scopes)
	return nil
}

func (s *storage) CreateTokenExchangeRequest(_ context.Context, req op.TokenExchangeRequest) error {
	s.p.log.Info("token exchange granted", "sub", req.GetSubject(), "client", req.GetClientID(), "audience", req.GetAudience())
	return nil
}

func (s *storage) GetPrivateClaimsFromTokenExchangeRequest(_ context.Context, req op.TokenExchangeRequest) (map[string]any, error) {
	return accessClaims(req.GetClientID(), req.GetScopes()), nil
}

// SetUserinfoFromTokenExchangeRequest is not reached: ValidateTokenExchangeRequest
// refuses requests for ID tokens.
func (s *storage) SetUserinfoFromTokenExchangeRequest(_ context.Context, info *oidc.UserInfo, req op.TokenExchangeRequest) error {
	info.Subject = req.GetSubject()
	return nil
}

func (p *Provider) userBySubject(sub string) (User, bool) {
	for _, u := range p.users {
		if u.Subject == sub {
			return u, true
		}
	}
	return User{}, false
}
