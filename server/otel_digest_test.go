package server

import (
	"strconv"
	"testing"

	"github.com/pdmcp/pdmcp/audit"
)

// The spans' digest cache answers what audit.Digest12 does, and stays
// within its bound however many ids pass through it.
func TestDigestCache(t *testing.T) {
	var d digestCache
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"session-1", audit.Digest12("session-1")},
		{"session-1", audit.Digest12("session-1")}, // from the cache
		{"alice", CallerDigest("alice")},
	} {
		if got := d.digest(tc.in); got != tc.want {
			t.Errorf("digest(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	for i := range maxDigests + 10 {
		id := "id-" + strconv.Itoa(i)
		if got := d.digest(id); got != audit.Digest12(id) {
			t.Fatalf("digest(%q) = %q", id, got)
		}
		if len(d.m) > maxDigests {
			t.Fatalf("cache holds %d ids, bound %d", len(d.m), maxDigests)
		}
	}
}
