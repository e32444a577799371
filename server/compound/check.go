package compound

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"strings"
)

// ErrSectionText is the reason a section's new text is refused by
// [CheckSectionText]; the *RefusedError's Detail says which rule it broke.
var ErrSectionText = errors.New("the section's new text would change the document's structure")

// CheckSectionText decides whether text may replace the section id of the
// given skeleton without changing the document's structure: a save replaces
// one section's bytes, never the skeleton's, so the text must not add,
// remove or close anything outside its own span.
//
//   - HL7 v2: the text is exactly one segment of the section's id ("OBX"
//     for OBX.2): it starts with that id, followed by the field separator
//     MSH declares or nothing, and holds no '\r' or '\n' (the skeleton keeps
//     the terminator, so a separator would add segments to the message).
//   - C-CDA: the skeleton with this one section put back, the other markers
//     left as they are (they are processing instructions), is well-formed
//     XML with no declaration, and the text is exactly one element, from the
//     first byte to the last, of the section's kind: a section (in the
//     urn:hl7-org:v3 namespace, whatever prefix maps to it there), or a
//     recordTarget where the section sits directly in the root. It holds no
//     recordTarget inside it. Its section code is not checked against a
//     table: the server that saves does not hold the operator's table.
//   - Either form: UTF-8 with no NUL and no fragment marker.
//
// The text is never decoded beyond what the check needs: entities other
// than XML's five and character references are refused by the decoder, and
// any <!DOCTYPE or <!ENTITY refuses the text before it is parsed.
func CheckSectionText(skeleton []byte, id string, text []byte) error {
	form := FormOfSkeleton(skeleton)
	bad := func(format string, args ...any) error { return refuse(form, -1, ErrSectionText, format, args...) }
	if len(text) == 0 {
		return bad("the text is empty; a section cannot be removed by a save")
	}
	if bytes.IndexByte(text, 0) >= 0 {
		return refuse(form, -1, ErrNotText, "the text holds a NUL byte")
	}
	if indexFold(text, []byte(markerOpen)) >= 0 {
		return refuse(form, -1, ErrMarkerInSource, "%q", markerOpen)
	}
	ids, err := MarkerIDs(skeleton)
	if err != nil {
		return err
	}
	found := false
	for _, m := range ids {
		found = found || m == id
	}
	if !found {
		return bad("the skeleton has no section %q", id)
	}
	if form == FormHL7 {
		return checkSegment(skeleton, id, text, bad)
	}
	return checkElement(skeleton, id, text, bad)
}

func checkSegment(skeleton []byte, id string, text []byte, bad func(string, ...any) error) error {
	if i := bytes.IndexAny(text, "\r\n"); i >= 0 {
		return bad("a segment separator (CR or LF) at byte %d would add a segment to the message; save one segment's text, without its terminator", i)
	}
	seg, _, _ := strings.Cut(id, ".")
	body := bytes.TrimPrefix(skeleton, bom)
	if len(body) < 4 {
		return bad("the skeleton has no MSH field separator")
	}
	sep := body[3]
	if !bytes.HasPrefix(text, []byte(seg)) || (len(text) > len(seg) && text[len(seg)] != sep) {
		return bad("section %s must stay one %s segment: its text starts with %q followed by the field separator %q", id, seg, seg, sep)
	}
	return nil
}

func checkElement(skeleton []byte, id string, text []byte, bad func(string, ...any) error) error {
	for _, decl := range []string{"<!DOCTYPE", "<!ENTITY"} {
		if indexFold(text, []byte(decl)) >= 0 {
			return bad("declarations are never processed")
		}
	}
	// Put this section back alone: its span in the result is
	// [start, start+len(text)).
	marker := Marker(id)
	at := bytes.Index(skeleton, marker)
	doc := make([]byte, 0, len(skeleton)+len(text))
	doc = append(doc, skeleton[:at]...)
	doc = append(doc, text...)
	doc = append(doc, skeleton[at+len(marker):]...)
	start, end := at, at+len(text)

	r := newXMLReader(doc)
	depth := 0
	// spanDepth is the depth the span's element opens at, known once
	// the walk reaches start; spanEl counts elements opened at start.
	spanDepth, spanEl := -1, 0
	for {
		off, tok, err := r.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if off >= start && off < end {
				return bad("not well-formed where it stands: %v", err)
			}
			return bad("the document would not be well-formed: %v", err)
		}
		in := off >= start && off < end
		switch tk := tok.(type) {
		case xml.StartElement:
			switch {
			case off == start:
				want := "section"
				if depth == 1 {
					want = "recordTarget"
				}
				if tk.Name.Local != want || tk.Name.Space != hl7v3 {
					return bad("section %s must be one <%s> element in %s", id, want, hl7v3)
				}
				spanDepth = depth
				spanEl++
			case in && depth == spanDepth:
				return bad("a second element after the section's own; save exactly one element")
			case in && tk.Name.Local == "recordTarget":
				return bad("a recordTarget inside a section")
			case !in && (tk.Name.Local == "section" || tk.Name.Local == "recordTarget"):
				// Every other section is a marker: an element here came
				// from the text.
				return bad("a %s element outside the saved section", tk.Name.Local)
			}
			depth++
		case xml.EndElement:
			depth--
			if in && depth < spanDepth {
				return bad("the text closes an element it did not open")
			}
			if in && depth == spanDepth {
				if e := r.offset(); e != end {
					return bad("text after the section's end tag; save exactly one element")
				}
			}
		case xml.CharData:
			if in && depth == spanDepth {
				return bad("text outside the section's element; save exactly one element")
			}
		case xml.Directive:
			return bad("declarations are never processed")
		case xml.Comment, xml.ProcInst:
			if in && depth == spanDepth {
				return bad("a comment or processing instruction outside the section's element; save exactly one element")
			}
		}
	}
	if spanEl != 1 {
		return bad("section %s must start with its own element's start tag", id)
	}
	return nil
}
