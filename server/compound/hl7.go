package compound

import (
	"bytes"
	"fmt"
)

// splitHL7 splits an HL7 v2 message into segments and protects each one the
// table maps to a data type.
//
// Decisions (docs/compound.md says the same for operators):
//   - A segment ends at '\r' (the standard), '\n' or "\r\n". The span is the
//     segment without its terminator; the terminator stays in the skeleton,
//     so a placeholder segment drops into its place.
//   - Empty segments (two terminators in a row, a trailing newline) carry no
//     data and stay in the skeleton.
//   - A segment's id is its first three bytes, followed by the field
//     separator MSH declares or by the segment's end. Anything else, or an
//     id the table does not name, refuses the whole source.
//   - Occurrence numbers count appearances of the same id in order (OBX.1,
//     OBX.2, ...); set-id fields are never read.
//   - Escape sequences (\F\, \X0D\, ...) are never decoded: splitting only
//     looks for terminators, and an escaped terminator is not one.
//   - One message per source: a second MSH is refused.
//   - Segments are never parsed beyond their id, so a CDA inside an OBX is
//     that OBX's data.
func splitHL7(src []byte, t *Table) ([]Section, error) {
	start := 0
	if bytes.HasPrefix(src, bom) {
		start = len(bom)
	}
	if len(src) < start+4 {
		return nil, refuse(FormHL7, start, ErrMalformed, "an MSH segment needs at least its field separator")
	}
	sep := src[start+3]
	if sep == '\r' || sep == '\n' || isAlnum(sep) || sep == ' ' {
		return nil, refuse(FormHL7, start+3, ErrMalformed, "MSH's field separator %q is not usable", sep)
	}
	var out []Section
	seen := make(map[string]int)
	for i := start; i < len(src); {
		end := i
		for end < len(src) && src[end] != '\r' && src[end] != '\n' {
			end++
		}
		seg := src[i:end]
		next := end
		if next < len(src) {
			if src[next] == '\r' && next+1 < len(src) && src[next+1] == '\n' {
				next += 2
			} else {
				next++
			}
		}
		if len(seg) > 0 {
			if len(seg) < 3 || !segmentID.Match(seg[:3]) || (len(seg) > 3 && seg[3] != sep) {
				return nil, refuse(FormHL7, i, ErrMalformed, "a segment must start with a three-character id and the field separator %q", sep)
			}
			id := string(seg[:3])
			seen[id]++
			n := seen[id]
			switch {
			case id == "MSH" && i != start:
				return nil, refuse(FormHL7, i, ErrMalformed, "a second MSH: protect one message per source")
			case t.Clear[id]:
			case t.Segments[id] != "":
				out = append(out, Section{
					ID:       fmt.Sprintf("%s.%d", id, n),
					Label:    fmt.Sprintf("%s[%d]", id, n),
					DataType: t.Segments[id],
					Start:    i, End: end,
				})
			default:
				return nil, refuse(FormHL7, i, ErrUnknownSegment, "%s[%d]; to protect it add --hl7-segment %s=<dataType>, or to keep it in the clear --hl7-segment %s=clear", id, n, id, id)
			}
		}
		i = next
	}
	return out, nil
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// hl7Delimiters are a message's separators: MSH-1 and MSH-2's four
// encoding characters.
type hl7Delimiters struct {
	field, component, repetition, escapeChar, subcomponent byte
}

// hl7DelimitersOf reads them from a message or skeleton starting with MSH;
// an encoding character MSH-2 does not declare (it is shorter than four, or
// ends at the field separator or the segment's end) takes the standard one.
func hl7DelimitersOf(msg []byte) hl7Delimiters {
	d := hl7Delimiters{field: '|', component: '^', repetition: '~', escapeChar: '\\', subcomponent: '&'}
	body := bytes.TrimPrefix(msg, bom)
	if len(body) < 4 {
		return d
	}
	d.field = body[3]
	enc := body[4:]
	if i := bytes.IndexAny(enc, "\r\n"); i >= 0 {
		enc = enc[:i]
	}
	if i := bytes.IndexByte(enc, d.field); i >= 0 {
		enc = enc[:i]
	}
	for i, p := range []*byte{&d.component, &d.repetition, &d.escapeChar, &d.subcomponent} {
		if i < len(enc) {
			*p = enc[i]
		}
	}
	return d
}

// escape appends v with each delimiter written as HL7's escape sequence
// (\F\, \S\, \R\, \E\, \T\ with the message's escape character).
func (d hl7Delimiters) escape(out []byte, v string) []byte {
	for i := 0; i < len(v); i++ {
		c := v[i]
		var name byte
		switch c {
		case d.field:
			name = 'F'
		case d.component:
			name = 'S'
		case d.repetition:
			name = 'R'
		case d.escapeChar:
			name = 'E'
		case d.subcomponent:
			name = 'T'
		default:
			out = append(out, c)
			continue
		}
		out = append(out, d.escapeChar, name, d.escapeChar)
	}
	return out
}
