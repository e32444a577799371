package lowerhex

import "testing"

func TestValid(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want bool
	}{
		{"0123456789abcdef", 16, true},
		{"", 0, true},
		{"abc", 2, false},
		{"abc", 4, false},
		{"ABCDEF", 6, false},
		{"abcdeg", 6, false},
		{"abc de", 6, false},
		{"0a/:`g", 6, false},
	} {
		if got := Valid(tc.s, tc.n); got != tc.want {
			t.Errorf("Valid(%q, %d) = %v, want %v", tc.s, tc.n, got, tc.want)
		}
	}
}
