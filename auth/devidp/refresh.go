package devidp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"time"

	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// Refresh tokens. The host client gets one with every code it redeems,
// without asking for offline_access (which this provider never grants: some
// providers will not exchange a token from an offline session), so that a
// host signed in once keeps working past its access token's life. Each
// refresh token is single-use: redeeming it returns a new one and retires
// it (rotation). A retired or unknown token is refused invalid_grant; the
// rest of its sign-in is left alone, because two processes of one host that
// share a stored token (Claude Code runs several) can present the same one
// twice without anyone having stolen it.

// refreshRecord is what the provider keeps about one live refresh token,
// keyed by the token's SHA-256: the token itself is never stored.
type refreshRecord struct {
	subject  string
	clientID string
	audience []string
	scopes   []string
	authTime time.Time
	signedIn time.Time // when the sign-in began; the chain ends SignInLifetime later
	expires  time.Time
}

// errRefreshRefused is the one answer for an unknown, retired or expired
// refresh token; the library turns it into invalid_grant.
var errRefreshRefused = errors.New("refresh token unknown, already used or expired; sign in again")

func refreshKey(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// refreshRequest is a refresh token presented at the token endpoint: the
// library's op.RefreshTokenRequest, and the IDTokenRequest it makes an ID
// token from.
type refreshRequest struct {
	key    string // refreshKey of the presented token
	rec    refreshRecord
	scopes []string // the scopes of this response, at most rec.scopes
}

var _ op.RefreshTokenRequest = (*refreshRequest)(nil)

func (r *refreshRequest) GetAMR() []string             { return []string{"pwd"} }
func (r *refreshRequest) GetAudience() []string        { return slices.Clone(r.rec.audience) }
func (r *refreshRequest) GetAuthTime() time.Time       { return r.rec.authTime }
func (r *refreshRequest) GetClientID() string          { return r.rec.clientID }
func (r *refreshRequest) GetScopes() []string          { return slices.Clone(r.scopes) }
func (r *refreshRequest) GetSubject() string           { return r.rec.subject }
func (r *refreshRequest) SetCurrentScopes(sc []string) { r.scopes = slices.Clone(sc) }

// newRefreshLocked stores a new refresh token for rec and returns it. Its
// life is RefreshTokenLifetime from now, cut at the end of the sign-in.
func (s *storage) newRefreshLocked(rec refreshRecord) (string, error) {
	tok, err := randomString(32)
	if err != nil {
		return "", err
	}
	now := s.p.now()
	rec.expires = now.Add(s.p.rtLifetime)
	if end := rec.signedIn.Add(s.p.signInLifetime); end.Before(rec.expires) {
		rec.expires = end
	}
	if !now.Before(rec.expires) {
		return "", errRefreshRefused
	}
	rec.audience, rec.scopes = slices.Clone(rec.audience), slices.Clone(rec.scopes)
	s.refresh[refreshKey(tok)] = rec
	return tok, nil
}

// issueRefresh gives a just-redeemed code's sign-in its first refresh
// token, for the user token t.
func (s *storage) issueRefresh(t tokenRecord) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.p.now()
	tok, err := s.newRefreshLocked(refreshRecord{subject: t.subject, clientID: t.clientID, audience: t.audience,
		scopes: t.scopes, authTime: t.authTime, signedIn: now})
	if err != nil {
		return "", err
	}
	if err := s.saveLocked(); err != nil {
		delete(s.refresh, refreshKey(tok))
		return "", err
	}
	return tok, nil
}

// TokenRequestByRefreshToken finds a live refresh token.
func (s *storage) TokenRequestByRefreshToken(_ context.Context, token string) (op.RefreshTokenRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := refreshKey(token)
	rec, ok := s.refresh[key]
	if !ok || !s.p.now().Before(rec.expires) {
		return nil, errRefreshRefused
	}
	return &refreshRequest{key: key, rec: rec, scopes: slices.Clone(rec.scopes)}, nil
}

// CreateAccessAndRefreshTokens is reached for a refresh token grant only
// (the library calls it for a code only with offline_access, which is
// refused): it retires the presented refresh token, records the new access
// token and returns it with the next refresh token, atomically, so two
// requests with one token get one answer between them.
func (s *storage) CreateAccessAndRefreshTokens(_ context.Context, tr op.TokenRequest, current string) (string, string, time.Time, error) {
	r, ok := tr.(*refreshRequest)
	if !ok || current == "" || refreshKey(current) != r.key {
		return "", "", time.Time{}, oidc.ErrInvalidGrant().WithDescription("refresh tokens are issued only with a sign-in")
	}
	jti, err := randomString(18)
	if err != nil {
		return "", "", time.Time{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, live := s.refresh[r.key]
	now := s.p.now()
	if !live || !now.Before(rec.expires) {
		return "", "", time.Time{}, oidc.ErrInvalidGrant().WithDescription("%s", errRefreshRefused.Error())
	}
	delete(s.refresh, r.key)
	next, err := s.newRefreshLocked(rec)
	if err != nil {
		s.refresh[r.key] = rec
		if errors.Is(err, errRefreshRefused) {
			return "", "", time.Time{}, oidc.ErrInvalidGrant().WithDescription("this sign-in has ended; sign in again")
		}
		return "", "", time.Time{}, err
	}
	at := tokenRecord{kind: kindUser, subject: rec.subject, clientID: rec.clientID, audience: slices.Clone(rec.audience),
		scopes: slices.Clone(r.scopes), authTime: rec.authTime, issued: now, expires: now.Add(s.p.atLifetime)}
	s.pruneLocked()
	s.tokens[jti] = at
	if err := s.saveLocked(); err != nil {
		// Nothing was handed out: the presented token stays usable.
		delete(s.tokens, jti)
		delete(s.refresh, refreshKey(next))
		s.refresh[r.key] = rec
		return "", "", time.Time{}, err
	}
	return jti, next, at.expires, nil
}

// GetRefreshTokenInfo serves revocation and introspection, which are not
// offered.
func (s *storage) GetRefreshTokenInfo(context.Context, string, string) (string, string, error) {
	return "", "", op.ErrInvalidRefreshToken
}
