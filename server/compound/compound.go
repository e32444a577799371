// Package compound splits a clinical source document into a plaintext
// skeleton and the byte spans that are protected under their data type's
// key, and puts a skeleton and its sections back together.
//
// It is pure: bytes in, a decision out, no files, keys or network. It reads
// two forms, a C-CDA (an XML document whose root element is
// ClinicalDocument in the urn:hl7-org:v3 namespace) and an HL7 v2 message
// (bytes that begin with an MSH segment). Every span it returns is an exact
// slice of the source, and [Split] proves that the skeleton with the spans
// put back is the source, byte for byte, before it returns. Whatever it
// cannot classify with certainty it refuses, as a [*RefusedError]; it never
// leaves a byte it does not understand in the clear by guessing.
//
// The skeleton holds one marker per section, a processing instruction
// "<?pdmcp-fragment ID?>", so a C-CDA skeleton stays well-formed XML. A
// source that already holds the marker's prefix is refused.
package compound

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"unicode/utf8"
)

// Form is the kind of source a document was split from.
type Form string

// The forms [Split] reads.
const (
	FormCCDA Form = "ccda"
	FormHL7  Form = "hl7v2"
)

// Reasons a source is refused; a [*RefusedError] wraps one of them.
var (
	ErrUnknownForm      = errors.New("neither a C-CDA (root element ClinicalDocument) nor an HL7 v2 message (begins with MSH)")
	ErrNotText          = errors.New("not UTF-8 text")
	ErrDeclaration      = errors.New("carries a <!DOCTYPE or <!ENTITY declaration")
	ErrMarkerInSource   = errors.New("already holds this program's fragment marker")
	ErrMalformed        = errors.New("malformed")
	ErrUnknownSection   = errors.New("a section whose code the table does not map to a data type")
	ErrSectionNoCode    = errors.New("a section with no code")
	ErrNested           = errors.New("a section nested inside a section of another data type")
	ErrNonXMLBody       = errors.New("a nonXMLBody, whose content cannot be split into sections")
	ErrUnknownSegment   = errors.New("a segment the table neither protects nor keeps in the clear")
	ErrNothingToProtect = errors.New("no section to protect")
	ErrReassembly       = errors.New("skeleton and sections do not reassemble to the source")
)

// RefusedError says why a source was refused and where.
type RefusedError struct {
	Form Form
	// Offset is the byte offset in the source the refusal is about, or -1.
	Offset int
	Err    error
	Detail string
}

func (e *RefusedError) Error() string {
	where := ""
	if e.Offset >= 0 {
		where = fmt.Sprintf(" at byte %d", e.Offset)
	}
	form := "source"
	switch e.Form {
	case FormCCDA:
		form = "C-CDA source"
	case FormHL7:
		form = "HL7 v2 source"
	}
	if e.Detail == "" {
		return fmt.Sprintf("%s refused%s: %v", form, where, e.Err)
	}
	return fmt.Sprintf("%s refused%s: %v: %s", form, where, e.Err, e.Detail)
}

func (e *RefusedError) Unwrap() error { return e.Err }

func refuse(form Form, off int, err error, format string, args ...any) error {
	return &RefusedError{Form: form, Offset: off, Err: err, Detail: fmt.Sprintf(format, args...)}
}

// Section is one protected span of a source.
type Section struct {
	// ID names the section to a model and in file names: a data type
	// ("allergies", "allergies.2") for a C-CDA, a segment id and its
	// occurrence ("OBX.2") for HL7 v2.
	ID string
	// Label is a short non-sensitive description: "Allergies (48765-2)",
	// "recordTarget", "OBX[2]".
	Label    string
	DataType string
	// TemplateRoot is a C-CDA section's first templateId/@root, kept
	// beside it so an operator can tell which template it follows.
	TemplateRoot string
	// Start and End are the span's byte offsets in the source; Text is
	// source[Start:End].
	Start, End int
	Text       []byte
}

// Result is a split source.
type Result struct {
	Form     Form
	Skeleton []byte
	Sections []Section
	// SHA256 is the source's.
	SHA256 [32]byte
}

// bom is the UTF-8 byte-order mark; it is allowed at the start of either
// form and stays in the skeleton.
var bom = []byte{0xEF, 0xBB, 0xBF}

const (
	markerOpen  = "<?pdmcp-fragment "
	markerClose = "?>"
)

// Marker is the skeleton's marker for the section with the given id.
func Marker(id string) []byte { return []byte(markerOpen + id + markerClose) }

// DetectForm tells which form src is: HL7 v2 if its first bytes (after a
// byte-order mark) are "MSH", else a C-CDA if it parses far enough to show
// a root element named ClinicalDocument. A CDA carried inside an HL7
// message is HL7: its form is decided by the first bytes alone.
func DetectForm(src []byte) (Form, error) {
	body := bytes.TrimPrefix(src, bom)
	if bytes.HasPrefix(body, []byte("MSH")) {
		return FormHL7, nil
	}
	if isCCDA(body) {
		return FormCCDA, nil
	}
	return "", &RefusedError{Offset: -1, Err: ErrUnknownForm}
}

// Split splits src by the table t. It refuses (a *RefusedError) any source
// it cannot split with certainty.
func Split(src []byte, t *Table) (*Result, error) {
	form, err := DetectForm(src)
	if err != nil {
		return nil, err
	}
	if !utf8.Valid(src) || bytes.IndexByte(src, 0) >= 0 {
		return nil, refuse(form, -1, ErrNotText, "a compound document is read back as text")
	}
	if i := indexFold(src, []byte(markerOpen)); i >= 0 {
		return nil, refuse(form, i, ErrMarkerInSource, "%q", markerOpen)
	}
	var spans []Section
	switch form {
	case FormHL7:
		spans, err = splitHL7(src, t)
	default:
		spans, err = splitCCDA(src, t)
	}
	if err != nil {
		return nil, err
	}
	if len(spans) == 0 {
		return nil, refuse(form, -1, ErrNothingToProtect, "a compound document needs at least one protected section")
	}
	res := &Result{Form: form, Sections: spans, SHA256: sha256.Sum256(src)}
	var sk bytes.Buffer
	last := 0
	for i := range res.Sections {
		s := &res.Sections[i]
		s.Text = src[s.Start:s.End]
		sk.Write(src[last:s.Start])
		sk.Write(Marker(s.ID))
		last = s.End
	}
	sk.Write(src[last:])
	res.Skeleton = sk.Bytes()
	// The proof the guide asks for, before any key is touched.
	back, err := Reassemble(res.Skeleton, res.Texts())
	if err != nil || sha256.Sum256(back) != res.SHA256 {
		return nil, refuse(form, -1, ErrReassembly, "%v", err)
	}
	return res, nil
}

// Texts maps each section's id to its bytes.
func (r *Result) Texts() map[string][]byte {
	m := make(map[string][]byte, len(r.Sections))
	for _, s := range r.Sections {
		m[s.ID] = s.Text
	}
	return m
}

// piece is a run of a skeleton: literal bytes, or a marker's id.
type piece struct {
	lit []byte
	id  string
}

// parseSkeleton splits a skeleton into literal runs and markers. Each id
// appears once; anything that starts like a marker but does not end like
// one is an error.
func parseSkeleton(sk []byte) ([]piece, error) {
	var out []piece
	seen := make(map[string]bool)
	for len(sk) > 0 {
		i := bytes.Index(sk, []byte(markerOpen))
		if i < 0 {
			out = append(out, piece{lit: sk})
			break
		}
		if i > 0 {
			out = append(out, piece{lit: sk[:i]})
		}
		rest := sk[i+len(markerOpen):]
		j := bytes.Index(rest, []byte(markerClose))
		if j <= 0 || !validID(string(rest[:j])) {
			return nil, fmt.Errorf("%w: a broken fragment marker", ErrMalformed)
		}
		id := string(rest[:j])
		if seen[id] {
			return nil, fmt.Errorf("%w: fragment %q marked twice", ErrMalformed, id)
		}
		seen[id] = true
		out = append(out, piece{id: id})
		sk = rest[j+len(markerClose):]
	}
	return out, nil
}

// MarkerIDs returns the ids the skeleton marks, in order.
func MarkerIDs(skeleton []byte) ([]string, error) {
	ps, err := parseSkeleton(skeleton)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, p := range ps {
		if p.id != "" {
			ids = append(ids, p.id)
		}
	}
	return ids, nil
}

// Reassemble puts every section back into the skeleton. Every marked id
// must have a text and every text a marker. Inserted text is never scanned
// for markers.
func Reassemble(skeleton []byte, texts map[string][]byte) ([]byte, error) {
	used := 0
	out, err := Render(skeleton, func(id string) ([]byte, error) {
		t, ok := texts[id]
		if !ok {
			return nil, fmt.Errorf("%w: no text for fragment %q", ErrMalformed, id)
		}
		used++
		return t, nil
	})
	if err != nil {
		return nil, err
	}
	if used != len(texts) {
		return nil, fmt.Errorf("%w: %d texts for %d markers", ErrMalformed, len(texts), used)
	}
	return out, nil
}

// Render replaces each marker of the skeleton, in order, by what fill
// returns for its id: a section's text, or a placeholder.
func Render(skeleton []byte, fill func(id string) ([]byte, error)) ([]byte, error) {
	ps, err := parseSkeleton(skeleton)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	for _, p := range ps {
		if p.id == "" {
			out.Write(p.lit)
			continue
		}
		b, err := fill(p.id)
		if err != nil {
			return nil, err
		}
		out.Write(b)
	}
	return out.Bytes(), nil
}

// Placeholder is what the mixed view shows in place of a section the
// reader may not open: an XML comment in a C-CDA, a ZPF segment in HL7 v2.
// It names the section, its data type, and who refused it with which code;
// never anything of the section's content. The form and, for HL7 v2, the
// separators come from the document's skeleton: the segment is written with
// the field separator MSH-1 declares, and a byte of a value that is one of
// the message's delimiters (MSH-1, or MSH-2's component, repetition, escape
// and subcomponent characters) is written as its escape sequence, so the
// segment has exactly four fields of one component each under the
// message's own rules.
func Placeholder(skeleton []byte, id, dataType, layer, code string) []byte {
	clean := func(s string) string {
		// Ids and codes are ASCII tokens; keep them from closing a
		// comment or splitting a segment whatever they hold.
		b := []byte(s)
		for i, c := range b {
			ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.'
			if !ok {
				b[i] = '_'
			}
		}
		return string(b)
	}
	if FormOfSkeleton(skeleton) == FormHL7 {
		d := hl7DelimitersOf(skeleton)
		out := []byte("ZPF")
		for _, v := range []string{id, dataType, layer, code} {
			out = append(out, d.field)
			out = d.escape(out, clean(v))
		}
		return out
	}
	return fmt.Appendf(nil, "<!-- pdmcp: fragment %s (%s) withheld: %s %s -->", clean(id), clean(dataType), clean(layer), clean(code))
}

// FormOfSkeleton tells a skeleton's form the way [DetectForm] tells a
// source's.
func FormOfSkeleton(skeleton []byte) Form {
	if bytes.HasPrefix(bytes.TrimPrefix(skeleton, bom), []byte("MSH")) {
		return FormHL7
	}
	return FormCCDA
}

func validID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || (c != '-' && c != '_' && c != '.')) {
			return false
		}
	}
	return true
}

// indexFold is bytes.Index ignoring ASCII case.
func indexFold(s, sep []byte) int {
	n := len(sep)
	for i := 0; i+n <= len(s); i++ {
		if bytes.EqualFold(s[i:i+n], sep) {
			return i
		}
	}
	return -1
}

// DataTypesUsed lists the distinct data types of the sections, sorted.
func (r *Result) DataTypesUsed() []string {
	set := map[string]bool{}
	for _, s := range r.Sections {
		set[s.DataType] = true
	}
	out := make([]string, 0, len(set))
	for dt := range set {
		out = append(out, dt)
	}
	slices.Sort(out)
	return out
}
