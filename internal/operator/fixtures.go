package operator

import "embed"

//go:embed seeddata/synthetic-ccd.xml seeddata/synthetic-oru.hl7
var compoundFiles embed.FS

// CompoundFixture is one synthetic compound source shipped with pdmcp, for
// pdmcp dev and tests: every person, id and value in it is invented.
type CompoundFixture struct {
	DocumentID string
	Label      string
	FileName   string
	Source     []byte
}

// CompoundFixtures returns the synthetic C-CDA (recordTarget and all five
// section types) and the synthetic HL7 v2 ORU (PID, NK1, ORC, OBR, four OBX
// and two NTE).
func CompoundFixtures() []CompoundFixture {
	out := []CompoundFixture{
		{DocumentID: "ccd-0001", Label: "Continuity of care document (synthetic)", FileName: "synthetic-ccd.xml"},
		{DocumentID: "oru-0001", Label: "Lab results message (synthetic)", FileName: "synthetic-oru.hl7"},
	}
	for i := range out {
		// The files are embedded above; a failure is a build error.
		out[i].Source, _ = compoundFiles.ReadFile("seeddata/" + out[i].FileName)
	}
	return out
}
