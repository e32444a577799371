// Package jsonb64 reads a JSON object one of whose string members holds a
// large standard-base64 value (a ciphertext or plaintext of up to 16 MiB),
// decoding that value as it streams past. The document's text and the
// decoded bytes are then never both held whole: the caller gets the decoded
// bytes and the rest of the document, with "" in the value's place, to
// unmarshal and validate as usual.
package jsonb64

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strings"
)

// ErrFormat is the cause of every error about the text itself (as opposed
// to an error reading it).
var ErrFormat = errors.New("not the expected JSON")

// ErrTooLarge is returned when the text is longer than the limit.
var ErrTooLarge = errors.New("JSON text over its size limit")

// chunk is how much base64 is decoded at a time: a multiple of 4, so each
// chunk but the last decodes on its own exactly as the whole would.
const chunk = 16 << 10

// maxKey bounds a member name kept for matching; longer names never match.
const maxKey = 256

// Result is what Read found.
type Result struct {
	// Rest is the document with the field's value replaced by "".
	Rest []byte
	// Data is the field's decoded value; Seen says whether the field was
	// streamed at all (a name written with escapes is not recognised, and
	// its value is then left in Rest for the caller's unmarshalling).
	Data []byte
	Seen bool
}

// Read reads JSON text from r (at most limit bytes) and decodes the first
// top-level member named field (matched ASCII case-insensitively, as
// encoding/json matches names) whose value is a string, as standard base64,
// into Data. sizeHint, when positive, is the expected decoded size: Data
// is allocated once at that size. Within the value, the JSON escapes \/,
// \uXXXX (of a base64 character) and \n, \r (ignored, as the base64 decoder
// ignores line breaks) are understood; any other escape or character is
// not base64 and an error. A second member of that name is an error. The
// rest of the text is not validated here: the caller unmarshals Rest.
func Read(r io.Reader, field string, sizeHint int, limit int64) (Result, error) {
	p := parser{field: field}
	if sizeHint > 0 {
		p.data = make([]byte, 0, sizeHint)
	}
	buf := make([]byte, 64<<10)
	var total int64
	for {
		n, err := r.Read(buf)
		total += int64(n)
		if total > limit {
			return Result{}, ErrTooLarge
		}
		if perr := p.feed(buf[:n]); perr != nil {
			return Result{}, perr
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return Result{}, err
		}
	}
	if p.mode == modeBig {
		return Result{}, fmt.Errorf("%w: the %s value does not end", ErrFormat, field)
	}
	return Result{Rest: p.rest.Bytes(), Data: p.data, Seen: p.seen}, nil
}

const (
	modeNormal = iota
	modeString
	modeBig
)

type parser struct {
	field string
	mode  int
	depth int

	// Outside strings: the last top-level string, whether it was the last
	// token, and whether a ':' followed it (the next value is its member's).
	key      []byte
	keyLong  bool
	afterStr bool
	member   bool

	escaped bool // in a string, after a backslash

	// In the field's value: an escape being read (after the backslash).
	esc []byte

	rest bytes.Buffer
	acc  []byte // base64 not yet decoded, up to chunk
	data []byte
	seen bool
}

func (p *parser) feed(b []byte) error {
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch p.mode {
		case modeBig:
			if len(p.esc) > 0 {
				if err := p.escape(c); err != nil {
					return err
				}
				continue
			}
			// The common case: a run of plain characters.
			j := i
			for j < len(b) && b[j] != '"' && b[j] != '\\' && b[j] >= 0x20 {
				j++
			}
			if err := p.add(b[i:j]); err != nil {
				return err
			}
			if j == len(b) {
				return nil
			}
			i = j
			switch c := b[j]; {
			case c == '"':
				if err := p.flush(true); err != nil {
					return err
				}
				p.rest.WriteByte('"')
				p.mode = modeNormal
			case c == '\\':
				p.esc = append(p.esc[:0], '\\')
			default:
				return fmt.Errorf("%w: a control character in the %s value", ErrFormat, p.field)
			}
		case modeString:
			p.rest.WriteByte(c)
			switch {
			case p.escaped:
				p.escaped = false
			case c == '\\':
				p.escaped = true
			case c == '"':
				p.mode = modeNormal
				p.afterStr = p.depth == 1
				continue
			}
			if p.depth == 1 {
				if len(p.key) < maxKey {
					p.key = append(p.key, c)
				} else {
					p.keyLong = true
				}
			}
		default:
			p.rest.WriteByte(c)
			switch c {
			case ' ', '\t', '\n', '\r':
				continue
			case '"':
				if p.member && p.depth == 1 && !p.keyLong && strings.EqualFold(string(p.key), p.field) {
					if p.seen {
						return fmt.Errorf("%w: %s appears twice", ErrFormat, p.field)
					}
					p.seen = true
					p.mode = modeBig
				} else {
					p.mode = modeString
					p.key, p.keyLong = p.key[:0], false
				}
			case ':':
				p.member = p.afterStr
				p.afterStr = false
				continue
			case '{', '[':
				p.depth++
			case '}', ']':
				p.depth--
			}
			p.afterStr, p.member = false, false
		}
	}
	return nil
}

// escape reads one more character of an escape in the field's value.
func (p *parser) escape(c byte) error {
	p.esc = append(p.esc, c)
	bad := func() error {
		return fmt.Errorf("%w: the %s value has an escape that is not base64", ErrFormat, p.field)
	}
	if len(p.esc) == 2 {
		switch c {
		case '/':
			p.esc = p.esc[:0]
			return p.add([]byte{'/'})
		case 'n', 'r':
			p.esc = p.esc[:0]
			return nil
		case 'u':
			return nil
		}
		return bad()
	}
	if len(p.esc) < 6 {
		return nil
	}
	var r int
	for _, h := range p.esc[2:6] {
		switch {
		case h >= '0' && h <= '9':
			r = r*16 + int(h-'0')
		case h >= 'a' && h <= 'f':
			r = r*16 + int(h-'a'+10)
		case h >= 'A' && h <= 'F':
			r = r*16 + int(h-'A'+10)
		default:
			return bad()
		}
	}
	p.esc = p.esc[:0]
	switch {
	case r == '\n' || r == '\r':
		return nil
	case r == '+' || r == '/' || r == '=' || (r >= '0' && r <= '9') || (r >= 'A' && r <= 'Z') || (r >= 'a' && r <= 'z'):
		return p.add([]byte{byte(r)})
	}
	return bad()
}

// add queues base64 characters, decoding each full chunk once more
// follow it.
func (p *parser) add(s []byte) error {
	for len(s) > 0 {
		if len(p.acc) == chunk {
			if err := p.flush(false); err != nil {
				return err
			}
		}
		if p.acc == nil {
			p.acc = make([]byte, 0, chunk)
		}
		n := min(len(s), chunk-len(p.acc))
		p.acc = append(p.acc, s[:n]...)
		s = s[n:]
	}
	return nil
}

// flush decodes the queued base64. Padding is allowed only at the very end.
func (p *parser) flush(last bool) error {
	if !last && bytes.IndexByte(p.acc, '=') >= 0 {
		return fmt.Errorf("%w: the %s value has base64 after its padding", ErrFormat, p.field)
	}
	var err error
	if p.data, err = base64.StdEncoding.AppendDecode(p.data, p.acc); err != nil {
		return fmt.Errorf("%w: the %s value is not base64: %v", ErrFormat, p.field, err)
	}
	if p.data == nil {
		p.data = []byte{}
	}
	p.acc = p.acc[:0]
	return nil
}
