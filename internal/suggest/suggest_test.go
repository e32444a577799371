package suggest

import "testing"

func TestDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"", "abc", 3},
		{"abc", "", 3},
		{"manifest", "manifest", 0},
		{"manifst", "manifest", 1},      // a byte left out
		{"confg", "config", 1},          // a byte left out
		{"maxcallers", "maxCallers", 1}, // a byte changed
		{"ttl-seconds", "ttl", 8},
		{"kitten", "sitting", 3},
		{"ab", "ba", 2}, // a swap is two edits
	} {
		if got := Distance(tc.a, tc.b); got != tc.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if got := Distance(tc.b, tc.a); got != tc.want {
			t.Errorf("Distance(%q, %q) = %d, want %d (it is symmetric)", tc.b, tc.a, got, tc.want)
		}
	}
}
