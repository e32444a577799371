package auth

import (
	"crypto/sha256"
	"slices"
)

// verifiedToken is a verified-token cache entry: the caller, and the key
// (id and algorithm) the signature verified under.
type verifiedToken struct {
	caller   Caller
	kid, alg string
}

// maxVerified bounds the verified-token cache; a full cache is swept of
// expired entries and then, if still full, emptied. A token not in it is
// only verified again (about a quarter of a millisecond), so the bound is
// kept small: the server's heap stays flat however many users pass.
const maxVerified = 64

// stillTrusted reports whether a cached token's key is still one the
// provider publishes, as far as the held key set says: the set is not
// older than the maximum age (else it is fetched again, through verify),
// and it still holds the key. A lookup in the held set is a walk over a
// handful of keys, far cheaper than a signature check.
func (v *Verifier) stillTrusted(e verifiedToken) bool {
	if v.stale() {
		return false
	}
	key, found, err := v.lookup(e.kid, e.alg)
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
