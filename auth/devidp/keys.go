package devidp

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// Header typ values: RFC 9068 section 2.1 for access tokens, and the
// library's (and most providers') JWT for ID tokens.
const (
	typAccessToken = "at+jwt"
	typIDToken     = "JWT"
)

// signingKey is one private key; it implements op.SigningKey.
type signingKey struct {
	kid  string
	alg  jose.SignatureAlgorithm
	priv crypto.Signer
}

func (k *signingKey) SignatureAlgorithm() jose.SignatureAlgorithm { return k.alg }
func (k *signingKey) Key() any                                    { return k.priv }
func (k *signingKey) ID() string                                  { return k.kid }

// publicKey is the public half of a signingKey; it implements op.Key.
type publicKey struct{ k *signingKey }

func (p publicKey) ID() string                         { return p.k.kid }
func (p publicKey) Algorithm() jose.SignatureAlgorithm { return p.k.alg }
func (p publicKey) Use() string                        { return "sig" }
func (p publicKey) Key() any                           { return p.k.priv.Public() }

func (p publicKey) jwk() jose.JSONWebKey {
	return jose.JSONWebKey{Key: p.Key(), KeyID: p.ID(), Algorithm: string(p.Algorithm()), Use: p.Use()}
}

// newSigningKey wraps priv, choosing the algorithm from its kind; the key id
// is the RFC 7638 thumbprint of the public key.
func newSigningKey(priv crypto.Signer) (*signingKey, error) {
	var alg jose.SignatureAlgorithm
	switch k := priv.(type) {
	case *ecdsa.PrivateKey:
		if k.Curve != elliptic.P256() {
			return nil, errors.New("signing key: ECDSA keys must be on P-256")
		}
		alg = jose.ES256
	case *rsa.PrivateKey:
		if k.N.BitLen() < 2048 {
			return nil, errors.New("signing key: RSA keys must have at least 2048 bits")
		}
		alg = jose.RS256
	default:
		return nil, fmt.Errorf("signing key: %T is not supported (use a P-256 ECDSA or an RSA key)", priv)
	}
	pub := jose.JSONWebKey{Key: priv.Public()}
	tp, err := pub.Thumbprint(crypto.SHA256)
	if err != nil {
		return nil, fmt.Errorf("signing key: thumbprint: %w", err)
	}
	return &signingKey{kid: base64.RawURLEncoding.EncodeToString(tp), alg: alg, priv: priv}, nil
}

// generateLike makes a new key of the same kind as like: P-256 when like is
// nil or ECDSA, RSA of the same size when like is RSA.
func generateLike(like crypto.Signer) (crypto.Signer, error) {
	var (
		k   crypto.Signer
		err error
	)
	if r, ok := like.(*rsa.PrivateKey); ok {
		k, err = rsa.GenerateKey(rand.Reader, r.N.BitLen())
	} else {
		k, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	}
	if err != nil {
		return nil, fmt.Errorf("devidp: generate signing key: %w", err)
	}
	return k, nil
}

// keyring holds the current signing key and the keys the JWKS publishes.
type keyring struct {
	mu        sync.RWMutex
	current   *signingKey
	published []*signingKey // current first
}

func newKeyring(priv crypto.Signer) (*keyring, error) {
	k, err := newSigningKey(priv)
	if err != nil {
		return nil, err
	}
	return &keyring{current: k, published: []*signingKey{k}}, nil
}

// all is every published key, the current one first.
func (r *keyring) all() []*signingKey {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Clone(r.published)
}

func (r *keyring) signing() *signingKey {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.current
}

func (r *keyring) currentKID() string { return r.signing().kid }

func (r *keyring) publicKeys() []op.Key {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]op.Key, 0, len(r.published))
	for _, k := range r.published {
		out = append(out, publicKey{k})
	}
	return out
}

func (r *keyring) find(kid string) (*signingKey, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	i := slices.IndexFunc(r.published, func(k *signingKey) bool { return k.kid == kid })
	if i < 0 {
		return nil, false
	}
	return r.published[i], true
}

func (r *keyring) rotate(keepOld bool) (*signingKey, error) {
	priv, err := generateLike(r.signing().priv)
	if err != nil {
		return nil, err
	}
	k, err := newSigningKey(priv)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.current = k
	if keepOld {
		r.published = append([]*signingKey{k}, r.published...)
	} else {
		r.published = []*signingKey{k}
	}
	return k, nil
}

// RotateKey makes a new signing key of the same kind and signs every later
// token with it. With keepOld the previous keys stay in the JWKS, so tokens
// already issued still verify; without it they are dropped, and those tokens
// no longer verify here either. It returns the new key id, so a verifier's
// "unknown kid, fetch the JWKS again" path can be tested.
func (p *Provider) RotateKey(keepOld bool) (string, error) {
	k, err := p.keys.rotate(keepOld)
	if err != nil {
		return "", err
	}
	if err := p.store.save(); err != nil {
		return "", err
	}
	p.log.Info("signing key rotated", "kid", k.kid, "kept_old_keys", keepOld)
	return k.kid, nil
}

// KeyID is the id (kid) of the current signing key.
func (p *Provider) KeyID() string { return p.keys.currentKID() }

// JWKS is the public JSON Web Key Set, as served at JWKSURL.
func (p *Provider) JWKS() []byte {
	set := jose.JSONWebKeySet{}
	for _, k := range p.keys.publicKeys() {
		set.Keys = append(set.Keys, k.(publicKey).jwk())
	}
	b, err := json.Marshal(set)
	if err != nil {
		// Marshalling public ECDSA or RSA keys does not fail.
		return nil
	}
	return b
}

// resign verifies a token this provider signed a moment ago, lets edit change
// its claims, and signs the result with the current key and header typ.
// It is how the library's tokens get the typ and claims it cannot set.
func (p *Provider) resign(raw, typ string, edit func(claims map[string]any) error) (string, error) {
	jws, err := jose.ParseSignedCompact(raw, []jose.SignatureAlgorithm{jose.ES256, jose.RS256})
	if err != nil {
		return "", fmt.Errorf("devidp: parse own token: %w", err)
	}
	if len(jws.Signatures) != 1 {
		return "", errors.New("devidp: own token does not have exactly one signature")
	}
	k, ok := p.keys.find(jws.Signatures[0].Header.KeyID)
	if !ok {
		return "", errors.New("devidp: own token signed by a key no longer published")
	}
	payload, err := jws.Verify(k.priv.Public())
	if err != nil {
		return "", fmt.Errorf("devidp: verify own token: %w", err)
	}
	var claims map[string]any
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber() // keep numeric dates as written
	if err := dec.Decode(&claims); err != nil {
		return "", fmt.Errorf("devidp: decode own token: %w", err)
	}
	if err := edit(claims); err != nil {
		return "", err
	}
	return p.sign(claims, typ)
}

// sign signs claims with the current key under the given typ.
func (p *Provider) sign(claims map[string]any, typ string) (string, error) {
	k := p.keys.signing()
	signer, err := jose.NewSigner(
		jose.SigningKey{Algorithm: k.alg, Key: jose.JSONWebKey{Key: k.priv, KeyID: k.kid}},
		(&jose.SignerOptions{}).WithType(jose.ContentType(typ)),
	)
	if err != nil {
		return "", fmt.Errorf("devidp: signer: %w", err)
	}
	payload, err := json.Marshal(claims)
	if err != nil {
		return "", fmt.Errorf("devidp: encode claims: %w", err)
	}
	obj, err := signer.Sign(payload)
	if err != nil {
		return "", fmt.Errorf("devidp: sign: %w", err)
	}
	return obj.CompactSerialize()
}
