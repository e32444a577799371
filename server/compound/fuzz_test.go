package compound

import (
	"bytes"
	"crypto/sha256"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"testing"
	"unicode/utf8"
)

// checkNoProtectedLeft re-reads a skeleton the way an attacker reading it
// would, and fails if it still holds anything the table protects: a C-CDA
// skeleton must hold no section, recordTarget or nonXMLBody element; an
// HL7 skeleton no segment but clear ones and markers.
func checkNoProtectedLeft(form Form, skeleton []byte, t *Table) error {
	if form == FormHL7 {
		for i, seg := range bytes.FieldsFunc(skeleton, func(r rune) bool { return r == '\r' || r == '\n' }) {
			seg = bytes.TrimPrefix(seg, bom)
			if bytes.HasPrefix(seg, []byte(markerOpen)) && bytes.HasSuffix(seg, []byte(markerClose)) {
				continue
			}
			if len(seg) < 3 || !t.Clear[string(seg[:3])] {
				return fmt.Errorf("skeleton segment %d %q is not a clear segment", i, seg)
			}
		}
		return nil
	}
	d := xml.NewDecoder(bytes.NewReader(bytes.TrimPrefix(skeleton, bom)))
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("skeleton is not well-formed: %w", err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			switch se.Name.Local {
			case "section", "recordTarget", "nonXMLBody":
				return fmt.Errorf("skeleton holds a %s element", se.Name.Local)
			}
		}
	}
}

func fuzzSplit(f *testing.F, form Form) {
	f.Fuzz(func(t *testing.T, src []byte) {
		r, err := Split(src, DefaultTable())
		if err != nil {
			return
		}
		if r.Form != form {
			// The other target covers it.
			return
		}
		back, err := Reassemble(r.Skeleton, r.Texts())
		if err != nil {
			t.Fatalf("reassemble: %v", err)
		}
		if !bytes.Equal(back, src) || sha256.Sum256(back) != r.SHA256 {
			t.Fatal("reassembly is not byte-identical")
		}
		// The skeleton is exactly the source outside the spans, with one
		// marker per span: no byte of a span is left in it.
		var want bytes.Buffer
		last := 0
		for _, s := range r.Sections {
			if s.Start < last || s.End <= s.Start || s.End > len(src) || !bytes.Equal(s.Text, src[s.Start:s.End]) {
				t.Fatalf("span %s [%d,%d) is not an ordered, non-empty span of the source", s.ID, s.Start, s.End)
			}
			want.Write(src[last:s.Start])
			want.Write(Marker(s.ID))
			last = s.End
		}
		want.Write(src[last:])
		if !bytes.Equal(want.Bytes(), r.Skeleton) {
			t.Fatal("the skeleton is not the source outside the spans")
		}
		if err := checkNoProtectedLeft(r.Form, r.Skeleton, DefaultTable()); err != nil {
			t.Fatal(err)
		}
	})
}

func FuzzSplitCCDA(f *testing.F) {
	f.Add([]byte(ccdHead + sec("30954-2", "x") + "</ClinicalDocument>"))
	f.Add([]byte("\uFEFF<cda:ClinicalDocument xmlns:cda=\"urn:hl7-org:v3\"><cda:recordTarget/><!-- c --><cda:component><cda:section><cda:code code='8716-3'/><![CDATA[<]]></cda:section></cda:component></cda:ClinicalDocument>"))
	fuzzSplit(f, FormCCDA)
}

func FuzzSplitHL7(f *testing.F) {
	f.Add([]byte("MSH|^~\\&|A\rPID|1\r\nOBX|1|TX|||a\\F\\b\n\nNTE|1\r"))
	f.Add([]byte("\uFEFFMSH|^~\\&|A\rORC|1\rOBR|1\rOBX|1\r"))
	fuzzSplit(f, FormHL7)
}

// FuzzCheckSectionText: text CheckSectionText accepts for a section of a
// fixture, put back with the other sections as they were, never changes the
// document's structure: an HL7 message splits into the same skeleton; a
// C-CDA either splits into the same skeleton (its markers' ids aside: a
// saved section's code may name another data type) and the same number of
// sections, or is refused for its section's code or nesting, which the
// saving server cannot check without the operator's table.
func FuzzCheckSectionText(f *testing.F) {
	type fixture struct {
		src []byte
		r   *Result
	}
	var fixtures []fixture
	for _, name := range []string{"synthetic-ccd.xml", "synthetic-oru.hl7"} {
		b, err := os.ReadFile("../../internal/operator/seeddata/" + name)
		if err != nil {
			f.Fatal(err)
		}
		r, err := Split(b, DefaultTable())
		if err != nil {
			f.Fatal(err)
		}
		fixtures = append(fixtures, fixture{b, r})
	}
	var all []struct {
		fx int
		s  Section
	}
	for i, fx := range fixtures {
		for _, s := range fx.r.Sections {
			all = append(all, struct {
				fx int
				s  Section
			}{i, s})
			f.Add(uint8(len(all)-1), s.Text)
		}
	}
	f.Add(uint8(1), []byte(`<section><code code="8716-3" codeSystem="2.16.840.1.113883.6.1"/><section><code code="8716-3"/></section></section>`))
	f.Add(uint8(len(all)-1), []byte("OBX|9|TX|||a\\X0D\\b"))
	generic := func(sk []byte) []byte {
		ps, err := parseSkeleton(sk)
		if err != nil {
			f.Fatal(err)
		}
		var out []byte
		for _, p := range ps {
			if p.id != "" {
				out = append(out, Marker("_")...)
			}
			out = append(out, p.lit...)
		}
		return out
	}
	f.Fuzz(func(t *testing.T, pick uint8, text []byte) {
		if !utf8.Valid(text) {
			return // the tool refuses it as NOT_TEXT before this check
		}
		c := all[int(pick)%len(all)]
		fx := fixtures[c.fx]
		if CheckSectionText(fx.r.Skeleton, c.s.ID, text) != nil {
			return
		}
		texts := fx.r.Texts()
		texts[c.s.ID] = text
		doc, err := Reassemble(fx.r.Skeleton, texts)
		if err != nil {
			t.Fatalf("reassemble: %v", err)
		}
		r, err := Split(doc, DefaultTable())
		if err != nil {
			if fx.r.Form == FormHL7 {
				t.Fatalf("accepted HL7 text %q for %s, and the message no longer splits: %v", text, c.s.ID, err)
			}
			if errors.Is(err, ErrUnknownSection) || errors.Is(err, ErrSectionNoCode) || errors.Is(err, ErrNested) || errors.Is(err, ErrMalformed) {
				return
			}
			t.Fatalf("accepted C-CDA text %q for %s, and the document is refused: %v", text, c.s.ID, err)
		}
		if len(r.Sections) != len(fx.r.Sections) || !bytes.Equal(generic(r.Skeleton), generic(fx.r.Skeleton)) {
			t.Fatalf("accepted text %q for %s changes the skeleton:\n%s\nwas\n%s", text, c.s.ID, r.Skeleton, fx.r.Skeleton)
		}
	})
}
