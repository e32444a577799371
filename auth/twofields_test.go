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

// TestPlainField: eight bytes at a time, plainField finds any byte that is
// not printable ASCII wherever it is, as a byte-by-byte check does.
func TestPlainField(t *testing.T) {
	byByte := func(s string) bool {
		for i := 0; i < len(s); i++ {
			if s[i] < '!' || s[i] > '~' {
				return false
			}
		}
		return s != ""
	}
	base := "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhIn0.c2ln-_~!"
	if !plainField(base) {
		t.Fatalf("%q is plain", base)
	}
	for n := 0; n <= len(base); n++ {
		for i := range n {
			for c := range 256 {
				b := []byte(base[:n])
				b[i] = byte(c)
				if got, want := plainField(string(b)), byByte(string(b)); got != want {
					t.Errorf("plainField(%q) = %v, want %v", b, got, want)
				}
			}
		}
		if got, want := plainField(base[:n]), byByte(base[:n]); got != want {
			t.Errorf("plainField(%q) = %v, want %v", base[:n], got, want)
		}
	}
}
