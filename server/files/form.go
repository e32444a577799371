package files

import (
	"runtime"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/pdmcp/pdmcp/server/refusal"
)

// Flavor is which operating system's path rules apply where they differ:
// reserved device names, trailing dots and spaces, drive letters, and case.
type Flavor int

// Flavors.
const (
	Unix Flavor = iota
	Windows
)

// Native is the flavor of the system this program runs on.
func Native() Flavor {
	if runtime.GOOS == "windows" {
		return Windows
	}
	return Unix
}

// MaxPathBytes bounds the path argument; longer is PATH_FORM_REFUSED.
const MaxPathBytes = 4096

func isSep(c byte) bool { return c == '/' || c == '\\' }

// isBidiControl reports the characters that make text display in an order
// other than the one it is stored in; a path holding one can read as a
// different name than it is.
func isBidiControl(r rune) bool {
	switch {
	case r == 0x061C, r == 0x200E, r == 0x200F:
		return true
	case r >= 0x202A && r <= 0x202E:
		return true
	case r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}

// hasDrive reports a drive letter at the start of p ("C:").
func hasDrive(p string) bool {
	return len(p) >= 2 && p[1] == ':' && (p[0]|0x20) >= 'a' && (p[0]|0x20) <= 'z'
}

// CheckForm applies the form rules, which need no filesystem: the first rule
// broken, in the order the package documents, is returned as an *Error.
func CheckForm(p string, fl Flavor) error {
	if p == "" {
		return refuse(refusal.PathEmpty, "the path is empty; name a file in the task's folder")
	}
	if len(p) > MaxPathBytes {
		return refuse(refusal.PathForm, "the path is longer than %d bytes", MaxPathBytes)
	}
	if !utf8.ValidString(p) {
		return refuse(refusal.PathForm, "the path is not valid UTF-8")
	}
	for _, r := range p {
		if unicode.IsControl(r) || isBidiControl(r) {
			return refuse(refusal.PathForm, "the path holds a control character (U+%04X); file names here never do", r)
		}
	}
	if len(p) >= 2 && isSep(p[0]) && isSep(p[1]) {
		return refuse(refusal.UNCOrDevice, "a path starting with two separators is a network share or a device (\\\\server\\share, \\\\?\\, \\\\.\\); name a file in the task's folder")
	}
	if len(p) >= 4 && isSep(p[0]) && p[1] == '?' && p[2] == '?' && isSep(p[3]) {
		return refuse(refusal.UNCOrDevice, "a \\??\\ path names a device; name a file in the task's folder")
	}
	rest := p
	if hasDrive(p) {
		if len(p) == 2 || !isSep(p[2]) {
			if strings.IndexByte(p[2:], ':') >= 0 {
				return refuse(refusal.AlternateStream, "a ':' outside a drive letter names an alternate data stream, which is refused on every platform")
			}
			return refuse(refusal.PathForm, "a drive-relative path (%q) depends on a per-drive working folder; give a full path or one relative to the task's folder", p[:2])
		}
		rest = p[2:]
	}
	if strings.IndexByte(rest, ':') >= 0 {
		return refuse(refusal.AlternateStream, "a ':' outside a drive letter names an alternate data stream (name:stream), which is refused on every platform")
	}
	if fl == Windows {
		for _, c := range components(rest) {
			if c == "." || c == ".." {
				continue
			}
			if last := c[len(c)-1]; last == '.' || last == ' ' {
				return refuse(refusal.PathForm, "a name ending in a dot or a space (%q) is not the name Windows opens", c)
			}
			if isReservedDevice(c) {
				return refuse(refusal.UNCOrDevice, "%q is a device name on Windows, not a file", c)
			}
		}
	}
	return nil
}

// isReservedDevice reports a Windows device name, with or without an
// extension (NUL, nul.txt, COM1.log, CONIN$).
func isReservedDevice(c string) bool {
	base := c
	if i := strings.IndexByte(base, '.'); i >= 0 {
		base = base[:i]
	}
	base = strings.TrimRight(base, " ")
	switch strings.ToUpper(base) {
	case "CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$", "CLOCK$":
		return true
	}
	if len(base) == 4 {
		u := strings.ToUpper(base[:3])
		d := base[3]
		if (u == "COM" || u == "LPT") && d >= '0' && d <= '9' {
			return true
		}
	}
	// COM and LPT with a superscript digit are devices too.
	if r, size := utf8.DecodeLastRuneInString(base); size > 1 && len(base) == 3+size {
		u := strings.ToUpper(base[:3])
		if (u == "COM" || u == "LPT") && (r == '¹' || r == '²' || r == '³') {
			return true
		}
	}
	return false
}

// components splits on both separators, dropping empty names.
func components(p string) []string {
	var out []string
	for _, c := range strings.FieldsFunc(p, func(r rune) bool { return r == '/' || r == '\\' }) {
		if c != "" {
			out = append(out, c)
		}
	}
	return out
}

// Lexical is a path after the form rules, before the filesystem: absolute or
// not, its drive (Windows flavor), and its components with "." dropped and
// ".." applied lexically. A relative path that climbs above its start keeps
// its leading "..".
type Lexical struct {
	Absolute bool
	Drive    string // "C:" for a drive-letter path, else ""
	Parts    []string
}

// Split turns a path that passed [CheckForm] into its lexical form.
func Split(p string, fl Flavor) Lexical {
	var l Lexical
	rest := p
	if hasDrive(p) {
		l.Drive, rest = strings.ToUpper(p[:1])+":", p[2:]
	}
	l.Absolute = l.Drive != "" || (rest != "" && isSep(rest[0]))
	for _, c := range components(rest) {
		switch {
		case c == ".":
		case c == "..":
			if n := len(l.Parts); n > 0 && l.Parts[n-1] != ".." {
				l.Parts = l.Parts[:n-1]
			} else if !l.Absolute {
				l.Parts = append(l.Parts, "..")
			}
		default:
			l.Parts = append(l.Parts, c)
		}
	}
	return l
}

// Within reports whether p is strictly inside root: a longer path whose
// leading components are root's. Both must be clean and absolute; the
// Windows flavor folds case. Both separators count in both flavors.
func Within(root, p string, fl Flavor) bool {
	r, q := components(root), components(p)
	return len(q) > len(r) && samePrefix(r, q, fl)
}

// WithinOrEqual is [Within], or p names root itself.
func WithinOrEqual(root, p string, fl Flavor) bool {
	r, q := components(root), components(p)
	return len(q) >= len(r) && samePrefix(r, q, fl)
}

func samePrefix(r, q []string, fl Flavor) bool {
	for i := range r {
		if fl == Windows {
			if !strings.EqualFold(r[i], q[i]) {
				return false
			}
		} else if r[i] != q[i] {
			return false
		}
	}
	return true
}
