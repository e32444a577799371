package auth

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/lestrrat-go/jwx/v2/jwk"
)

// keyFor returns the provider's key for kid, fit for alg, fetching the key
// set when it is not held yet or does not name kid (rate-limited).
func (v *Verifier) keyFor(ctx context.Context, kid, alg string) (jwk.Key, error) {
	if v.stale() {
		v.fetchMu.Lock()
		if v.stale() {
			// On failure the held keys stay; the attempt counts for the
			// rate limit and the age, so the provider is not hammered.
			_ = v.fetch(ctx)
		}
		v.fetchMu.Unlock()
	}
	if key, found, err := v.lookup(kid, alg); found || err != nil {
		return key, err
	}
	v.fetchMu.Lock()
	defer v.fetchMu.Unlock()
	// Another request may have fetched while this one waited.
	if key, found, err := v.lookup(kid, alg); found || err != nil {
		return key, err
	}
	v.mu.Lock()
	held := v.keys != nil
	recent := !v.lastFetch.IsZero() && v.now().Before(v.lastFetch.Add(v.refresh))
	v.mu.Unlock()
	if recent {
		if held {
			return nil, refuse(ClassUnknownKey, ReasonKeyUnknown)
		}
		return nil, &TokenError{Class: ClassProviderUnavailable, Reason: ReasonJWKSUnavailable,
			cause: errors.New("the provider's keys could not be read, and the next attempt is not due yet")}
	}
	if err := v.fetch(ctx); err != nil {
		return nil, err
	}
	key, found, err := v.lookup(kid, alg)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, refuse(ClassUnknownKey, ReasonKeyUnknown)
	}
	return key, nil
}

// stale reports whether keys are held and were fetched (or last tried)
// longer than the maximum age ago.
func (v *Verifier) stale() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.keys != nil && !v.now().Before(v.lastFetch.Add(v.maxAge))
}

// lookup finds kid in the held key set. found is false when no key of that
// id is held; a key of that id that does not fit alg is an invalid token.
func (v *Verifier) lookup(kid, alg string) (jwk.Key, bool, error) {
	v.mu.Lock()
	set := v.keys
	v.mu.Unlock()
	if set == nil {
		return nil, false, nil
	}
	found := false
	for i := 0; i < set.Len(); i++ {
		k, ok := set.Key(i)
		if !ok || k.KeyID() != kid {
			continue
		}
		if u := k.KeyUsage(); u != "" && u != string(jwk.ForSignature) {
			continue
		}
		found = true
		if keyFits(k, alg) {
			return k, true, nil
		}
	}
	if found {
		return nil, true, refuse(ClassInvalid, ReasonKeyAlgMismatch)
	}
	return nil, false, nil
}

// keyFits reports whether a public key may verify alg: its stated alg, if
// any, is alg, and its type (and curve) is the one alg uses. Symmetric and
// private keys never fit.
func keyFits(k jwk.Key, alg string) bool {
	if a := k.Algorithm().String(); a != "" && a != alg {
		return false
	}
	switch k := k.(type) {
	case jwk.RSAPublicKey:
		return strings.HasPrefix(alg, "RS") || strings.HasPrefix(alg, "PS")
	case jwk.ECDSAPublicKey:
		want := map[string]jwa.EllipticCurveAlgorithm{"ES256": jwa.P256, "ES384": jwa.P384, "ES512": jwa.P521}[alg]
		return want != "" && k.Crv() == want
	case jwk.OKPPublicKey:
		return alg == "EdDSA" && k.Crv() == jwa.Ed25519
	default:
		return false
	}
}

// fetch reads the provider's key set (discovering jwks_uri first if need
// be) and records the attempt, successful or not, for the rate limit.
func (v *Verifier) fetch(ctx context.Context) error {
	// The fetch serves every waiting request, so one client hanging up must
	// not cut it short (and spend the rate limit); the provider client's
	// own timeout bounds it.
	ctx = context.WithoutCancel(ctx)
	v.mu.Lock()
	v.lastFetch = v.now()
	v.mu.Unlock()
	meta, err := v.provider.Metadata(ctx)
	if err != nil {
		return &TokenError{Class: ClassProviderUnavailable, Reason: ReasonDiscoveryFailed, cause: err}
	}
	body, err := v.provider.get(ctx, meta.JWKSURI)
	if err != nil {
		return &TokenError{Class: ClassProviderUnavailable, Reason: ReasonJWKSUnavailable, cause: err}
	}
	set, err := jwk.Parse(body)
	if err != nil {
		return &TokenError{Class: ClassProviderUnavailable, Reason: ReasonJWKSUnavailable,
			cause: fmt.Errorf("the key set at %s is not a JWK set: %w", meta.JWKSURI, err)}
	}
	// A token verified under a key the provider has since dropped is
	// checked again under the new set.
	v.forgetVerified()
	v.mu.Lock()
	v.keys = set
	v.mu.Unlock()
	return nil
}
