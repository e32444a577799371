package compound

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strings"
)

// hl7v3 is the namespace of a C-CDA's elements.
const hl7v3 = "urn:hl7-org:v3"

// loincOID is the LOINC code system's OID.
const loincOID = "2.16.840.1.113883.6.1"

// isCCDA reports whether the first element of body is ClinicalDocument,
// whatever its prefix.
func isCCDA(body []byte) bool {
	d := xml.NewDecoder(bytes.NewReader(body))
	// Read any declared encoding as is: this only looks for the root's
	// name; splitCCDA refuses an encoding other than UTF-8.
	d.CharsetReader = func(_ string, r io.Reader) (io.Reader, error) { return r, nil }
	for {
		tok, err := d.RawToken()
		if err != nil {
			return false
		}
		if se, ok := tok.(xml.StartElement); ok {
			return se.Name.Local == "ClinicalDocument"
		}
	}
}

// element is one open element during the walk.
type element struct {
	name  xml.Name
	start int
	// sec is the index in secs of the section this element opens, or -1.
	sec int
}

// ccdaSection is a section or recordTarget found by the walk.
type ccdaSection struct {
	local      string // "section" or "recordTarget"
	start, end int
	parent     int // index of the enclosing section, or -1
	code       string
	codeSystem string
	codes      int // how many code children
	template   string
}

// xmlReader reads a C-CDA as both splitting it and checking a saved
// section in its skeleton must: strictly, after any byte-order mark, with
// offsets in the whole source (the mark included).
type xmlReader struct {
	d    *xml.Decoder
	base int // the byte-order mark's length, or 0
}

func newXMLReader(src []byte) *xmlReader {
	r := &xmlReader{}
	if bytes.HasPrefix(src, bom) {
		r.base = len(bom)
	}
	r.d = xml.NewDecoder(bytes.NewReader(src[r.base:]))
	r.d.Strict = true
	return r
}

// offset is where in the source the reader stands: just after the last
// token it read.
func (r *xmlReader) offset() int { return r.base + int(r.d.InputOffset()) }

// next reads the next token and the offset in the source it starts at;
// the error is io.EOF at the end.
func (r *xmlReader) next() (off int, tok xml.Token, err error) {
	off = r.offset()
	tok, err = r.d.Token()
	return off, tok, err
}

// splitCCDA walks the document's XML tokens with their byte offsets and
// protects recordTarget and every section.
//
// Decisions (docs/compound.md says the same for operators):
//   - Elements are matched by local name in the urn:hl7-org:v3 namespace,
//     whatever prefix maps to it; a section or recordTarget element in
//     another namespace is refused.
//   - A span is the <section> (or <recordTarget>) element from its start
//     tag to its end tag; the <component> around it stays in the skeleton.
//   - A section's type is its direct <code> child's code attribute. No
//     code, more than one code child, or a codeSystem other than LOINC is
//     refused; so is a code the table does not map.
//   - A section nested inside a section of the same data type is part of
//     the outer span; of another type, or of an unmapped code, it refuses
//     the source (its bytes would otherwise sit under the outer key).
//   - recordTarget must be a child of the root; a nonXMLBody is refused.
//   - Comments and CDATA are the decoder's: a <section> in a comment is
//     not a section, and stays wherever the comment is.
//   - Any <!DOCTYPE or <!ENTITY, anywhere (even in a comment), refuses
//     the source; so does a declared encoding other than UTF-8 (the
//     decoder has no charset reader), an undefined
//     entity, or anything the decoder finds not well-formed.
func splitCCDA(src []byte, t *Table) ([]Section, error) {
	for _, decl := range []string{"<!DOCTYPE", "<!ENTITY"} {
		if i := indexFold(src, []byte(decl)); i >= 0 {
			return nil, refuse(FormCCDA, i, ErrDeclaration, "declarations are never processed")
		}
	}
	r := newXMLReader(src)
	var (
		stack    []element
		secs     []ccdaSection
		roots    int
		curSec   = -1
		rootDone bool
	)
	for {
		off, tok, err := r.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, refuse(FormCCDA, off, ErrMalformed, "%v", err)
		}
		switch tk := tok.(type) {
		case xml.StartElement:
			if len(stack) == 0 {
				roots++
				if roots > 1 || rootDone {
					return nil, refuse(FormCCDA, off, ErrMalformed, "a second root element")
				}
				if tk.Name.Local != "ClinicalDocument" || tk.Name.Space != hl7v3 {
					return nil, refuse(FormCCDA, off, ErrUnknownForm, "the root must be ClinicalDocument in %s", hl7v3)
				}
			}
			el := element{name: tk.Name, start: off, sec: -1}
			parentIsSection := len(stack) > 0 && stack[len(stack)-1].sec >= 0 && secs[stack[len(stack)-1].sec].local == "section"
			switch tk.Name.Local {
			case "section", "recordTarget":
				if tk.Name.Space != hl7v3 {
					return nil, refuse(FormCCDA, off, ErrMalformed, "a %s element outside %s", tk.Name.Local, hl7v3)
				}
				if tk.Name.Local == "recordTarget" && len(stack) != 1 {
					return nil, refuse(FormCCDA, off, ErrMalformed, "recordTarget outside the document header")
				}
				if tk.Name.Local == "section" && curSec >= 0 && secs[curSec].local != "section" {
					return nil, refuse(FormCCDA, off, ErrNested, "a section inside %s", secs[curSec].local)
				}
				secs = append(secs, ccdaSection{local: tk.Name.Local, start: off, parent: curSec})
				el.sec = len(secs) - 1
				curSec = el.sec
			case "nonXMLBody":
				return nil, refuse(FormCCDA, off, ErrNonXMLBody, "protect it as a single document instead")
			case "code":
				if parentIsSection {
					s := &secs[stack[len(stack)-1].sec]
					s.codes++
					for _, a := range tk.Attr {
						switch a.Name.Local {
						case "code":
							if s.code != "" || a.Name.Space != "" {
								return nil, refuse(FormCCDA, off, ErrMalformed, "a section code with a repeated or prefixed code attribute")
							}
							s.code = a.Value
						case "codeSystem":
							s.codeSystem = a.Value
						}
					}
				}
			case "templateId":
				if parentIsSection {
					s := &secs[stack[len(stack)-1].sec]
					if s.template == "" {
						for _, a := range tk.Attr {
							if a.Name.Local == "root" && a.Name.Space == "" {
								s.template = a.Value
							}
						}
					}
				}
			}
			stack = append(stack, el)
		case xml.EndElement:
			if len(stack) == 0 {
				return nil, refuse(FormCCDA, off, ErrMalformed, "an end tag with no start")
			}
			el := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if el.sec >= 0 {
				secs[el.sec].end = r.offset()
				curSec = secs[el.sec].parent
			}
			if len(stack) == 0 {
				rootDone = true
			}
		case xml.CharData:
			if len(stack) == 0 && len(bytes.TrimSpace(tk)) > 0 {
				return nil, refuse(FormCCDA, off, ErrMalformed, "text outside the root element")
			}
		case xml.Directive:
			return nil, refuse(FormCCDA, off, ErrDeclaration, "declarations are never processed")
		}
	}
	if !rootDone || len(stack) != 0 {
		return nil, refuse(FormCCDA, -1, ErrMalformed, "the document ends before its root element closes")
	}
	return ccdaSpans(secs, t)
}

// ccdaSpans decides each found section's data type and returns the
// outermost ones as spans, with ids and labels.
func ccdaSpans(secs []ccdaSection, t *Table) ([]Section, error) {
	types := make([]string, len(secs))
	for i, s := range secs {
		if s.local == "recordTarget" {
			types[i] = Demographics
			continue
		}
		switch {
		case s.codes == 0 || s.code == "":
			return nil, refuse(FormCCDA, s.start, ErrSectionNoCode, "every section needs code/@code to choose its key")
		case s.codes > 1:
			return nil, refuse(FormCCDA, s.start, ErrMalformed, "a section with %d code elements", s.codes)
		case s.codeSystem != "" && s.codeSystem != loincOID:
			return nil, refuse(FormCCDA, s.start, ErrUnknownSection, "code %q in code system %q; only LOINC (%s) codes are mapped", s.code, s.codeSystem, loincOID)
		}
		dt, ok := t.Sections[s.code]
		if !ok {
			return nil, refuse(FormCCDA, s.start, ErrUnknownSection, "code %q; to protect it add --ccda-section %s=<dataType>", s.code, s.code)
		}
		types[i] = dt
	}
	var out []Section
	count := make(map[string]int)
	for i, s := range secs {
		if s.parent >= 0 {
			// The outermost ancestor decides the key; every level must
			// agree with it.
			top := s.parent
			for secs[top].parent >= 0 {
				top = secs[top].parent
			}
			if types[i] != types[top] {
				return nil, refuse(FormCCDA, s.start, ErrNested, "a %s section (code %s) inside a %s section", types[i], s.code, types[top])
			}
			continue
		}
		dt := types[i]
		count[dt]++
		id := dt
		if count[dt] > 1 {
			id = fmt.Sprintf("%s.%d", dt, count[dt])
		}
		label := "recordTarget"
		if s.local == "section" {
			label = fmt.Sprintf("%s section (%s)", titleCase(dt), s.code)
		}
		out = append(out, Section{ID: id, Label: label, DataType: dt, TemplateRoot: s.template, Start: s.start, End: s.end})
	}
	return out, nil
}

func titleCase(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
