package compound

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"os"
	"strings"
	"testing"
)

func readFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("../../internal/operator/seeddata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func ids(r *Result) string {
	var s []string
	for _, sec := range r.Sections {
		s = append(s, sec.ID+"="+sec.DataType)
	}
	return strings.Join(s, " ")
}

// checkSplit asserts the invariants every accepted split must hold.
func checkSplit(t *testing.T, src []byte, r *Result) {
	t.Helper()
	back, err := Reassemble(r.Skeleton, r.Texts())
	if err != nil {
		t.Fatalf("reassemble: %v", err)
	}
	if !bytes.Equal(back, src) || sha256.Sum256(back) != r.SHA256 {
		t.Fatalf("reassembly differs from the source")
	}
	last := 0
	for _, s := range r.Sections {
		if s.Start < last || s.End < s.Start || s.End > len(src) {
			t.Fatalf("span %s [%d,%d) overlaps or leaves the source", s.ID, s.Start, s.End)
		}
		if !bytes.Equal(s.Text, src[s.Start:s.End]) {
			t.Fatalf("section %s is not its span", s.ID)
		}
		last = s.End
	}
	if err := checkNoProtectedLeft(r.Form, r.Skeleton, DefaultTable()); err != nil {
		t.Fatal(err)
	}
}

func TestSplitFixtures(t *testing.T) {
	ccd := readFixture(t, "synthetic-ccd.xml")
	r, err := Split(ccd, DefaultTable())
	if err != nil {
		t.Fatal(err)
	}
	checkSplit(t, ccd, r)
	if r.Form != FormCCDA {
		t.Fatalf("form %s", r.Form)
	}
	want := "demographics=demographics allergies=allergies medications=medications problems=problems results=results vitals=vitals"
	if got := ids(r); got != want {
		t.Fatalf("sections %s, want %s", got, want)
	}
	if r.Sections[1].TemplateRoot != "2.16.840.1.113883.10.20.22.2.6.1" || r.Sections[1].Label != "Allergies section (48765-2)" {
		t.Fatalf("allergies %+v", r.Sections[1])
	}
	for _, secret := range []string{"Penicillin", "Zoë", "Lisinopril", "Hemoglobin", "128/82", "hypertension"} {
		if bytes.Contains(r.Skeleton, []byte(secret)) {
			t.Fatalf("skeleton holds %q", secret)
		}
	}
	if !bytes.Contains(r.Skeleton, []byte("Synthetic Health Clinic")) {
		t.Fatal("the header's custodian should stay in the clear")
	}

	oru := readFixture(t, "synthetic-oru.hl7")
	r, err = Split(oru, DefaultTable())
	if err != nil {
		t.Fatal(err)
	}
	checkSplit(t, oru, r)
	want = "PID.1=demographics NK1.1=demographics OBX.1=results OBX.2=results OBX.3=results NTE.1=results OBX.4=results NTE.2=results"
	if got := ids(r); got != want {
		t.Fatalf("sections %s, want %s", got, want)
	}
	if r.Sections[2].Label != "OBX[1]" {
		t.Fatalf("label %q", r.Sections[2].Label)
	}
	// Escapes are never decoded: the NTE span holds \X0D\ as written.
	if !bytes.Contains(r.Sections[5].Text, []byte(`\X0D\`)) {
		t.Fatalf("NTE.1 %q", r.Sections[5].Text)
	}
	if !bytes.Contains(r.Skeleton, []byte("OBR|1|ORD-0001")) || bytes.Contains(r.Skeleton, []byte("ÅNGSTRÖM")) {
		t.Fatalf("skeleton %q", r.Skeleton)
	}
}

const ccdHead = `<ClinicalDocument xmlns="urn:hl7-org:v3">`

func sec(code, body string) string {
	return `<component><section><templateId root="1.2.3"/><code code="` + code + `" codeSystem="2.16.840.1.113883.6.1"/>` + body + `</section></component>`
}

func TestSplitCases(t *testing.T) {
	ext := DefaultTable()
	if err := ext.AddSection("29762-2=social-history"); err != nil {
		t.Fatal(err)
	}
	if err := ext.AddSegment("SPM=results"); err != nil {
		t.Fatal(err)
	}
	if err := ext.AddSegment("EVN=clear"); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		src   string
		table *Table
		want  string // sections, when accepted
		err   error  // the reason, when refused
	}{
		// Form.
		{name: "neither form", src: "hello", err: ErrUnknownForm},
		{name: "other root", src: `<Bundle xmlns="urn:hl7-org:v3"/>`, err: ErrUnknownForm},
		{name: "ClinicalDocument outside the v3 namespace", src: `<ClinicalDocument xmlns="urn:other">` + sec("30954-2", "") + `</ClinicalDocument>`, err: ErrUnknownForm},
		{name: "prefixed root and sections", src: `<cda:ClinicalDocument xmlns:cda="urn:hl7-org:v3"><cda:component><cda:section><cda:code code="30954-2"/>x</cda:section></cda:component></cda:ClinicalDocument>`, want: "results=results"},
		{name: "a CDA inside an OBX is OBX data", src: "MSH|^~\\&|A\rOBX|1|ED|||" + ccdHead + sec("99999-9", "") + "</ClinicalDocument>\r", want: "OBX.1=results"},
		{name: "byte-order mark before XML", src: "\uFEFF" + ccdHead + sec("30954-2", "") + "</ClinicalDocument>", want: "results=results"},
		{name: "byte-order mark before MSH", src: "\uFEFFMSH|^~\\&|A\rPID|1\r", want: "PID.1=demographics"},
		// C-CDA sections.
		{name: "unknown section code", src: ccdHead + sec("29762-2", "") + "</ClinicalDocument>", err: ErrUnknownSection},
		{name: "unknown section code, extended table", table: ext, src: ccdHead + sec("29762-2", "") + "</ClinicalDocument>", want: "social-history=social-history"},
		{name: "section with no code", src: ccdHead + `<component><section><title>x</title></section></component></ClinicalDocument>`, err: ErrSectionNoCode},
		{name: "code with nullFlavor only", src: ccdHead + `<component><section><code nullFlavor="NI"/></section></component></ClinicalDocument>`, err: ErrSectionNoCode},
		{name: "code in another code system", src: ccdHead + `<component><section><code code="30954-2" codeSystem="1.2.3"/></section></component></ClinicalDocument>`, err: ErrUnknownSection},
		{name: "two code children", src: ccdHead + `<component><section><code code="30954-2"/><code code="48765-2"/></section></component></ClinicalDocument>`, err: ErrMalformed},
		{name: "code of a grandchild is not the section's", src: ccdHead + `<component><section><entry><code code="30954-2"/></entry></section></component></ClinicalDocument>`, err: ErrSectionNoCode},
		{name: "attributes in any order and either quote", src: ccdHead + `<component><section><code codeSystem='2.16.840.1.113883.6.1' displayName="R" code='30954-2'/></section></component></ClinicalDocument>`, want: "results=results"},
		{name: "nested, same type", src: ccdHead + `<component><section><code code="30954-2"/><component>` + `<section><code code="30954-2"/></section></component></section></component></ClinicalDocument>`, want: "results=results"},
		{name: "nested, other type", src: ccdHead + `<component><section><code code="30954-2"/><component>` + `<section><code code="48765-2"/></section></component></section></component></ClinicalDocument>`, err: ErrNested},
		{name: "nested, unlisted code", src: ccdHead + `<component><section><code code="30954-2"/><component>` + `<section><code code="29762-2"/></section></component></section></component></ClinicalDocument>`, err: ErrUnknownSection},
		{name: "nested, unlisted code, extended to another type", table: ext, src: ccdHead + `<component><section><code code="30954-2"/><component>` + `<section><code code="29762-2"/></section></component></section></component></ClinicalDocument>`, err: ErrNested},
		{name: "nested inside recordTarget", src: ccdHead + `<recordTarget><section><code code="30954-2"/></section></recordTarget></ClinicalDocument>`, err: ErrNested},
		{name: "recordTarget outside the header", src: ccdHead + `<component><section><code code="30954-2"/><recordTarget/></section></component></ClinicalDocument>`, err: ErrMalformed},
		{name: "two sections of one type", src: ccdHead + sec("30954-2", "a") + sec("30954-2", "b") + "</ClinicalDocument>", want: "results=results results.2=results"},
		{name: "section in a comment is not a section", src: ccdHead + `<!-- <section><code code="29762-2"/></section> -->` + sec("30954-2", "") + "</ClinicalDocument>", want: "results=results"},
		{name: "CDATA inside a section", src: ccdHead + sec("30954-2", `<text><![CDATA[<section>not one</section> & <]]></text>`) + "</ClinicalDocument>", want: "results=results"},
		{name: "CRLF and non-ASCII", src: "<?xml version=\"1.0\"?>\r\n" + ccdHead + "\r\n" + sec("30954-2", "<text>Zoë Ångström 六</text>") + "\r\n</ClinicalDocument>\r\n", want: "results=results"},
		{name: "section in a foreign namespace", src: ccdHead + `<x:section xmlns:x="urn:other"><code code="30954-2"/></x:section>` + sec("30954-2", "") + "</ClinicalDocument>", err: ErrMalformed},
		{name: "nonXMLBody", src: ccdHead + `<recordTarget/><component><nonXMLBody><text>scan</text></nonXMLBody></component></ClinicalDocument>`, err: ErrNonXMLBody},
		{name: "nothing to protect", src: ccdHead + `<component><structuredBody/></component></ClinicalDocument>`, err: ErrNothingToProtect},
		{name: "DOCTYPE", src: `<!DOCTYPE ClinicalDocument>` + ccdHead + sec("30954-2", "") + "</ClinicalDocument>", err: ErrDeclaration},
		{name: "ENTITY in a comment", src: ccdHead + `<!-- <!entity x "y"> -->` + sec("30954-2", "") + "</ClinicalDocument>", err: ErrDeclaration},
		{name: "undefined entity", src: ccdHead + sec("30954-2", "&pdmcp;") + "</ClinicalDocument>", err: ErrMalformed},
		{name: "not well-formed", src: ccdHead + sec("30954-2", "<text>") + "</ClinicalDocument>", err: ErrMalformed},
		{name: "a second root", src: ccdHead + sec("30954-2", "") + "</ClinicalDocument>" + ccdHead + "</ClinicalDocument>", err: ErrMalformed},
		{name: "Latin-1 declared", src: `<?xml version="1.0" encoding="ISO-8859-1"?>` + ccdHead + sec("30954-2", "") + "</ClinicalDocument>", err: ErrMalformed},
		{name: "not UTF-8", src: ccdHead + sec("30954-2", "\xff") + "</ClinicalDocument>", err: ErrNotText},
		{name: "marker already present", src: ccdHead + sec("30954-2", "<?pdmcp-fragment results?>") + "</ClinicalDocument>", err: ErrMarkerInSource},
		// HL7 v2.
		{name: "CR separators", src: "MSH|^~\\&|A\rPID|1\rOBR|1\rOBX|1\rOBX|2\rNTE|1\r", want: "PID.1=demographics OBX.1=results OBX.2=results NTE.1=results"},
		{name: "LF and CRLF separators, blank lines", src: "MSH|^~\\&|A\r\nPID|1\n\nOBX|1\r\n\r\n", want: "PID.1=demographics OBX.1=results"},
		{name: "occurrence is order, not set id", src: "MSH|^~\\&|A\rOBX|7\rOBX|3\r", want: "OBX.1=results OBX.2=results"},
		{name: "unknown segment", src: "MSH|^~\\&|A\rEVN|A01\rPID|1\r", err: ErrUnknownSegment},
		{name: "extended segments", table: ext, src: "MSH|^~\\&|A\rEVN|A01\rPID|1\rSPM|1\r", want: "PID.1=demographics SPM.1=results"},
		{name: "Z segment", src: "MSH|^~\\&|A\rPID|1\rZPF|x\r", err: ErrUnknownSegment},
		{name: "lower-case segment id", src: "MSH|^~\\&|A\rpid|1\r", err: ErrMalformed},
		{name: "id without field separator", src: "MSH|^~\\&|A\rPIDX|1\r", err: ErrMalformed},
		{name: "id alone is a segment", src: "MSH|^~\\&|A\rPID\r", want: "PID.1=demographics"},
		{name: "other field separator", src: "MSH#^~\\&#A\rPID#1\rOBX|1\r", err: ErrMalformed},
		{name: "second MSH", src: "MSH|^~\\&|A\rPID|1\rMSH|^~\\&|B\r", err: ErrMalformed},
		{name: "only clear segments", src: "MSH|^~\\&|A\rORC|1\rOBR|1\r", err: ErrNothingToProtect},
		{name: "escaped separator is data", src: "MSH|^~\\&|A\rOBX|1|TX|||a\\F\\b\\X0D\\c\r", want: "OBX.1=results"},
		{name: "short MSH", src: "MSH", err: ErrMalformed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tbl := c.table
			if tbl == nil {
				tbl = DefaultTable()
			}
			r, err := Split([]byte(c.src), tbl)
			if c.err != nil {
				if !errors.Is(err, c.err) {
					t.Fatalf("err %v, want %v", err, c.err)
				}
				var re *RefusedError
				if !errors.As(err, &re) || re.Error() == "" {
					t.Fatalf("not a RefusedError: %T", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := ids(r); got != c.want {
				t.Fatalf("sections %q, want %q", got, c.want)
			}
			back, _ := Reassemble(r.Skeleton, r.Texts())
			if !bytes.Equal(back, []byte(c.src)) {
				t.Fatal("reassembly differs")
			}
			if err := checkNoProtectedLeft(r.Form, r.Skeleton, tbl); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestSpanShape(t *testing.T) {
	// A C-CDA span is the section element; its component stays. An HL7
	// span is the segment; its terminator stays.
	r, err := Split([]byte(ccdHead+sec("30954-2", "x")+"</ClinicalDocument>"), DefaultTable())
	if err != nil {
		t.Fatal(err)
	}
	if s := string(r.Sections[0].Text); !strings.HasPrefix(s, "<section>") || !strings.HasSuffix(s, "</section>") {
		t.Fatalf("span %q", s)
	}
	if !bytes.Contains(r.Skeleton, []byte("<component><?pdmcp-fragment results?></component>")) {
		t.Fatalf("skeleton %q", r.Skeleton)
	}
	r, err = Split([]byte("MSH|^~\\&|A\r\nPID|1\r\n"), DefaultTable())
	if err != nil {
		t.Fatal(err)
	}
	if string(r.Sections[0].Text) != "PID|1" || string(r.Skeleton) != "MSH|^~\\&|A\r\n<?pdmcp-fragment PID.1?>\r\n" {
		t.Fatalf("span %q skeleton %q", r.Sections[0].Text, r.Skeleton)
	}
}

func TestRenderAndPlaceholders(t *testing.T) {
	src := readFixture(t, "synthetic-oru.hl7")
	r, err := Split(src, DefaultTable())
	if err != nil {
		t.Fatal(err)
	}
	texts := r.Texts()
	out, err := Render(r.Skeleton, func(id string) ([]byte, error) {
		if strings.HasPrefix(id, "OBX") || strings.HasPrefix(id, "NTE") {
			return texts[id], nil
		}
		return Placeholder(r.Skeleton, id, "demographics", "keyserver", "ACL_DENIED"), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(out, []byte("\rZPF|PID.1|demographics|keyserver|ACL_DENIED\r")) || bytes.Contains(out, []byte("ÅNGSTRÖM")) {
		t.Fatalf("mixed view %q", out)
	}
	if !bytes.Contains(out, []byte("OBX|4|NM|4548-4")) {
		t.Fatal("results missing")
	}
	// A placeholder cannot close its comment or split its segment.
	if p := Placeholder([]byte("<ClinicalDocument/>"), "a--b", "x-->", "l", "c"); bytes.Count(p, []byte("--")) != 2 {
		t.Fatalf("placeholder %q", p)
	}
	if p := Placeholder([]byte("MSH|^~\\&|A\r"), "a\rb", "x|y", "l", "c"); bytes.ContainsAny(p, "\r\n") || bytes.Count(p, []byte("|")) != 4 {
		t.Fatalf("placeholder %q", p)
	}
	// Saved text holding a marker is never expanded again.
	out, err = Reassemble([]byte("a<?pdmcp-fragment x?>b"), map[string][]byte{"x": []byte("<?pdmcp-fragment y?>")})
	if err != nil || string(out) != "a<?pdmcp-fragment y?>b" {
		t.Fatalf("%q %v", out, err)
	}
	for _, bad := range []string{"<?pdmcp-fragment x", "<?pdmcp-fragment ?>", "<?pdmcp-fragment x?><?pdmcp-fragment x?>"} {
		if _, err := MarkerIDs([]byte(bad)); !errors.Is(err, ErrMalformed) {
			t.Fatalf("%q: %v", bad, err)
		}
	}
	if _, err := Reassemble([]byte("<?pdmcp-fragment x?>"), map[string][]byte{"x": nil, "y": nil}); err == nil {
		t.Fatal("an unmarked text was accepted")
	}
}

func TestTableExtension(t *testing.T) {
	for _, c := range []struct {
		section bool
		spec    string
		ok      bool
	}{
		{true, "29762-2=social-history", true},
		{true, "30954-2=other", false}, // already mapped
		{true, "29762-2", false},
		{true, "abc=x", false},
		{true, "29762-2=clear", false}, // C-CDA sections cannot be clear
		{true, "29762-2=Social", false},
		{true, "29762-2=a.b", false},
		{false, "SPM=results", true},
		{false, "EVN=clear", true},
		{false, "PID=clear", false}, // already protected
		{false, "MSH=results", false},
		{false, "ZPF=results", false},
		{false, "spm=results", false},
		{false, "SPM", false},
	} {
		tbl := DefaultTable()
		var err error
		if c.section {
			err = tbl.AddSection(c.spec)
		} else {
			err = tbl.AddSegment(c.spec)
		}
		if (err == nil) != c.ok {
			t.Errorf("%q: %v", c.spec, err)
		}
	}
}

// TestPlaceholderSpeaksTheMessageSeparators: in a message whose MSH
// declares other delimiters, the ZPF placeholder is written with them, so
// the mixed view is a well-formed message by the splitter's own rules, and
// a value holding one of them is escaped, never split.
func TestPlaceholderSpeaksTheMessageSeparators(t *testing.T) {
	for _, c := range []struct {
		name, src, want string
	}{
		{"hash field separator", "MSH#^~\\&#A#B\rPID#1#DOE^JANE\rOBX#1#NM#2093-3\r", "ZPF#PID.1#demographics#keyserver#ACL_DENIED"},
		// '.' as the component separator: the id's dot is escaped.
		{"dot component separator", "MSH|.~\\&|A\rPID|1|DOE.JANE\rOBX|1|NM\r", "ZPF|PID\\S\\1|demographics|keyserver|ACL_DENIED"},
		// '_' as the field separator and '!' as the escape character.
		{"underscore field separator", "MSH_^~!&_A\rPID_1\rOBX_1_NM\r", "ZPF_PID.1_demographics_keyserver_ACL!F!DENIED"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := Split([]byte(c.src), DefaultTable())
			if err != nil {
				t.Fatal(err)
			}
			texts := r.Texts()
			out, err := Render(r.Skeleton, func(id string) ([]byte, error) {
				if strings.HasPrefix(id, "PID") {
					return Placeholder(r.Skeleton, id, "demographics", "keyserver", "ACL_DENIED"), nil
				}
				return texts[id], nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(out, []byte("\r"+c.want+"\r")) {
				t.Fatalf("mixed view %q, want the placeholder %q", out, c.want)
			}
			// The splitter's own rules accept the mixed view once ZPF is
			// a segment it knows: every segment's id is followed by the
			// message's field separator.
			tbl := DefaultTable()
			tbl.Clear["ZPF"] = true
			if _, err := Split(out, tbl); err != nil {
				t.Fatalf("the mixed view %q is not a well-formed message: %v", out, err)
			}
			d := hl7DelimitersOf(out)
			seg := []byte(c.want)
			fields := bytes.Split(seg, []byte{d.field})
			if len(fields) != 5 {
				t.Fatalf("placeholder %q has %d fields, want 5 (ZPF and four)", seg, len(fields))
			}
			for _, f := range fields {
				if bytes.IndexByte(f, d.component) >= 0 || bytes.IndexByte(f, d.repetition) >= 0 || bytes.IndexByte(f, d.subcomponent) >= 0 {
					t.Fatalf("placeholder field %q holds a delimiter", f)
				}
			}
		})
	}
}
