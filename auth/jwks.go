package auth

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/lestrrat-go/jwx/v2/jwk"
)

// keyFor returns the provider's key for kid, fit for alg, fetching the key
// set when it is not held yet or does not name kid (rate-limited), and
// again when it is older than the maximum age. Held keys older than the
// grace are not used: the refusal is provider-unavailable.
func (v *Verifier) keyFor(ctx context.Context, kid, alg string) (jwk.Key, jwk.Set, error) {
	if v.stale() {
		v.refreshStale(ctx)
	}
	if err := v.checkGrace(); err != nil {
		return nil, nil, err
	}
	if key, set, found, err := v.lookup(kid, alg); found || err != nil {
		return key, set, err
	}
	v.fetchMu.Lock()
	defer v.fetchMu.Unlock()
	// Another request may have fetched while this one waited.
	if key, set, found, err := v.lookup(kid, alg); found || err != nil {
		return key, set, err
	}
	v.mu.Lock()
	held := v.keys != nil
	v.mu.Unlock()
	if !v.attemptDue() {
		if held {
			return nil, nil, refuse(ClassUnknownKey, ReasonKeyUnknown)
		}
		return nil, nil, &TokenError{Class: ClassProviderUnavailable, Reason: ReasonJWKSUnavailable,
			cause: errors.New("the provider's keys could not be read, and the next attempt is not due yet")}
	}
	if err := v.fetch(ctx); err != nil {
		return nil, nil, err
	}
	key, set, found, err := v.lookup(kid, alg)
	if err != nil {
		return nil, nil, err
	}
	if !found {
		return nil, nil, refuse(ClassUnknownKey, ReasonKeyUnknown)
	}
	return key, set, nil
}

// refreshStale fetches the held, stale key set again when an attempt is
// due (at most one per refresh interval, so a provider that is down is not
// hammered; a failure leaves the held keys). Within the grace, a request
// that finds another one fetching goes on with the held keys rather than
// wait on a provider that may hang until the client's timeout; past the
// grace it waits, as nothing can be accepted without a fresh set.
func (v *Verifier) refreshStale(ctx context.Context) {
	if v.pastGrace() {
		v.fetchMu.Lock()
	} else if !v.fetchMu.TryLock() {
		return
	}
	defer v.fetchMu.Unlock()
	if v.stale() && v.attemptDue() {
		_ = v.fetch(ctx)
	}
}

// stale reports whether keys are held and were last fetched successfully
// longer than the maximum age ago.
func (v *Verifier) stale() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.staleLocked()
}

// staleLocked is stale with v.mu held.
func (v *Verifier) staleLocked() bool {
	return v.keys != nil && !v.now().Before(v.lastGood.Add(v.maxAge))
}

// pastGrace reports whether keys are held and were last fetched
// successfully longer than the grace ago.
func (v *Verifier) pastGrace() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.keys != nil && !v.now().Before(v.lastGood.Add(v.grace))
}

// attemptDue reports whether the refresh interval has passed since the
// last fetch attempt, successful or not.
func (v *Verifier) attemptDue() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.lastFetch.IsZero() || !v.now().Before(v.lastFetch.Add(v.refresh))
}

// checkGrace refuses, provider-unavailable, while the held keys are older
// than the grace: a key the provider withdrew must not stay trusted for as
// long as its key set cannot be read.
func (v *Verifier) checkGrace() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.keys == nil || v.now().Before(v.lastGood.Add(v.grace)) {
		return nil
	}
	return &TokenError{Class: ClassProviderUnavailable, Reason: ReasonJWKSTooOld,
		cause: fmt.Errorf("the provider's keys were last read %s ago, longer than the grace of %s, and cannot be read now",
			v.now().Sub(v.lastGood).Round(time.Second), v.grace)}
}

// lookup finds kid in the held key set. found is false when no key of that
// id is held; a key of that id that does not fit alg is an invalid token.
func (v *Verifier) lookup(kid, alg string) (jwk.Key, jwk.Set, bool, error) {
	v.mu.Lock()
	set := v.keys
	v.mu.Unlock()
	key, found, err := lookupIn(set, kid, alg)
	return key, set, found, err
}

// lookupIn is lookup in set.
func lookupIn(set jwk.Set, kid, alg string) (jwk.Key, bool, error) {
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
	started := v.now()
	v.lastFetch = started
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
	v.lastGood = started
	v.mu.Unlock()
	return nil
}
