package devidp

import (
	"crypto"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/zitadel/oidc/v3/pkg/oidc"

	"github.com/pdmcp/pdmcp/internal/safefile"
)

// stateFileName is the provider's state in Config.StateDir.
const stateFileName = "provider-state.json"

// stateVersion is the layout of the state file; a file of another version is
// refused rather than half read.
const stateVersion = 1

// stateFile is everything a restart would otherwise forget: the signing keys
// (so tokens already issued still verify), the key that seals authorization
// codes, the sign-ins in progress and the codes they yielded, the record of
// every access token issued (token exchange accepts only those), and the
// refresh tokens, by their SHA-256 only. It holds private keys: the file is
// mode 0600 in a folder of mode 0700, and it is replaced, never edited in
// place.
type stateFile struct {
	Version      int                         `json:"version"`
	CodeKey      []byte                      `json:"codeKey"`
	Keys         []stateKey                  `json:"keys"` // the current key first
	AuthRequests map[string]stateAuthRequest `json:"authRequests"`
	Codes        map[string]string           `json:"codes"`
	Tokens       map[string]stateToken       `json:"tokens"`
	Refresh      map[string]stateRefresh     `json:"refresh"`
}

type stateKey struct {
	PKCS8 []byte `json:"pkcs8"`
}

type stateAuthRequest struct {
	ClientID      string    `json:"clientId"`
	RedirectURI   string    `json:"redirectUri"`
	State         string    `json:"state"`
	Nonce         string    `json:"nonce,omitempty"`
	Scopes        []string  `json:"scopes"`
	ResponseType  string    `json:"responseType"`
	ResponseMode  string    `json:"responseMode,omitempty"`
	Challenge     string    `json:"challenge"`
	ChallengeMeth string    `json:"challengeMethod"`
	Audience      []string  `json:"audience"`
	Created       time.Time `json:"created"`
	Subject       string    `json:"subject,omitempty"`
	AuthTime      time.Time `json:"authTime,omitzero"`
	Done          bool      `json:"done,omitempty"`
	Code          string    `json:"code,omitempty"`
}

// stateGrant is what an access token and a refresh token were issued
// for: who, to which client, for which audience and scopes. Embedded, its
// fields stand in the file where it stands in the struct.
type stateGrant struct {
	Subject  string   `json:"subject"`
	ClientID string   `json:"clientId"`
	Audience []string `json:"audience"`
	Scopes   []string `json:"scopes"`
}

type stateToken struct {
	Kind tokenKind `json:"kind"`
	stateGrant
	AuthTime time.Time `json:"authTime,omitzero"`
	Issued   time.Time `json:"issued"`
	Expires  time.Time `json:"expires"`
}

type stateRefresh struct {
	stateGrant
	AuthTime time.Time `json:"authTime"`
	SignedIn time.Time `json:"signedIn"`
	Expires  time.Time `json:"expires"`
}

// statePath is the state file of dir.
func statePath(dir string) string { return filepath.Join(dir, stateFileName) }

// loadState reads dir's state file; it returns nil, nil when there is none
// yet. A file that group or others may read is refused: it holds the
// signing key.
func loadState(dir string) (*stateFile, error) {
	path := statePath(dir)
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("devidp: state: %w", err)
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm()&0o077 != 0 {
		// It holds the signing key.
		return nil, fmt.Errorf("devidp: state file: %w", &safefile.ModeError{Path: path, Mode: fi.Mode(), Secret: true})
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("devidp: state: %w", err)
	}
	var st stateFile
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("devidp: state file %s is not readable JSON (remove it to start over; every sign-in is then lost): %w", path, err)
	}
	if st.Version != stateVersion {
		return nil, fmt.Errorf("devidp: state file %s has version %d, want %d (remove it to start over)", path, st.Version, stateVersion)
	}
	if len(st.Keys) == 0 || len(st.CodeKey) != 32 {
		return nil, fmt.Errorf("devidp: state file %s has no signing key or code key (remove it to start over)", path)
	}
	return &st, nil
}

// writeState replaces dir's state file with st: written to a temporary file
// of mode 0600 beside it, synced, then renamed over it, so a crash leaves
// the old file or the new one, never half of one.
func writeState(dir string, st *stateFile) error {
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("devidp: state: %w", err)
	}
	tmp, err := os.CreateTemp(dir, stateFileName+".*.tmp")
	if err != nil {
		return fmt.Errorf("devidp: state: %w", err)
	}
	name := tmp.Name()
	defer os.Remove(name) // after a successful rename there is nothing to remove
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("devidp: state: %w", err)
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("devidp: state: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("devidp: state: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("devidp: state: %w", err)
	}
	if err := os.Rename(name, statePath(dir)); err != nil {
		return fmt.Errorf("devidp: state: %w", err)
	}
	return nil
}

func marshalKeys(keys []*signingKey) ([]stateKey, error) {
	out := make([]stateKey, 0, len(keys))
	for _, k := range keys {
		der, err := x509.MarshalPKCS8PrivateKey(k.priv)
		if err != nil {
			return nil, fmt.Errorf("devidp: state: signing key: %w", err)
		}
		out = append(out, stateKey{PKCS8: der})
	}
	return out, nil
}

func unmarshalKeys(in []stateKey) ([]*signingKey, error) {
	out := make([]*signingKey, 0, len(in))
	for i, sk := range in {
		k, err := x509.ParsePKCS8PrivateKey(sk.PKCS8)
		if err != nil {
			return nil, fmt.Errorf("devidp: state: signing key %d: %w", i, err)
		}
		signer, ok := k.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("devidp: state: signing key %d is %T", i, k)
		}
		key, err := newSigningKey(signer)
		if err != nil {
			return nil, fmt.Errorf("devidp: state: %w", err)
		}
		out = append(out, key)
	}
	return out, nil
}

func (a *authRequest) toState() stateAuthRequest {
	st := stateAuthRequest{ClientID: a.clientID, RedirectURI: a.redirectURI, State: a.state, Nonce: a.nonce,
		Scopes: a.scopes, ResponseType: string(a.responseType), ResponseMode: string(a.responseMode),
		Audience: a.audience, Created: a.created, Subject: a.subject, AuthTime: a.authTime, Done: a.done, Code: a.code}
	if a.challenge != nil {
		st.Challenge, st.ChallengeMeth = a.challenge.Challenge, string(a.challenge.Method)
	}
	return st
}

func (st stateAuthRequest) authRequest(id string) *authRequest {
	return &authRequest{id: id, clientID: st.ClientID, redirectURI: st.RedirectURI, state: st.State, nonce: st.Nonce,
		scopes: st.Scopes, responseType: oidc.ResponseType(st.ResponseType), responseMode: oidc.ResponseMode(st.ResponseMode),
		challenge: &oidc.CodeChallenge{Challenge: st.Challenge, Method: oidc.CodeChallengeMethod(st.ChallengeMeth)},
		audience:  st.Audience, created: st.Created, subject: st.Subject, authTime: st.AuthTime, done: st.Done, code: st.Code}
}

func (t tokenRecord) toState() stateToken {
	return stateToken{Kind: t.kind,
		stateGrant: stateGrant{Subject: t.subject, ClientID: t.clientID, Audience: t.audience, Scopes: t.scopes},
		AuthTime:   t.authTime, Issued: t.issued, Expires: t.expires}
}

func (st stateToken) record() tokenRecord {
	return tokenRecord{kind: st.Kind, subject: st.Subject, clientID: st.ClientID, audience: st.Audience, scopes: st.Scopes,
		authTime: st.AuthTime, issued: st.Issued, expires: st.Expires}
}

func (r refreshRecord) toState() stateRefresh {
	return stateRefresh{
		stateGrant: stateGrant{Subject: r.subject, ClientID: r.clientID, Audience: r.audience, Scopes: r.scopes},
		AuthTime:   r.authTime, SignedIn: r.signedIn, Expires: r.expires}
}

func (st stateRefresh) record() refreshRecord {
	return refreshRecord{subject: st.Subject, clientID: st.ClientID, audience: st.Audience, scopes: st.Scopes,
		authTime: st.AuthTime, signedIn: st.SignedIn, expires: st.Expires}
}
