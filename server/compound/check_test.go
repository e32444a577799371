package compound

import (
	"errors"
	"strings"
	"testing"
)

// TestCheckSectionTextAcceptsOriginals: every section's own text, saved
// back unchanged or edited within its element, is accepted.
func TestCheckSectionTextAcceptsOriginals(t *testing.T) {
	for _, name := range []string{"synthetic-ccd.xml", "synthetic-oru.hl7"} {
		src := readFixture(t, name)
		r, err := Split(src, DefaultTable())
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range r.Sections {
			if err := CheckSectionText(r.Skeleton, s.ID, s.Text); err != nil {
				t.Errorf("%s %s: its own text refused: %v", name, s.ID, err)
			}
		}
	}
	// A prefixed document: the prefix is resolved in the skeleton's context.
	src := []byte(`<?xml version="1.0"?><cda:ClinicalDocument xmlns:cda="urn:hl7-org:v3"><cda:component><cda:structuredBody><cda:component>` +
		`<cda:section><cda:code code="48765-2" codeSystem="2.16.840.1.113883.6.1"/><cda:text>none</cda:text></cda:section>` +
		`</cda:component></cda:structuredBody></cda:component></cda:ClinicalDocument>`)
	r, err := Split(src, DefaultTable())
	if err != nil {
		t.Fatal(err)
	}
	edited := `<cda:section><cda:code code="48765-2" codeSystem="2.16.840.1.113883.6.1"/><cda:text>penicillin &amp; latex</cda:text></cda:section>`
	if err := CheckSectionText(r.Skeleton, "allergies", []byte(edited)); err != nil {
		t.Errorf("prefixed edit refused: %v", err)
	}
	// Unprefixed in a document whose default namespace is not HL7's: not
	// a section where it stands.
	if err := CheckSectionText(r.Skeleton, "allergies", []byte(`<section><code code="48765-2"/></section>`)); !errors.Is(err, ErrSectionText) {
		t.Errorf("an element outside urn:hl7-org:v3 accepted: %v", err)
	}
}

func TestCheckSectionTextRefuses(t *testing.T) {
	ccd := readFixture(t, "synthetic-ccd.xml")
	rc, err := Split(ccd, DefaultTable())
	if err != nil {
		t.Fatal(err)
	}
	oru := readFixture(t, "synthetic-oru.hl7")
	rh, err := Split(oru, DefaultTable())
	if err != nil {
		t.Fatal(err)
	}
	const sec = `<section><code code="48765-2" codeSystem="2.16.840.1.113883.6.1"/><text>x</text></section>`
	cases := []struct {
		name, id, text string
		skeleton       []byte
		want           error
	}{
		{"hl7 CR adds a segment", "OBX.1", "OBX|1|NM|x||1\rPID|1||EVIL", rh.Skeleton, ErrSectionText},
		{"hl7 LF adds a segment", "OBX.1", "OBX|1|NM|x||1\nZZZ|1", rh.Skeleton, ErrSectionText},
		{"hl7 CRLF adds a second PID", "PID.1", "PID|1||A\r\nPID|2||B", rh.Skeleton, ErrSectionText},
		{"hl7 trailing terminator", "OBX.1", "OBX|1|NM|x||1\r", rh.Skeleton, ErrSectionText},
		{"hl7 another segment id", "OBX.1", "PID|1||OTHER", rh.Skeleton, ErrSectionText},
		{"hl7 id without separator", "OBX.1", "OBXX|1", rh.Skeleton, ErrSectionText},
		{"hl7 empty", "OBX.1", "", rh.Skeleton, ErrSectionText},
		{"hl7 marker", "OBX.1", "OBX|<?pdmcp-fragment PID.1?>", rh.Skeleton, ErrMarkerInSource},
		{"hl7 NUL", "OBX.1", "OBX|1\x00", rh.Skeleton, ErrNotText},
		{"ccda closes the section and opens another", "allergies", sec + `</component><component>` + sec, rc.Skeleton, ErrSectionText},
		{"ccda a second section beside it", "allergies", sec + sec, rc.Skeleton, ErrSectionText},
		{"ccda closes its section early", "allergies", `<section><text>x</text></section></component>`, rc.Skeleton, ErrSectionText},
		{"ccda opens without closing", "allergies", `<section><text>x</text>`, rc.Skeleton, ErrSectionText},
		{"ccda not a section", "allergies", `<text>x</text>`, rc.Skeleton, ErrSectionText},
		{"ccda text around it", "allergies", "note " + sec, rc.Skeleton, ErrSectionText},
		{"ccda trailing text", "allergies", sec + " note", rc.Skeleton, ErrSectionText},
		{"ccda trailing comment", "allergies", sec + "<!-- c -->", rc.Skeleton, ErrSectionText},
		{"ccda recordTarget in a section", "allergies", `<section><recordTarget/></section>`, rc.Skeleton, ErrSectionText},
		{"ccda a section where recordTarget was", "demographics", sec, rc.Skeleton, ErrSectionText},
		{"ccda doctype", "allergies", `<!DOCTYPE x [<!ENTITY e "y">]>` + sec, rc.Skeleton, ErrSectionText},
		{"ccda undefined entity", "allergies", `<section><text>&e;</text></section>`, rc.Skeleton, ErrSectionText},
		{"ccda marker", "allergies", `<section><?pdmcp-fragment results?></section>`, rc.Skeleton, ErrMarkerInSource},
		{"ccda empty", "allergies", "", rc.Skeleton, ErrSectionText},
		{"unknown section", "nope", sec, rc.Skeleton, ErrSectionText},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckSectionText(tc.skeleton, tc.id, []byte(tc.text))
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if strings.Contains(err.Error(), "EVIL") || strings.Contains(err.Error(), "OTHER") {
				t.Fatalf("the refusal echoes the text: %v", err)
			}
		})
	}
}
