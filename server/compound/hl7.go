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
