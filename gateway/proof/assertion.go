package proof

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/lestrrat-go/jwx/v2/cert"
	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/lestrrat-go/jwx/v2/jws"
)

// AssertionType is the typ header of a service login assertion.
const AssertionType = "service-login+jwt"

// AssertionClaims are the claims of a service login assertion. Aud is the
// sign-in URL (as an htu), so an assertion is good for one Gateway only.
type AssertionClaims struct {
	Aud string `json:"aud"`
	IAT int64  `json:"iat"`
	Exp int64  `json:"exp"`
	JTI string `json:"jti"`
}

// MakeAssertion signs a login assertion with the service's login key and
// puts its certificate in the x5c header.
func MakeAssertion(loginKey crypto.Signer, certificate *x509.Certificate, loginURL string, now time.Time) (string, error) {
	alg, err := algFor(loginKey.Public())
	if err != nil {
		return "", err
	}
	aud, err := NormalizeHTU(loginURL)
	if err != nil {
		return "", err
	}
	jti := make([]byte, 18)
	if _, err := rand.Read(jti); err != nil {
		return "", err
	}
	c := AssertionClaims{Aud: aud, IAT: now.Unix(), Exp: now.Add(time.Minute).Unix(),
		JTI: base64.RawURLEncoding.EncodeToString(jti)}
	payload, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	chain := &cert.Chain{}
	if err := chain.AddString(base64.StdEncoding.EncodeToString(certificate.Raw)); err != nil {
		return "", err
	}
	hdr := jws.NewHeaders()
	if err := hdr.Set(jws.TypeKey, AssertionType); err != nil {
		return "", err
	}
	if err := hdr.Set(jws.X509CertChainKey, chain); err != nil {
		return "", err
	}
	sig, err := jws.Sign(payload, jws.WithKey(alg, loginKey, jws.WithProtectedHeaders(hdr)))
	if err != nil {
		return "", fmt.Errorf("sign login assertion: %w", err)
	}
	return string(sig), nil
}

// VerifiedAssertion is what a valid assertion tells the Gateway.
type VerifiedAssertion struct {
	Claims      AssertionClaims
	Certificate *x509.Certificate
}

// VerifyAssertion checks a login assertion's signature against the
// certificate it carries, its audience and its times. The caller decides
// whether that certificate is a registered service's.
func VerifyAssertion(token, loginURL string, now time.Time, window time.Duration) (*VerifiedAssertion, error) {
	msg, err := jws.Parse([]byte(token))
	if err != nil || len(msg.Signatures()) != 1 {
		return nil, fmt.Errorf("%w: assertion is not a compact JWS", ErrInvalid)
	}
	h := msg.Signatures()[0].ProtectedHeaders()
	if h.Type() != AssertionType {
		return nil, fmt.Errorf("%w: assertion typ must be %s", ErrInvalid, AssertionType)
	}
	chain := h.X509CertChain()
	if chain == nil || chain.Len() < 1 {
		return nil, fmt.Errorf("%w: assertion has no x5c certificate", ErrInvalid)
	}
	first, _ := chain.Get(0)
	der, err := base64.StdEncoding.DecodeString(string(first))
	if err != nil {
		return nil, fmt.Errorf("%w: x5c is not base64", ErrInvalid)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("%w: x5c is not a certificate", ErrInvalid)
	}
	alg, err := algFor(c.PublicKey)
	if err != nil || h.Algorithm() != alg {
		return nil, fmt.Errorf("%w: assertion alg does not fit the certificate's key", ErrInvalid)
	}
	payload, err := jws.Verify([]byte(token), jws.WithKey(alg, c.PublicKey))
	if err != nil {
		return nil, fmt.Errorf("%w: assertion signature does not verify", ErrInvalid)
	}
	var cl AssertionClaims
	if err := json.Unmarshal(payload, &cl); err != nil {
		return nil, fmt.Errorf("%w: assertion claims are not JSON", ErrInvalid)
	}
	if err := checkURLClaim(cl.Aud, loginURL, "assertion audience is not this Gateway"); err != nil {
		return nil, err
	}
	if err := checkIAT(cl.IAT, now, window, "assertion iat"); err != nil {
		return nil, err
	}
	if now.After(time.Unix(cl.Exp, 0).Add(window)) {
		return nil, fmt.Errorf("%w: assertion expired", ErrStale)
	}
	return &VerifiedAssertion{Claims: cl, Certificate: c}, nil
}

// CertFingerprint is the hex sha256 of a certificate's DER.
func CertFingerprint(c *x509.Certificate) string {
	sum := sha256.Sum256(c.Raw)
	return hex.EncodeToString(sum[:])
}

func algFor(pub crypto.PublicKey) (jwa.SignatureAlgorithm, error) {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		if k.Curve == elliptic.P256() {
			return jwa.ES256, nil
		}
		return "", errors.New("login key: only P-256 ECDSA or RSA keys are supported")
	case *rsa.PublicKey:
		return jwa.RS256, nil
	default:
		return "", errors.New("login key: only P-256 ECDSA or RSA keys are supported")
	}
}
