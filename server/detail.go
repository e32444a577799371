package server

import (
	"strings"
	"unicode"
)

// maxUpstreamDetail bounds the detail a Gateway or key-server refusal
// passes to the model, in characters.
const maxUpstreamDetail = 300

// boundDetail makes an upstream refusal's detail fit to hand to a model:
// control and formatting characters (line breaks, escapes, bidirectional
// overrides) become spaces, runs of space collapse, and the text is cut to
// maxUpstreamDetail characters, marked with "…" where it was cut. The
// layer and code travel beside it untouched.
func boundDetail(s string) string {
	var b strings.Builder
	n, space := 0, false
	for _, r := range s {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || unicode.IsSpace(r) || r == unicode.ReplacementChar {
			space = b.Len() > 0
			continue
		}
		if space {
			if n == maxUpstreamDetail {
				break
			}
			b.WriteByte(' ')
			n++
			space = false
		}
		if n == maxUpstreamDetail {
			return strings.TrimRight(b.String(), " ") + "…"
		}
		b.WriteRune(r)
		n++
	}
	return b.String()
}
