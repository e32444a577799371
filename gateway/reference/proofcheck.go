package reference

import (
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/proof"
)

// checkProof checks the request's DPoP proof against the session handle
// ("" at sign-in) and the key the session is bound to, in the contract's
// order: missing, invalid, stale, replayed, key mismatch.
func (g *Gateway) checkProof(r *http.Request, handle, wantJKT string, now time.Time) *api.Error {
	vals := r.Header.Values("DPoP")
	if len(vals) == 0 || strings.TrimSpace(vals[0]) == "" {
		return proofError(api.CodeProofMissing,
			"send a DPoP header holding a proof signed by the session's key; make a fresh proof for each request")
	}
	if len(vals) > 1 {
		return proofError(api.CodeProofInvalid, "send exactly one DPoP header; make one proof for this request")
	}
	v, err := proof.Verify(vals[0], r.Method, requestURL(r), handle, now, api.ProofWindow)
	switch {
	case errors.Is(err, proof.ErrMissing):
		return proofError(api.CodeProofMissing,
			"send a DPoP header holding a proof signed by the session's key; make a fresh proof for each request")
	case errors.Is(err, proof.ErrStale):
		return proofError(api.CodeProofStale,
			"the proof's iat is more than 60 seconds from the Gateway's clock; correct the clock offset from the Date header and make a fresh proof")
	case err != nil:
		return proofError(api.CodeProofInvalid,
			"the proof was not accepted ("+proofProblem(err)+"); make a fresh proof for this method, URL and session")
	}
	if !g.replay.remember("proof:"+v.Claims.JTI, time.Unix(v.Claims.IAT, 0), now) {
		return proofError(api.CodeProofReplayed,
			"this proof's jti was already used; make a fresh proof for every request, retries included")
	}
	if v.JKT != wantJKT {
		return proofError(api.CodeProofKeyMismatch,
			"the proof is signed by a key the session is not bound to; sign with the session's own key")
	}
	return nil
}

func proofError(code, detail string) *api.Error {
	return gatewayError(code, http.StatusUnauthorized, detail)
}

// proofProblem names the failed check. The proof package's messages say
// which check failed and quote nothing from the proof.
func proofProblem(err error) string {
	return strings.TrimPrefix(err.Error(), proof.ErrInvalid.Error()+": ")
}

// replayCache remembers each proof jti (and each login assertion jti) for
// as long as the proof could still be accepted.
type replayCache struct {
	mu      sync.Mutex
	seen    map[string]time.Time
	inserts int
}

func newReplayCache() *replayCache {
	return &replayCache{seen: map[string]time.Time{}}
}

// remember records id and reports whether it was new. at is the proof's
// iat (or the assertion's exp): the entry is kept until the window around
// it has passed on the Gateway's clock. Keeping it a window past "now" as
// well covers a clock that is moved back by fault injection.
func (c *replayCache) remember(id string, at, now time.Time) bool {
	until := at
	if now.After(until) {
		until = now
	}
	until = until.Add(2 * api.ProofWindow)
	c.mu.Lock()
	defer c.mu.Unlock()
	if exp, ok := c.seen[id]; ok && now.Before(exp) {
		return false
	}
	c.seen[id] = until
	c.inserts++
	if c.inserts%256 == 0 {
		for k, exp := range c.seen {
			if !now.Before(exp) {
				delete(c.seen, k)
			}
		}
	}
	return true
}
