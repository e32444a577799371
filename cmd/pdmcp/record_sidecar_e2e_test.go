package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/server/journal"
	"github.com/pdmcp/pdmcp/server/record"
	"github.com/pdmcp/pdmcp/server/sidecar"
)

// The record survives what operators do (issue 32): each version's record
// beside its file, keys per version, one task per folder.

// removeJournal deletes the task folder's journal and its WAL files, as a
// clean-up or a restore of the folder without it would.
func removeJournal(t *testing.T, s *stack) {
	t.Helper()
	jp := journal.DefaultPath(s.manifest)
	for _, p := range []string{jp, jp + "-wal", jp + "-shm"} {
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
}

// TestUnplacedSidecarIsALeftover: a server killed after it wrote a
// version's sidecar and before the version's file leaves a sidecar that
// the folder's scan names a leftover, never a version, and the record
// lists nothing; the retry places the version, and its sidecar is then
// that version's.
func TestUnplacedSidecarIsALeftover(t *testing.T) {
	for _, tc := range []struct {
		point, tool, sidecar string
		args                 map[string]any
		compound             bool
	}{
		{"save:sidecar-written", "save_protected_result", "results/evaluation-summary.v1.json",
			saveArgs("evaluation-summary", "Cirrus: best quality.", "left-1"), false},
		{"fragment:sidecar-written", "save_protected_fragment", "documents/oru-0001/OBX.2.v2.json",
			map[string]any{"documentId": "oru-0001", "fragmentId": "OBX.2",
				"text": "OBX|2|NM|2085-9^HDL cholesterol^LN||58|mg/dL|>40|N|||F", "idempotencyKey": "left-1"}, true},
	} {
		t.Run(tc.point, func(t *testing.T) {
			var s *stack
			if tc.compound {
				s = newCompoundStack(t)
				s.giveAgent(t, "results")
			} else {
				s = newStack(t)
			}
			s.callDies(t, tc.point, tc.tool, tc.args)
			vs, problems, err := sidecar.Scan(filepath.Dir(s.manifest))
			if err != nil {
				t.Fatal(err)
			}
			if len(vs) != 0 || len(problems) != 1 || problems[0].Kind != sidecar.ProblemLeftover || problems[0].Path != tc.sidecar {
				t.Fatalf("after the kill: versions %+v, problems %+v; want the one leftover %s", vs, problems, tc.sidecar)
			}
			for _, e := range versionsOf(t, s) {
				if e.Source == record.SourceRecord {
					t.Fatalf("the record lists %+v after a kill before the version was placed", e)
				}
			}
			cs := s.connect(t)
			if m, isErr := call(t, cs, tc.tool, tc.args); isErr {
				t.Fatalf("retry: %v", m)
			}
			checkSidecars(t, s)
		})
	}
}

// TestRecordRebuiltFromSidecars is the IV-loss half of "Why" 1: with the
// journal deleted, the IVs of every saved version lived only in it, and
// nothing could open those ciphertexts again. Now the folder's sidecars
// rebuild the record (as pdmcp check --repair does): every version comes
// back with the IV and key that open it, the section is served at its
// saved version, and the next save takes the next version.
func TestRecordRebuiltFromSidecars(t *testing.T) {
	ctx := context.Background()
	s := newCompoundStack(t)
	s.giveAgent(t, "results")
	cs := s.connect(t)
	for i, text := range []string{"first summary", "second summary"} {
		if m, isErr := call(t, cs, "save_protected_result", saveArgs("evaluation-summary", text, "r-"+string(rune('1'+i)))); isErr {
			t.Fatalf("save: %v", m)
		}
	}
	section := map[string]any{"documentId": "oru-0001", "fragmentId": "OBX.2",
		"text": "OBX|2|NM|2085-9^HDL cholesterol^LN||61|mg/dL|>40|N|||F", "idempotencyKey": "f-1"}
	if m, isErr := call(t, cs, "save_protected_fragment", section); isErr || m["version"] != float64(2) {
		t.Fatalf("section save: %v", m)
	}
	_ = cs.Close()
	before := versionsOf(t, s)

	removeJournal(t, s)
	vs, problems, err := sidecar.Scan(filepath.Dir(s.manifest))
	if err != nil || len(problems) != 0 || len(vs) != 3 {
		t.Fatalf("scan: %d versions, problems %+v, %v", len(vs), problems, err)
	}
	j, err := journal.Open(ctx, journal.DefaultPath(s.manifest))
	if err != nil {
		t.Fatal(err)
	}
	n, err := sidecar.Rebuild(ctx, j, vs)
	j.Close()
	if err != nil || n != 3 {
		t.Fatalf("rebuild: %d %v", n, err)
	}
	if after := versionsOf(t, s); !slices.Equal(after, before) {
		t.Fatalf("versions after the rebuild\n got %+v\nwant %+v", after, before)
	}
	cs = s.connect(t)
	got, isErr := call(t, cs, "read_protected_fragment", map[string]any{"documentId": "oru-0001", "fragmentId": "OBX.2"})
	if isErr || got["text"] != section["text"] || got["provenance"].(map[string]any)["version"] != float64(2) {
		t.Fatalf("the section after the rebuild: %v", got)
	}
	if m, isErr := call(t, cs, "save_protected_result", saveArgs("evaluation-summary", "third summary", "r-3")); isErr || m["version"] != float64(3) {
		t.Fatalf("the next save after the rebuild: %v", m)
	}
	checkSidecars(t, s)
}

// TestRotatedDestinationKeyKeepsOldVersions is "Why" 4: after the
// destination's key is changed in the manifest (docs/operating.md's
// rotation), the export, the versions list and the next save keep v1 under
// the key it was saved under, and the new version under the new key.
func TestRotatedDestinationKeyKeepsOldVersions(t *testing.T) {
	s := newStack(t)
	cs := s.connect(t)
	if m, isErr := call(t, cs, "save_protected_result", saveArgs("evaluation-summary", "under the old key", "k-1")); isErr {
		t.Fatalf("save: %v", m)
	}
	_ = cs.Close()
	m, err := grant.LoadManifest(s.manifest)
	if err != nil {
		t.Fatal(err)
	}
	oldKey := m.Destinations["evaluation-summary"].TTag
	// A key the agent may encrypt under (READ): an approved document's.
	newKey := m.Documents["proposal-aurora"].TTag
	s.editManifest(t, func(m *grant.Manifest) {
		d := m.Destinations["evaluation-summary"]
		d.TTag = newKey
		m.Destinations["evaluation-summary"] = d
	})
	cs = s.connect(t)
	if m, isErr := call(t, cs, "save_protected_result", saveArgs("evaluation-summary", "under the new key", "k-2")); isErr || m["version"] != float64(2) {
		t.Fatalf("save after the rotation: %v", m)
	}
	keys := map[int]string{}
	for _, e := range versionsOf(t, s) {
		if e.Kind == record.KindResult {
			keys[e.Version] = e.TTag
		}
	}
	if keys[1] != oldKey || keys[2] != newKey {
		t.Errorf("versions --json lists v1 under the new key (%v), or v2 under the old", keys[1] == newKey)
	}
	out := filepath.Join(t.TempDir(), "merged.json")
	run(t, "export-manifest", "--manifest", s.manifest, "--out", out)
	merged, err := grant.LoadManifest(out)
	if err != nil {
		t.Fatal(err)
	}
	d := merged.Destinations["evaluation-summary"]
	if d.TTag != newKey || len(d.Versions) != 2 || d.Versions[0].TTag != oldKey || d.Versions[1].TTag != newKey {
		t.Errorf("the export relabels a version: destination key new=%v, versions %d, v1 under the old key %v",
			d.TTag == newKey, len(d.Versions), len(d.Versions) > 0 && d.Versions[0].TTag == oldKey)
	}
	checkSidecars(t, s)
}

// TestNewTaskDoesNotInheritTheRecord is "Why" 5: a new task seeded into
// the folder of an earlier one is refused while the folder holds the old
// task's saved versions; and a journal of another task, put beside a
// manifest, is refused by name by serve and by the commands that read the
// record.
func TestNewTaskDoesNotInheritTheRecord(t *testing.T) {
	s := newStack(t)
	cs := s.connect(t)
	if m, isErr := call(t, cs, "save_protected_result", saveArgs("evaluation-summary", "the old task's result", "k-1")); isErr {
		t.Fatalf("save: %v", m)
	}
	_ = cs.Close()
	dir := filepath.Dir(s.manifest)
	old, err := grant.LoadManifest(s.manifest)
	if err != nil || old.Task == "" {
		t.Fatalf("seed wrote no task identity: %v", err)
	}
	// The old task's journal, as a backup holds it (the server is stopped,
	// so the file is whole without its WAL).
	oldJournal, err := os.ReadFile(journal.DefaultPath(s.manifest))
	if err != nil {
		t.Fatal(err)
	}
	// The operator moves the old task's manifest and seed record away and
	// seeds again into the same folder.
	aside := t.TempDir()
	for _, f := range []string{"manifest.json", "seed-record.json"} {
		if err := os.Rename(filepath.Join(dir, f), filepath.Join(aside, f)); err != nil {
			t.Fatal(err)
		}
	}
	b, err := pdmcpCmd(t, "seed", "--config", s.config, "--out", dir).CombinedOutput()
	if err == nil || !strings.Contains(string(b), "saved versions") || strings.Contains(string(b), "SEED: OK") {
		t.Fatalf("seed into a folder with the old task's versions: %v\n%s", err, b)
	}
	if _, err := os.Stat(s.manifest); !os.IsNotExist(err) {
		t.Fatalf("the refused seed wrote a manifest: %v", err)
	}
	// The journal alone gone, the sidecars still say so.
	removeJournal(t, s)
	if b, err := pdmcpCmd(t, "seed", "--config", s.config, "--out", dir).CombinedOutput(); err == nil || !strings.Contains(string(b), "saved versions") {
		t.Fatalf("seed into a folder with the old task's sidecars: %v\n%s", err, b)
	}

	// A second task in its own folder, with the first task's journal
	// put beside its manifest (a restore from the wrong backup).
	other := &stack{dir: t.TempDir(), config: s.config, env: s.env}
	data := filepath.Join(other.dir, "task-data")
	run(t, "seed", "--config", s.config, "--out", data)
	other.manifest, other.grant, other.audit = filepath.Join(data, "manifest.json"), filepath.Join(data, "grant.json"), filepath.Join(data, "audit.jsonl")
	run(t, "grant", "--manifest", other.manifest, "--out", other.grant, "--all-approved", "--ttl", "15m")
	second, err := grant.LoadManifest(other.manifest)
	if err != nil || second.Task == "" || second.Task == old.Task {
		t.Fatalf("the second seed's task %q (the first's %q): %v", second.Task, old.Task, err)
	}
	if err := os.WriteFile(journal.DefaultPath(other.manifest), oldJournal, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"versions", "--manifest", other.manifest},
		{"export-manifest", "--manifest", other.manifest, "--out", filepath.Join(t.TempDir(), "x.json")},
	} {
		code, out, stderr := runCLI(t, args...)
		if code != exitRefused || !strings.Contains(stderr, old.Task) || !strings.Contains(stderr, second.Task) {
			t.Errorf("pdmcp %s with another task's journal: exit %d, want %d\n%s%s", args[0], code, exitRefused, out, stderr)
		}
	}
	cmd := other.serveCmd(t)
	cmd.Stdin = strings.NewReader("")
	b, err = cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(b), old.Task) || !strings.Contains(string(b), second.Task) {
		t.Errorf("serve with another task's journal: %v\n%s", err, b)
	}
}

// TestRotatedSectionKeyKeepsItsVersion: a section's saved version is read
// under the key it was saved under after the manifest replaces its data
// type's key while the server runs; before, the read took today's key
// from the manifest and the version could not be opened.
func TestRotatedSectionKeyKeepsItsVersion(t *testing.T) {
	s := newCompoundStack(t)
	s.giveAgent(t, "results")
	cs := s.connect(t)
	section := map[string]any{"documentId": "oru-0001", "fragmentId": "OBX.2",
		"text": "OBX|2|NM|2085-9^HDL cholesterol^LN||61|mg/dL|>40|N|||F", "idempotencyKey": "f-1"}
	if m, isErr := call(t, cs, "save_protected_fragment", section); isErr || m["version"] != float64(2) {
		t.Fatalf("section save: %v", m)
	}
	var oldKey string
	s.editManifest(t, func(m *grant.Manifest) {
		oldKey = m.CompoundKeys["results"]
		for dt, k := range m.CompoundKeys {
			if dt != "results" && k != oldKey {
				m.CompoundKeys["results"] = k
				break
			}
		}
	})
	got, isErr := call(t, cs, "read_protected_fragment", map[string]any{"documentId": "oru-0001", "fragmentId": "OBX.2"})
	if isErr || got["text"] != section["text"] || got["provenance"].(map[string]any)["version"] != float64(2) {
		t.Fatalf("the saved section after its data type's key changed: %v", got)
	}
	for _, e := range versionsOf(t, s) {
		if e.Source == record.SourceRecord && e.FragmentID == "OBX.2" && e.TTag != oldKey {
			t.Errorf("versions lists the saved section under another key than its own")
		}
	}
}

// TestProtectGivesAnOldManifestATask: a manifest from before task
// identities gets one from the next protect, and the journal takes it on
// its next use: a journal of another task is refused from then on.
func TestProtectGivesAnOldManifestATask(t *testing.T) {
	s := newStack(t)
	s.editManifest(t, func(m *grant.Manifest) { m.Task = "" })
	if out, stderr, ok := s.protect(t, nil, "--source", oruSource, "--document-id", "oru-0001"); !ok {
		t.Fatalf("protect: %s %s", out, stderr)
	}
	m, err := grant.LoadManifest(s.manifest)
	if err != nil || !strings.HasPrefix(m.Task, "task-") {
		t.Fatalf("protect left the manifest without a task (%q): %v", m.Task, err)
	}
	cs := s.connect(t)
	if got, isErr := call(t, cs, "save_protected_result", saveArgs("evaluation-summary", "text", "k-1")); isErr {
		t.Fatalf("save: %v", got)
	}
	_ = cs.Close()
	j, err := journal.Open(context.Background(), journal.DefaultPath(s.manifest))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if task, err := j.Task(context.Background()); err != nil || task != m.Task {
		t.Fatalf("the journal's task %q, the manifest's %q: %v", task, m.Task, err)
	}
}

// TestSeedCleanupListsVersionsByTheirOwnKey is "Why" 4 for seed --cleanup:
// the destination's key replaced in the manifest by a key the seed did
// not make, cleanup still names v1, saved under the seed's key it
// removes; before, it took the key from today's manifest and named none.
func TestSeedCleanupListsVersionsByTheirOwnKey(t *testing.T) {
	s := newStack(t)
	cs := s.connect(t)
	if m, isErr := call(t, cs, "save_protected_result", saveArgs("evaluation-summary", "under the seed's key", "k-1")); isErr {
		t.Fatalf("save: %v", m)
	}
	_ = cs.Close()
	// Another seed's destination key: not in this seed's record.
	otherData := filepath.Join(t.TempDir(), "task-data")
	run(t, "seed", "--config", s.config, "--out", otherData)
	other, err := grant.LoadManifest(filepath.Join(otherData, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	s.editManifest(t, func(m *grant.Manifest) {
		d := m.Destinations["evaluation-summary"]
		d.TTag = other.Destinations["evaluation-summary"].TTag
		m.Destinations["evaluation-summary"] = d
	})
	out := run(t, "seed", "--config", s.config, "--cleanup", "--seed-record", s.record())
	if !strings.Contains(out, "1 saved versions were under the removed keys") || !strings.Contains(out, "results/evaluation-summary.v1.bin") {
		t.Fatalf("cleanup does not name the version saved under its key:\n%s", out)
	}
}
