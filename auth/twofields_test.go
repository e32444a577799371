package auth

import (
	"strings"
	"testing"
)

func TestTwoFieldsIsStringsFields(t *testing.T) {
	for _, v := range []string{
		"", " ", "\t\n\v\f\r ", "Bearer", "Bearer abc", "  Bearer   abc  ", "bearer\tabc", "Bearer abc def",
		"Bearer abc def ghi", "Bearer\u00a0abc", "Bearer\u2003abc def", "Bearer abcé", "é", "\u0085Bearer abc",
		"Bearer abc\x00", "Basic dXNlcjpwYXNz", "Bearer a\x1fb",
	} {
		fields := strings.Fields(v)
		first, second, n := twoFields(v)
		var want [2]string
		copy(want[:], fields)
		if first != want[0] || second != want[1] || n != min(len(fields), 3) {
			t.Errorf("twoFields(%q) = %q, %q, %d; strings.Fields = %q", v, first, second, n, fields)
		}
	}
}
