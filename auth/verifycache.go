package auth

import (
	"crypto/sha256"
	"slices"

	"github.com/lestrrat-go/jwx/v2/jwk"
)

// verifiedToken is a verified-token cache entry: the caller, and the key
// the signature verified under.
type verifiedToken struct {
	caller Caller
	// key is behind a pointer (made once per full check) so that the
	// entry stays small enough for the map to hold it in place.
	key *signingKey
}

// signingKey is the key (id and algorithm) a token's signature verified
// under, and the held key set it was found in. The held set is never
// changed in place (a fetch replaces it), so while it is still this set,
// it still holds the key.
type signingKey struct {
	kid, alg string
	set      jwk.Set
}

// maxVerified bounds the verified-token cache; a full cache is swept of
// expired entries and then, if still full, emptied. A token not in it is
// only verified again (about a quarter of a millisecond), so the bound is
// kept small: the server's heap stays flat however many users pass.
const maxVerified = 64

// stillTrusted reports whether a cached token's key is still one the
// provider publishes, as far as the held key set says: the set is not
// older than the maximum age (else it is fetched again, through verify),
// and it still holds the key. While the held set is the one the entry
// found its key in, that is known without a walk; otherwise the key is
// looked up in it (a walk over a handful of keys, far cheaper than a
// signature check).
func (v *Verifier) stillTrusted(e verifiedToken) bool {
	v.mu.Lock()
	set := v.keys
	stale := v.staleLocked()
	v.mu.Unlock()
	if stale {
		return false
	}
	if e.key == nil {
		return false
	}
	if set != nil && set == e.key.set {
		return true
	}
	key, found, err := lookupIn(set, e.key.kid, e.key.alg)
	return found && err == nil && key != nil
}

func (v *Verifier) remember(sum [sha256.Size]byte, e verifiedToken) {
	e.caller.Scopes = slices.Clone(e.caller.Scopes)
	now := v.now()
	v.cacheMu.Lock()
	defer v.cacheMu.Unlock()
	if len(v.verified) >= maxVerified {
		for k, old := range v.verified {
			if !now.Before(old.caller.Expiry.Add(v.skew)) {
				delete(v.verified, k)
			}
		}
		if len(v.verified) >= maxVerified {
			clear(v.verified)
		}
	}
	v.verified[sum] = e
}

// forgetVerified empties the verified-token cache.
func (v *Verifier) forgetVerified() {
	v.cacheMu.Lock()
	defer v.cacheMu.Unlock()
	clear(v.verified)
}
