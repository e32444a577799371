package compound

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// Data types of the default table.
const (
	Demographics = "demographics"
	Allergies    = "allergies"
	Medications  = "medications"
	Problems     = "problems"
	Results      = "results"
	Vitals       = "vitals"
)

// Table decides what each C-CDA section code and HL7 v2 segment id
// becomes: a data type (protected under that type's key), or, for HL7
// segments only, the clear. Anything the table does not name is refused.
type Table struct {
	// Sections maps a C-CDA section's LOINC code to a data type.
	Sections map[string]string
	// Segments maps an HL7 v2 segment id to a data type.
	Segments map[string]string
	// Clear names the HL7 v2 segments that stay in the skeleton.
	Clear map[string]bool
}

// DefaultTable is the table the guide defines: recordTarget is
// demographics (always, not in the table); five section codes; PID, PD1
// and NK1 demographics, OBX and NTE results; MSH, SFT, ORC and OBR clear.
func DefaultTable() *Table {
	return &Table{
		Sections: map[string]string{
			"48765-2": Allergies,
			"10160-0": Medications,
			"11450-4": Problems,
			"30954-2": Results,
			"8716-3":  Vitals,
		},
		Segments: map[string]string{
			"PID": Demographics, "PD1": Demographics, "NK1": Demographics,
			"OBX": Results, "NTE": Results,
		},
		Clear: map[string]bool{"MSH": true, "SFT": true, "ORC": true, "OBR": true},
	}
}

var (
	loincCode = regexp.MustCompile(`^[0-9]{1,7}-[0-9]$`)
	segmentID = regexp.MustCompile(`^[A-Z][A-Z0-9]{2}$`)
)

// entryForm is how the operator writes one kind of table entry,
// KEY=dataType: what AddSection and AddSegment check first, and how their
// errors name the entry.
type entryForm struct {
	what  string         // the entry, as errors name it
	form  string         // how to write it
	key   *regexp.Regexp // what its key must match
	keyIs string         // what its key must be, for the error
}

var (
	sectionForm = entryForm{"C-CDA section", "CODE=dataType, e.g. 29762-2=social-history",
		loincCode, "a LOINC code (digits, '-', check digit)"}
	segmentForm = entryForm{"HL7 segment", "ID=dataType or ID=clear, e.g. SPM=results",
		segmentID, "a segment id (three capitals or digits, a capital first)"}
)

// cut splits spec into its key and its data type (not yet checked).
func (f entryForm) cut(spec string) (key, dt string, err error) {
	key, dt, ok := strings.Cut(spec, "=")
	if !ok {
		return "", "", f.errorf(spec, "write %s", f.form)
	}
	if !f.key.MatchString(key) {
		return "", "", f.errorf(spec, "%q is not %s", key, f.keyIs)
	}
	return key, dt, nil
}

// errorf refuses spec, named as the operator wrote it.
func (f entryForm) errorf(spec, format string, args ...any) error {
	return fmt.Errorf(f.what+" %q: "+format, append([]any{spec}, args...)...)
}

// ClearWord is the value of an HL7 v2 extension that keeps a segment in
// the clear.
const ClearWord = "clear"

// AddSection maps one more C-CDA section code to a data type. A code the
// table already maps is refused: the operator extends the table, never
// rewrites it.
func (t *Table) AddSection(spec string) error {
	code, dt, err := sectionForm.cut(spec)
	if err != nil {
		return err
	}
	if err := checkDataType(dt); err != nil {
		return sectionForm.errorf(spec, "%w", err)
	}
	if old, dup := t.Sections[code]; dup {
		return sectionForm.errorf(spec, "%s is already %s", code, old)
	}
	if t.Sections == nil {
		t.Sections = make(map[string]string)
	}
	t.Sections[code] = dt
	return nil
}

// AddSegment maps one more HL7 v2 segment id to a data type, or, with
// the data type "clear", keeps it in the clear. MSH cannot be protected
// and ZPF (the mixed view's placeholder) cannot be named; a segment the
// table already names is refused.
func (t *Table) AddSegment(spec string) error {
	id, dt, err := segmentForm.cut(spec)
	if err != nil {
		return err
	}
	if id == "ZPF" {
		return segmentForm.errorf(spec, "ZPF is the placeholder this program writes for a withheld segment")
	}
	if old, dup := t.Segments[id]; dup {
		return segmentForm.errorf(spec, "%s is already %s", id, old)
	}
	if t.Clear[id] {
		return segmentForm.errorf(spec, "%s already stays in the clear", id)
	}
	if dt == ClearWord {
		if t.Clear == nil {
			t.Clear = make(map[string]bool)
		}
		t.Clear[id] = true
		return nil
	}
	if err := checkDataType(dt); err != nil {
		return segmentForm.errorf(spec, "%w", err)
	}
	if t.Segments == nil {
		t.Segments = make(map[string]string)
	}
	t.Segments[id] = dt
	return nil
}

// DataTypes lists every data type the table can produce, sorted.
func (t *Table) DataTypes() []string {
	set := map[string]bool{Demographics: true}
	for _, dt := range t.Sections {
		set[dt] = true
	}
	for _, dt := range t.Segments {
		set[dt] = true
	}
	return slices.Sorted(maps.Keys(set))
}

// checkDataType accepts what the manifest accepts as a data type (it
// becomes a key of compoundKeys and part of file names), lower case.
func checkDataType(dt string) error {
	if dt == ClearWord {
		return fmt.Errorf("%q is not a data type; only an HL7 segment can stay in the clear", dt)
	}
	// No '.': a second section of a type is "<type>.2".
	if !validID(dt) || strings.ToLower(dt) != dt || len(dt) > 64 || strings.Contains(dt, ".") {
		return fmt.Errorf("data type %q: use 1-64 lower-case letters, digits, '-' or '_', a letter or digit first", dt)
	}
	return nil
}
