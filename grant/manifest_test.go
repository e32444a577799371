package grant

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func loadValidManifest(t *testing.T) *Manifest {
	t.Helper()
	m, err := LoadManifest(copyFixture(t, "manifest-valid.json", "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestLoadManifestValid(t *testing.T) {
	path := copyFixture(t, "manifest-valid.json", "manifest.json")
	m, err := LoadManifest(path)
	if err != nil {
		t.Fatal(err)
	}
	if m.File() != path || m.Dir() != filepath.Dir(path) {
		t.Fatalf("File, Dir = %q, %q; want %q and its folder", m.File(), m.Dir(), path)
	}
	ccd := m.Documents["ccd-0001"]
	if !ccd.IsCompound() || len(ccd.Fragments) != 3 {
		t.Fatalf("ccd-0001 = %+v; want a compound document with 3 fragments", ccd)
	}
	if f, ok := ccd.Fragment("results"); !ok || f.DataType != "results" || f.Size != 1405 {
		t.Fatalf("Fragment(results) = %+v, %v", f, ok)
	}
	if _, ok := ccd.Fragment("vitals"); ok {
		t.Fatal("Fragment(vitals) found a fragment the document does not have")
	}
	if got, want := ccd.DataTypes(), []string{"allergies", "problems", "results"}; !slices.Equal(got, want) {
		t.Fatalf("DataTypes = %v, want %v", got, want)
	}
	if got, want := m.DocumentKeys("ccd-0001"), []string{"dGFnLWFsbGVyZ2llcw", "dGFnLXByb2JsZW1z", "dGFnLXJlc3VsdHM"}; !slices.Equal(got, want) {
		t.Fatalf("DocumentKeys(ccd-0001) = %v, want %v", got, want)
	}
	if got := m.DocumentKeys("proposal-aurora"); !slices.Equal(got, []string{"dGFnLWF1cm9yYQ"}) {
		t.Fatalf("DocumentKeys(proposal-aurora) = %v", got)
	}
	if got := m.DocumentKeys("nope"); got != nil {
		t.Fatalf("DocumentKeys(nope) = %v, want nil", got)
	}
	dest := m.Destinations["evaluation-summary"]
	if v, ok := dest.Latest(); !ok || v.Version != 1 || !v.SavedAt.Equal(time.Date(2026, 10, 24, 12, 0, 0, 0, time.UTC)) {
		t.Fatalf("Latest = %+v, %v", v, ok)
	}
	if dest.NextVersion() != 2 || m.Destinations["archive"].NextVersion() != 1 {
		t.Fatalf("NextVersion = %d, %d; want 2, 1", dest.NextVersion(), m.Destinations["archive"].NextVersion())
	}
	step := m.Steps["referral-history"]
	if step.To.SystemID != 1234567890 || step.Confirm != ConfirmNone || !slices.Equal(step.Documents["ccd-0001"], []string{"problems"}) {
		t.Fatalf("step = %+v", step)
	}
}

func TestLoadManifestRefusals(t *testing.T) {
	testLoadRefusals(t, "manifest.json", LoadManifest, []fileRefusal{
		{"manifest-unknown-field.json", ErrUnknownField, "", `: documents.ccd-0001.fragments[1].key at line 70, column 11: unknown field`},
		// "Approved" beside "approved": encoding/json took it as the same
		// member and kept the last; a member name must match exactly.
		{"manifest-duplicate-key.json", ErrUnknownField, "", `: documents.proposal-aurora.Approved at line 6, column 7: unknown field: member names are case-sensitive: did you mean "approved"?`},
		{"manifest-malformed.json", ErrMalformed, "", ": not valid JSON at line 15"},
		{"manifest-trailing.json", ErrMalformed, "", "more after the JSON object"},
		{"manifest-bad-version.json", ErrInvalid, "version", "version 1"},
		{"manifest-bad-iv.json", ErrBadIV, "documents.proposal-aurora.iv", "12 bytes"},
		{"manifest-bad-sha256.json", ErrBadSHA256, "documents.evaluation-criteria.sha256", "6 characters"},
		{"manifest-bad-id.json", ErrBadID, `documents."../escape"`, ""},
		{"manifest-path-escape.json", ErrBadPath, "documents.proposal-aurora.path", "../outside"},
		{"manifest-missing-ttag.json", ErrMissing, "documents.proposal-aurora.ttag", "t-Tag"},
		{"manifest-fragment-no-key.json", ErrUnknownDataType, "documents.ccd-0001.fragments[2].dataType", "compoundKeys"},
		{"manifest-step-not-compound.json", ErrNotCompound, "steps.referral-history.documents.proposal-aurora", ""},
		{"manifest-step-unknown-datatype.json", ErrUnknownDataType, "steps.referral-history.documents.ccd-0001[1]", `"vitals"`},
		{"manifest-bad-confirm.json", ErrInvalid, "steps.referral-history.confirm", `"ask"`},
	})
}

func TestLoadManifestRefusesWritableFile(t *testing.T) {
	path := copyFixture(t, "manifest-valid.json", "manifest.json")
	if err := os.Chmod(path, 0o664); err != nil {
		t.Fatal(err)
	}
	_, err := LoadManifest(path)
	var me *ModeError
	if !errors.As(err, &me) || !errors.Is(err, ErrInsecureMode) || me.Mode.Perm() != 0o664 {
		t.Fatalf("LoadManifest of a 0664 file: %v; want a ModeError for 0664", err)
	}
	if _, err := LoadManifest(filepath.Join(t.TempDir(), "absent.json")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("LoadManifest of a missing file: %v; want not-exist", err)
	}
	if _, err := LoadManifest(t.TempDir()); !errors.Is(err, ErrNotRegular) {
		t.Fatalf("LoadManifest of a folder: %v; want ErrNotRegular", err)
	}
}

// TestManifestValidateRules covers the rules the fixtures do not, each by
// breaking one thing in a valid manifest.
func TestManifestValidateRules(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(m *Manifest)
		want  error
		field string
	}{
		{"compound with its own ttag", func(m *Manifest) { setDoc(m, "ccd-0001", func(d *Document) { d.TTag = "x" }) },
			ErrInvalid, "documents.ccd-0001.ttag"},
		{"compound without fragments", func(m *Manifest) { setDoc(m, "ccd-0001", func(d *Document) { d.Fragments = nil }) },
			ErrMissing, "documents.ccd-0001.fragments"},
		{"compound without skeleton", func(m *Manifest) { setDoc(m, "ccd-0001", func(d *Document) { d.Skeleton = "" }) },
			ErrBadPath, "documents.ccd-0001.skeleton"},
		{"fragment ids equal ignoring case", func(m *Manifest) { setDoc(m, "ccd-0001", func(d *Document) { d.Fragments[1].ID = "Problems" }) },
			ErrDuplicate, "documents.ccd-0001.fragments[1].id"},
		{"fragment with a bad IV", func(m *Manifest) { setDoc(m, "ccd-0001", func(d *Document) { d.Fragments[0].IV = "not base64!" }) },
			ErrBadIV, "documents.ccd-0001.fragments[0].iv"},
		{"fragment version 0", func(m *Manifest) { setDoc(m, "ccd-0001", func(d *Document) { d.Fragments[0].Version = 0 }) },
			ErrInvalid, "documents.ccd-0001.fragments[0].version"},
		{"single document with fragments", func(m *Manifest) {
			setDoc(m, "proposal-aurora", func(d *Document) { d.Fragments = m.Documents["ccd-0001"].Fragments })
		}, ErrInvalid, "documents.proposal-aurora.kind"},
		{"unknown kind", func(m *Manifest) { setDoc(m, "proposal-aurora", func(d *Document) { d.Kind = "bundle" }) },
			ErrInvalid, "documents.proposal-aurora.kind"},
		{"document version 0", func(m *Manifest) { setDoc(m, "proposal-aurora", func(d *Document) { d.Version = 0 }) },
			ErrInvalid, "documents.proposal-aurora.version"},
		{"negative size", func(m *Manifest) { setDoc(m, "proposal-aurora", func(d *Document) { d.Size = -1 }) },
			ErrInvalid, "documents.proposal-aurora.size"},
		{"absolute path", func(m *Manifest) { setDoc(m, "proposal-aurora", func(d *Document) { d.Path = "/etc/passwd" }) },
			ErrBadPath, "documents.proposal-aurora.path"},
		{"backslash path", func(m *Manifest) { setDoc(m, "proposal-aurora", func(d *Document) { d.Path = `documents\a.bin` }) },
			ErrBadPath, "documents.proposal-aurora.path"},
		{"t-Tag with a space", func(m *Manifest) { setDoc(m, "proposal-aurora", func(d *Document) { d.TTag = "a b" }) },
			ErrInvalid, "documents.proposal-aurora.ttag"},
		{"id starting with a dot", func(m *Manifest) { m.Documents[".hidden"] = m.Documents["proposal-aurora"] },
			ErrBadID, `documents.".hidden"`},
		{"empty id", func(m *Manifest) { m.Destinations[""] = Destination{} },
			ErrBadID, `destinations.""`},
		{"saved versions not rising", func(m *Manifest) {
			d := m.Destinations["evaluation-summary"]
			d.Versions = append(d.Versions, d.Versions[0])
			m.Destinations["evaluation-summary"] = d
		}, ErrInvalid, "destinations.evaluation-summary.versions[1].version"},
		{"saved version without savedAt", func(m *Manifest) {
			d := m.Destinations["evaluation-summary"]
			d.Versions[0].SavedAt = time.Time{}
			m.Destinations["evaluation-summary"] = d
		}, ErrMissing, "destinations.evaluation-summary.versions[0].savedAt"},
		{"compound key missing its t-Tag", func(m *Manifest) { m.CompoundKeys["results"] = "" },
			ErrMissing, "compoundKeys.results"},
		{"task with a space", func(m *Manifest) { m.Task = "task one" }, ErrBadID, "task"},
		{"saved version's key with a space", func(m *Manifest) {
			d := m.Destinations["evaluation-summary"]
			d.Versions[0].TTag = "t old"
			m.Destinations["evaluation-summary"] = d
		}, ErrInvalid, "destinations.evaluation-summary.versions[0].ttag"},
		{"section's key with a space", func(m *Manifest) {
			setDoc(m, "ccd-0001", func(d *Document) { d.Fragments[0].TTag = "t old" })
		}, ErrInvalid, "documents.ccd-0001.fragments[0].ttag"},
		{"step without recipient system id", func(m *Manifest) { setStep(m, func(s *Step) { s.To.SystemID = 0 }) },
			ErrMissing, "steps.referral-history.to.systemId"},
		{"step without from", func(m *Manifest) { setStep(m, func(s *Step) { s.From = " " }) },
			ErrMissing, "steps.referral-history.from"},
		{"step window 0", func(m *Manifest) { setStep(m, func(s *Step) { s.MaxWindowSeconds = 0 }) },
			ErrInvalid, "steps.referral-history.maxWindowSeconds"},
		{"step naming an absent document", func(m *Manifest) {
			setStep(m, func(s *Step) { s.Documents = map[string][]string{"ccd-9999": {"problems"}} })
		},
			ErrUnknownDocument, "steps.referral-history.documents.ccd-9999"},
		{"step naming no data type", func(m *Manifest) { setStep(m, func(s *Step) { s.Documents = map[string][]string{"ccd-0001": {}} }) },
			ErrMissing, "steps.referral-history.documents.ccd-0001"},
		{"step naming a data type twice", func(m *Manifest) {
			setStep(m, func(s *Step) { s.Documents = map[string][]string{"ccd-0001": {"results", "results"}} })
		}, ErrDuplicate, "steps.referral-history.documents.ccd-0001[1]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := loadValidManifest(t)
			tt.edit(m)
			assertRefused(t, m.Validate(), tt.want, tt.field)
		})
	}
}

func setDoc(m *Manifest, id string, edit func(*Document)) {
	d := m.Documents[id]
	d.Fragments = slices.Clone(d.Fragments)
	edit(&d)
	m.Documents[id] = d
}

func setStep(m *Manifest, edit func(*Step)) {
	s := m.Steps["referral-history"]
	edit(&s)
	m.Steps["referral-history"] = s
}

func TestManifestSaveRoundTrip(t *testing.T) {
	m := loadValidManifest(t)
	d := m.Destinations["evaluation-summary"]
	d.Versions = append(d.Versions, SavedVersion{
		Version: d.NextVersion(), Path: "results/evaluation-summary.v2.bin", IV: "EBESExQVFhcYGRobHB0eHw==",
		SHA256: strings.Repeat("0f", 32), Size: 99, SavedAt: time.Date(2026, 10, 25, 8, 30, 0, 0, time.UTC),
	})
	m.Destinations["evaluation-summary"] = d

	out := filepath.Join(t.TempDir(), "saved.json")
	assertSavesOverLoose(t, out, m.Save, LoadManifest, m)
	assertNoTempFiles(t, filepath.Dir(out))
	if m.File() != out {
		t.Fatalf("File after Save = %q, want %q", m.File(), out)
	}
	// The file uses the documented camelCase names.
	raw, _ := os.ReadFile(out)
	for _, name := range []string{`"compoundKeys"`, `"maxWindowSeconds"`, `"savedAt"`, `"principalId"`, `"dataType"`, `"contentType"`} {
		if !bytes.Contains(raw, []byte(name)) {
			t.Errorf("saved manifest lacks %s", name)
		}
	}
}

func TestManifestSaveRefusesInvalidAndKeepsOld(t *testing.T) {
	path := copyFixture(t, "manifest-valid.json", "manifest.json")
	before, _ := os.ReadFile(path)
	m, err := LoadManifest(path)
	if err != nil {
		t.Fatal(err)
	}
	setDoc(m, "proposal-aurora", func(d *Document) { d.IV = "AAAA" })
	assertRefused(t, m.Save(path), ErrBadIV, "documents.proposal-aurora.iv")
	after, _ := os.ReadFile(path)
	if !bytes.Equal(before, after) {
		t.Fatal("a refused Save changed the file")
	}
	assertNoTempFiles(t, filepath.Dir(path))
}

func TestManifestSaveFailureLeavesNoTemp(t *testing.T) {
	m := loadValidManifest(t)
	dir := t.TempDir()
	// The target is a folder with something in it: the rename fails after
	// the temporary file was written.
	target := filepath.Join(dir, "manifest.json")
	if err := os.MkdirAll(filepath.Join(target, "inside"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := m.Save(target); err == nil {
		t.Fatal("Save over a folder succeeded")
	}
	assertNoTempFiles(t, dir)
	if fi, err := os.Stat(target); err != nil || !fi.IsDir() {
		t.Fatalf("the folder in the way was changed: %v", err)
	}
	// A folder that does not exist: nothing is created.
	missing := filepath.Join(dir, "absent", "manifest.json")
	if err := m.Save(missing); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Save into a missing folder: %v; want not-exist", err)
	}
	if _, err := os.Stat(filepath.Dir(missing)); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("Save created the missing folder")
	}
}

func TestManifestResolve(t *testing.T) {
	m := loadValidManifest(t)
	got, err := m.Resolve(m.Documents["proposal-aurora"].Path)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(m.Dir(), "documents", "proposal-aurora.v1.bin"); got != want {
		t.Fatalf("Resolve = %q, want %q", got, want)
	}
	for _, bad := range []string{"", "../x", "/abs", "a/../../x", `a\b`} {
		if _, err := m.Resolve(bad); !errors.Is(err, ErrBadPath) {
			t.Errorf("Resolve(%q) = %v; want ErrBadPath", bad, err)
		}
	}
	if _, err := (&Manifest{Version: 1}).Resolve("a"); !errors.Is(err, ErrNoManifestLocated) {
		t.Fatalf("Resolve on an unlocated manifest: %v", err)
	}
}

func TestManifestClone(t *testing.T) {
	m := loadValidManifest(t)
	before, _ := json.Marshal(m)
	c := m.Clone()
	c.Documents["ccd-0001"].Fragments[0].Size = 1
	setDoc(c, "ccd-0001", func(d *Document) { d.Label = "changed" })
	d := c.Destinations["evaluation-summary"]
	d.Versions[0].Size = 1
	c.Steps["referral-history"].Documents["ccd-0001"][0] = "results"
	c.CompoundKeys["results"] = "changed"
	after, _ := json.Marshal(m)
	if !bytes.Equal(before, after) {
		t.Fatal("changing the clone changed the original")
	}
	if c.File() != m.File() {
		t.Fatal("the clone lost the manifest's location")
	}
}

// TestNewTaskID: a task id passes the manifest's check and is new each time.
func TestNewTaskID(t *testing.T) {
	a, err := NewTaskID()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewTaskID()
	if a == b || !strings.HasPrefix(a, "task-") || len(a) != len("task-")+32 {
		t.Fatalf("task ids %q %q", a, b)
	}
	m := loadValidManifest(t)
	m.Task = a
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	if m.Clone().Task != a {
		t.Fatal("Clone drops the task")
	}
}
