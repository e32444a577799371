// Package lowerhex checks the digests pdmcp writes itself (SHA-256 sums and
// link digests): exactly n lowercase hex digits. The files and records that
// hold them are this program's own, so an uppercase digit means the text was
// not written by it and is refused rather than folded.
package lowerhex

// Valid reports whether s is exactly n lowercase hex digits.
func Valid(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
