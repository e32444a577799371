package compound

import (
	"bytes"
	"crypto/sha256"
	"encoding/xml"
	"fmt"
	"io"
	"testing"
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
