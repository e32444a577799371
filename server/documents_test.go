package server

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

// TestSHA256Is: the integrity check says what comparing the hex string
// case-insensitively says, for the digest in either case and for what is
// not it.
func TestSHA256Is(t *testing.T) {
	sum := sha256.Sum256([]byte("synthetic notes"))
	lower := hex.EncodeToString(sum[:])
	other := sha256.Sum256([]byte("other"))
	for _, tc := range []struct {
		digest string
		want   bool
	}{
		{lower, true},
		{strings.ToUpper(lower), true},
		{strings.ToUpper(lower[:10]) + lower[10:], true},
		{hex.EncodeToString(other[:]), false},
		{lower[:63], false},
		{lower + "0", false},
		{"", false},
		{lower[:62] + "g" + lower[63:], false},
		{lower[:62] + "\u212a", false},
		{strings.Repeat("0", 64), false},
	} {
		if got := sha256Is(sum, tc.digest); got != tc.want {
			t.Errorf("%q: got %v, want %v", tc.digest, got, tc.want)
		}
		if fold := strings.EqualFold(lower, tc.digest); fold != tc.want {
			t.Errorf("%q: the case-insensitive compare says %v, the table %v", tc.digest, fold, tc.want)
		}
	}
}
