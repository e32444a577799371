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
		// Around the one-space form: spaces at either end or doubled,
		// other white space, a control byte, DEL, bytes past ASCII.
		" Bearer abc", "Bearer abc ", "Bearer  abc", "Bearer\tabc", "Bearer abc\tdef", "Bearer abc\rdef",
		"Bearer abc\x7f", "Bearer \x7fabc", "Bearer a\x80b", "Bearer abc\u00a0", "Bearer abc\u2028def", "B c",
		"Bearer eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhIn0.c2lnbmF0dXJl-_", " ", "  ", "Bearer ",
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
