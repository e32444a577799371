// Package proof makes and checks the proof-of-possession JWS that every
// Gateway request after sign-in carries, shaped after DPoP (RFC 9449): ES256
// over P-256, typ dpop+jwt, the public JWK in the header, and the claims htm,
// htu, iat, jti and ath. A session is bound to its key's RFC 7638 thumbprint.
//
// It holds no state: the replay cache and the clock belong to the verifier's
// caller.
package proof

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/lestrrat-go/jwx/v2/jws"
)

// Type is the JWS typ header of a proof.
const Type = "dpop+jwt"

// Errors a verification can end in. ErrStale is for an iat outside the
// window; the rest of a malformed or unverifiable proof is ErrInvalid.
var (
	ErrMissing = errors.New("proof missing")
	ErrInvalid = errors.New("proof invalid")
	ErrStale   = errors.New("proof stale")
)

// Key is a P-256 holder key. It is generated fresh for each session and never
// leaves the process.
type Key struct {
	priv *ecdsa.PrivateKey
	pub  jwk.Key
	jkt  string
}

// NewKey generates a fresh P-256 key.
func NewKey() (*Key, error) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate holder key: %w", err)
	}
	return FromECDSA(priv)
}

// FromECDSA wraps an existing P-256 private key (the service's sender key).
func FromECDSA(priv *ecdsa.PrivateKey) (*Key, error) {
	if priv.Curve != elliptic.P256() {
		return nil, errors.New("holder key must be P-256")
	}
	pub, err := jwk.FromRaw(&priv.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("holder key as JWK: %w", err)
	}
	jkt, err := Thumbprint(pub)
	if err != nil {
		return nil, err
	}
	return &Key{priv: priv, pub: pub, jkt: jkt}, nil
}

// JKT is the key's RFC 7638 thumbprint, base64url without padding.
func (k *Key) JKT() string { return k.jkt }

// PublicJWK is the public key as a JWK document.
func (k *Key) PublicJWK() json.RawMessage {
	b, err := json.Marshal(k.pub)
	if err != nil {
		// A P-256 public key always marshals; keep the signature error-free.
		return nil
	}
	return b
}

// Destroy drops the private key so that nothing more can be signed with it.
// Go gives no supported way to overwrite an ecdsa.PrivateKey in place; once
// unreferenced, it is gone with the next collection.
func (k *Key) Destroy() {
	if k == nil {
		return
	}
	k.priv = nil
}

// Signer exposes the private key for signing other JWS (the service's login
// assertion uses a different key; this is for tests that need raw access).
func (k *Key) Signer() crypto.Signer { return k.priv }

// Claims are a proof's claims.
type Claims struct {
	HTM string `json:"htm"`
	HTU string `json:"htu"`
	IAT int64  `json:"iat"`
	JTI string `json:"jti"`
	ATH string `json:"ath,omitempty"`
}

// Make signs a proof for one request. handle is the session handle the
// request carries ("" for the service sign-in, which has none yet); now is
// the Gateway's clock as the caller estimates it.
func (k *Key) Make(method, rawURL, handle string, now time.Time) (string, error) {
	if k == nil || k.priv == nil {
		return "", errors.New("holder key destroyed")
	}
	htu, err := NormalizeHTU(rawURL)
	if err != nil {
		return "", err
	}
	jti := make([]byte, 18)
	if _, err := rand.Read(jti); err != nil {
		return "", fmt.Errorf("proof jti: %w", err)
	}
	c := Claims{HTM: method, HTU: htu, IAT: now.Unix(), JTI: base64.RawURLEncoding.EncodeToString(jti)}
	if handle != "" {
		c.ATH = ATH(handle)
	}
	payload, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	hdr := jws.NewHeaders()
	if err := hdr.Set(jws.TypeKey, Type); err != nil {
		return "", err
	}
	if err := hdr.Set(jws.JWKKey, k.pub); err != nil {
		return "", err
	}
	sig, err := jws.Sign(payload, jws.WithKey(jwa.ES256, k.priv, jws.WithProtectedHeaders(hdr)))
	if err != nil {
		return "", fmt.Errorf("sign proof: %w", err)
	}
	return string(sig), nil
}

// Verified is what a valid proof tells the verifier.
type Verified struct {
	Claims Claims
	JKT    string
}

// Verify checks a proof's form, signature, htm, htu, ath and iat (within
// window of now). It does not check replay or the session's binding: the
// caller compares JKT and remembers JTI.
func Verify(token, method, rawURL, handle string, now time.Time, window time.Duration) (*Verified, error) {
	if strings.TrimSpace(token) == "" {
		return nil, ErrMissing
	}
	msg, err := jws.Parse([]byte(token))
	if err != nil {
		return nil, fmt.Errorf("%w: not a compact JWS", ErrInvalid)
	}
	sigs := msg.Signatures()
	if len(sigs) != 1 {
		return nil, fmt.Errorf("%w: want one signature", ErrInvalid)
	}
	h := sigs[0].ProtectedHeaders()
	if h.Algorithm() != jwa.ES256 {
		return nil, fmt.Errorf("%w: alg must be ES256", ErrInvalid)
	}
	if h.Type() != Type {
		return nil, fmt.Errorf("%w: typ must be %s", ErrInvalid, Type)
	}
	pub := h.JWK()
	if pub == nil {
		return nil, fmt.Errorf("%w: no jwk header", ErrInvalid)
	}
	var raw ecdsa.PublicKey
	if err := pub.Raw(&raw); err != nil || raw.Curve != elliptic.P256() {
		return nil, fmt.Errorf("%w: jwk must be a P-256 public key", ErrInvalid)
	}
	if _, isPriv := pub.(jwk.ECDSAPrivateKey); isPriv {
		return nil, fmt.Errorf("%w: jwk must be public", ErrInvalid)
	}
	payload, err := jws.Verify([]byte(token), jws.WithKey(jwa.ES256, &raw))
	if err != nil {
		return nil, fmt.Errorf("%w: signature does not verify", ErrInvalid)
	}
	var c Claims
	if err := json.Unmarshal(payload, &c); err != nil {
		return nil, fmt.Errorf("%w: claims are not JSON", ErrInvalid)
	}
	if c.JTI == "" || c.IAT == 0 {
		return nil, fmt.Errorf("%w: jti and iat are required", ErrInvalid)
	}
	if c.HTM != method {
		return nil, fmt.Errorf("%w: htm does not match the request", ErrInvalid)
	}
	if err := checkURLClaim(c.HTU, rawURL, "htu does not match the request"); err != nil {
		return nil, err
	}
	if handle != "" && c.ATH != ATH(handle) {
		return nil, fmt.Errorf("%w: ath does not match the session", ErrInvalid)
	}
	if err := checkIAT(c.IAT, now, window, "iat"); err != nil {
		return nil, err
	}
	jkt, err := Thumbprint(pub)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return &Verified{Claims: c, JKT: jkt}, nil
}

// checkURLClaim checks that claim is rawURL's htu; mismatch says which
// claim differs.
func checkURLClaim(claim, rawURL, mismatch string) error {
	want, err := NormalizeHTU(rawURL)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if claim != want {
		return fmt.Errorf("%w: %s", ErrInvalid, mismatch)
	}
	return nil
}

// checkIAT refuses (ErrStale) an iat more than window from now; name is
// the claim as the message calls it.
func checkIAT(iat int64, now time.Time, window time.Duration, name string) error {
	if d := now.Sub(time.Unix(iat, 0)); d > window || d < -window {
		return fmt.Errorf("%w: %s is %s from the Gateway's clock", ErrStale, name, d.Round(time.Second))
	}
	return nil
}

// ATH is base64url(sha256(handle)), the proof's binding to a session handle.
func ATH(handle string) string {
	sum := sha256.Sum256([]byte(handle))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// Thumbprint is a JWK's RFC 7638 SHA-256 thumbprint, base64url.
func Thumbprint(k jwk.Key) (string, error) {
	tp, err := k.Thumbprint(crypto.SHA256)
	if err != nil {
		return "", fmt.Errorf("jwk thumbprint: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(tp), nil
}

// ThumbprintJSON parses a public JWK document and returns its thumbprint.
func ThumbprintJSON(doc []byte) (string, error) {
	k, err := ParsePublicP256(doc)
	if err != nil {
		return "", err
	}
	return Thumbprint(k)
}

// ParsePublicP256 parses a JWK document that must be a public P-256 key.
func ParsePublicP256(doc []byte) (jwk.Key, error) {
	k, err := jwk.ParseKey(doc)
	if err != nil {
		return nil, fmt.Errorf("parse jwk: %w", err)
	}
	if _, isPriv := k.(jwk.ECDSAPrivateKey); isPriv {
		return nil, errors.New("jwk must be a public key")
	}
	var raw ecdsa.PublicKey
	if err := k.Raw(&raw); err != nil || raw.Curve != elliptic.P256() {
		return nil, errors.New("jwk must be a P-256 public key")
	}
	return k, nil
}

// NormalizeHTU is the htu of a URL: scheme, host and path, no query or
// fragment, scheme and host lower-cased.
func NormalizeHTU(rawURL string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return "", fmt.Errorf("htu %q is not an absolute URL", rawURL)
	}
	return strings.ToLower(u.Scheme) + "://" + strings.ToLower(u.Host) + u.EscapedPath(), nil
}
