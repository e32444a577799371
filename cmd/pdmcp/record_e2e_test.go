package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/server/record"
	"github.com/pdmcp/pdmcp/server/sidecar"
)

// The record of saved versions, end to end through the pdmcp binary: the
// three ways today's main loses or wedges saves (issue 17, "Why"), the
// crash suite with two server processes on one manifest, and two processes
// saving at once while an operator protects a document.

// versionsOf is `pdmcp versions --json`: what an operator sees.
func versionsOf(t *testing.T, s *stack) []record.Entry {
	t.Helper()
	out := run(t, "versions", "--manifest", s.manifest, "--json")
	var doc struct {
		Versions []record.Entry `json:"versions"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("versions --json: %v\n%s", err, out)
	}
	return doc.Versions
}

// resultVersions are the versions of one destination an operator sees,
// each checked to name a file that exists.
func resultVersions(t *testing.T, s *stack, dest string) []int {
	t.Helper()
	var out []int
	for _, e := range versionsOf(t, s) {
		if e.Kind != record.KindResult || e.Destination != dest {
			continue
		}
		if _, err := os.Stat(filepath.Join(filepath.Dir(s.manifest), filepath.FromSlash(e.Path))); err != nil {
			t.Errorf("version %d names a missing file: %v", e.Version, err)
		}
		out = append(out, e.Version)
	}
	return out
}

// editManifest changes manifest.json as an operator's hand edit would:
// read it, change it, write it back.
func (s *stack) editManifest(t *testing.T, change func(m *grant.Manifest)) {
	t.Helper()
	m, err := grant.LoadManifest(s.manifest)
	if err != nil {
		t.Fatal(err)
	}
	change(m)
	if err := m.Save(s.manifest); err != nil {
		t.Fatal(err)
	}
}

// editDocument changes document id's entry in manifest.json as
// [stack.editManifest] does.
func (s *stack) editDocument(t *testing.T, id string, change func(d *grant.Document)) {
	t.Helper()
	s.editManifest(t, func(m *grant.Manifest) {
		d := m.Documents[id]
		change(&d)
		m.Documents[id] = d
	})
}

// addDestination gives the manifest a second destination under the seed
// destination's key, as an operator's hand edit would.
func addDestination(t *testing.T, s *stack, id string) {
	t.Helper()
	s.editManifest(t, func(m *grant.Manifest) {
		m.Destinations[id] = grant.Destination{Label: "Second summary", TTag: m.Destinations["evaluation-summary"].TTag}
	})
	run(t, "grant", "--manifest", s.manifest, "--out", s.grant, "--all-approved", "--ttl", "15m")
}

func saveArgs(dest, text, key string) map[string]any {
	return map[string]any{"destinationId": dest, "text": text, "idempotencyKey": key}
}

// TestOperatorProtectSurvivesASave is "Why" 1: an operator protects a
// document while a server runs; the next save must not erase it from
// manifest.json, and the server serves it without a restart.
func TestOperatorProtectSurvivesASave(t *testing.T) {
	s := newStack(t)
	cs := s.connect(t)
	if m, isErr := call(t, cs, "save_protected_result", saveArgs("evaluation-summary", "first", "k-1")); isErr {
		t.Fatalf("save: %v", m)
	}
	if out, stderr, ok := s.protect(t, nil, "--source", oruSource, "--document-id", "probe"); !ok || !strings.Contains(out, "PROTECT: OK") {
		t.Fatalf("protect: %s %s", out, stderr)
	}
	if m, isErr := call(t, cs, "save_protected_result", saveArgs("evaluation-summary", "second", "k-2")); isErr {
		t.Fatalf("save after protect: %v", m)
	}
	m, err := grant.LoadManifest(s.manifest)
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := m.Documents["probe"]; !ok || len(d.Fragments) == 0 {
		t.Fatalf("the protected document is gone from manifest.json after a save: %+v", d)
	}
	if got := resultVersions(t, s, "evaluation-summary"); !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("versions %v, want [1 2]", got)
	}
}

// TestTwoServersKeepEachOthersSaves is "Why" 2: two server processes on
// one manifest; A saves to one destination, B to another; both versions
// stay in the record and B's next save to A's destination takes the next
// version.
func TestTwoServersKeepEachOthersSaves(t *testing.T) {
	s := newStack(t)
	addDestination(t, s, "summary2")
	a, b := s.connect(t), s.connect(t)
	if m, isErr := call(t, a, "save_protected_result", saveArgs("evaluation-summary", "from A", "a-1")); isErr || m["version"] != float64(1) {
		t.Fatalf("A: %v", m)
	}
	if m, isErr := call(t, b, "save_protected_result", saveArgs("summary2", "from B", "b-1")); isErr || m["version"] != float64(1) {
		t.Fatalf("B: %v", m)
	}
	m, isErr := call(t, b, "save_protected_result", saveArgs("evaluation-summary", "from B again", "b-2"))
	if isErr || m["version"] != float64(2) {
		t.Fatalf("B's save to A's destination: %v", m)
	}
	if got := resultVersions(t, s, "evaluation-summary"); !slices.Equal(got, []int{1, 2}) {
		t.Errorf("evaluation-summary versions %v, want [1 2]", got)
	}
	if got := resultVersions(t, s, "summary2"); !slices.Equal(got, []int{1}) {
		t.Errorf("summary2 versions %v, want [1]", got)
	}
}

// TestStrayFileDoesNotWedgeADestination is "Why" 3: an empty file at the
// next version's name (a kill between create and write on today's main)
// is left alone; the save takes the next version, and so does the next.
func TestStrayFileDoesNotWedgeADestination(t *testing.T) {
	s := newStack(t)
	results := filepath.Join(filepath.Dir(s.manifest), "results")
	if err := os.MkdirAll(results, 0o700); err != nil {
		t.Fatal(err)
	}
	stray := filepath.Join(results, "evaluation-summary.v1.bin")
	if err := os.WriteFile(stray, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cs := s.connect(t)
	for i, want := range []float64{2, 3} {
		m, isErr := call(t, cs, "save_protected_result", saveArgs("evaluation-summary", fmt.Sprintf("text %d", i), fmt.Sprintf("k-%d", i)))
		if isErr || m["version"] != want {
			t.Fatalf("save %d: %v, want version %v", i, m, want)
		}
	}
	if b, err := os.ReadFile(stray); err != nil || len(b) != 0 {
		t.Errorf("the stray file was touched: %v, %d bytes", err, len(b))
	}
	if got := resultVersions(t, s, "evaluation-summary"); !slices.Equal(got, []int{2, 3}) {
		t.Errorf("versions %v, want [2 3]", got)
	}
	// A stray at a section's next version is stepped over the same way.
	sc := newCompoundStack(t)
	sc.giveAgent(t, "results")
	// Left while the server runs: a server does not start beside an
	// unrecorded version file and no journal (record.CheckJournal).
	ccs := sc.connect(t)
	dir := filepath.Join(filepath.Dir(sc.manifest), "documents", "oru-0001")
	if err := os.WriteFile(filepath.Join(dir, "OBX.2.v2.bin"), []byte("partial"), 0o600); err != nil {
		t.Fatal(err)
	}
	m, isErr := call(t, ccs, "save_protected_fragment", map[string]any{"documentId": "oru-0001", "fragmentId": "OBX.2",
		"text": "OBX|2|NM|2085-9^HDL cholesterol^LN||58|mg/dL|>40|N|||F", "idempotencyKey": "f-1"})
	if isErr || m["version"] != float64(3) || m["documentVersion"] != float64(2) {
		t.Fatalf("section save over a stray: %v", m)
	}
}

// TestSaveSurvivesKillWithTwoServers is the crash suite of a result save
// with a second server process on the same manifest: A is killed at each
// step, B (running all along) saves to the same destination, then A's save
// is retried through B. Both receipts' versions are in the record exactly
// once, distinct, each naming its file; one encrypt per save.
func TestSaveSurvivesKillWithTwoServers(t *testing.T) {
	for _, point := range savePoints {
		t.Run(point, func(t *testing.T) {
			s := newStack(t)
			files := 2
			if point == "save:placed" {
				putStray(t, s, "results/evaluation-summary.v1.bin")
				files = 3
			}
			b := s.connect(t)
			encrypts := s.env.Gateway.Count(api.RouteEncrypt)
			args := saveArgs("evaluation-summary", "A's text", "a-1")
			s.callDies(t, point, "save_protected_result", args)
			other, isErr := call(t, b, "save_protected_result", saveArgs("evaluation-summary", "B's text", "b-1"))
			if isErr {
				t.Fatalf("B: %v", other)
			}
			retried, isErr := call(t, b, "save_protected_result", args)
			if isErr {
				t.Fatalf("A's retry through B: %v", retried)
			}
			got := resultVersions(t, s, "evaluation-summary")
			want := []int{int(other["version"].(float64)), int(retried["version"].(float64))}
			slices.Sort(want)
			if !slices.Equal(got, want) || want[0] == want[1] {
				t.Fatalf("record %v, receipts %v", got, want)
			}
			if n := s.env.Gateway.Count(api.RouteEncrypt) - encrypts; n != 2 {
				t.Errorf("Gateway encrypts: %d, want 2", n)
			}
			if got, _ := filepath.Glob(filepath.Join(filepath.Dir(s.manifest), "results", "*.bin")); len(got) != files {
				t.Errorf("files %v, want %d", got, files)
			}
			checkSidecars(t, s)
		})
	}
}

// putStray leaves an empty file at rel (beside the manifest), as a crash
// of an older release could.
func putStray(t *testing.T, s *stack, rel string) {
	t.Helper()
	p := filepath.Join(filepath.Dir(s.manifest), filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

// savePoints are a result save's step boundaries, in order; "save:placed"
// is the placement past a stray file.
var savePoints = []string{"save:reserved", "save:encrypted", "save:placed", "save:sidecar-written", "save:file-created",
	"save:file-written", "save:linked", "save:committed"}

// fragmentPoints are a section save's step boundaries, in order, as
// savePoints are a result save's.
var fragmentPoints = []string{"fragment:reserved", "fragment:encrypted", "fragment:placed", "fragment:sidecar-written",
	"fragment:file-created", "fragment:file-written", "fragment:linked", "fragment:committed"}

// checkSidecars holds the folder to the record: every version of the
// record (as `pdmcp versions` lists it) has its sidecar, naming the same
// IV, key and digests, and there is no other sidecar and no leftover of a
// stopped save.
func checkSidecars(t *testing.T, s *stack) {
	t.Helper()
	vs, problems, err := sidecar.Scan(filepath.Dir(s.manifest))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("sidecar problem: %+v", p)
	}
	byPath := map[string]sidecar.Version{}
	for _, v := range vs {
		byPath[v.Record.Path] = v
	}
	n := 0
	for _, e := range versionsOf(t, s) {
		if e.Source != record.SourceRecord {
			continue
		}
		n++
		v, ok := byPath[e.Path]
		if !ok || v.Record.IV != e.IV || v.Record.TTag != e.TTag || v.Record.SHA256 != e.SHA256 || v.Record.Version != e.Version {
			t.Errorf("version %s: record %+v, sidecar %+v", e.Path, e, v)
		}
	}
	if n != len(vs) {
		t.Errorf("%d sidecars for %d versions in the record", len(vs), n)
	}
}

// TestTwoProcessesSaveWhileAnOperatorProtects runs two server processes
// saving at once, each to the shared destination and to its own, while an
// operator protects a document (each process saves at least rounds times
// and goes on until the protect has ended, so the two overlap): every
// receipt's version is in the record exactly once, no two receipts share
// one, and the protected document is still in manifest.json afterwards.
func TestTwoProcessesSaveWhileAnOperatorProtects(t *testing.T) {
	s := newStack(t)
	addDestination(t, s, "own-a")
	addDestination(t, s, "own-b")
	const rounds, maxRounds = 6, 200
	type receipt struct {
		dest    string
		version int
	}
	var (
		mu       sync.Mutex
		receipts []receipt
		wg       sync.WaitGroup
		sent     atomic.Int64
		ended    atomic.Bool // the protect has returned
	)
	for _, name := range []string{"a", "b"} {
		cs := s.connect(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds || (!ended.Load() && i < maxRounds); i++ {
				for _, dest := range []string{"evaluation-summary", "own-" + name} {
					sent.Add(1)
					res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "save_protected_result",
						Arguments: saveArgs(dest, fmt.Sprintf("%s %s %d", name, dest, i), fmt.Sprintf("%s-%s-%d", name, dest, i))})
					if err != nil || res.IsError {
						t.Errorf("%s: save to %s: %v %+v", name, dest, err, res)
						return
					}
					v := res.StructuredContent.(map[string]any)["version"].(float64)
					mu.Lock()
					receipts = append(receipts, receipt{dest, int(v)})
					mu.Unlock()
				}
			}
		}()
	}
	out, stderr, ok := s.protect(t, nil, "--source", oruSource, "--document-id", "probe")
	ended.Store(true)
	wg.Wait()
	if !ok || !strings.Contains(out, "PROTECT: OK") {
		t.Fatalf("protect during the saves: %s %s", out, stderr)
	}
	if n := sent.Load(); int64(len(receipts)) != n || n < 4*rounds {
		t.Fatalf("%d receipts for %d saves, want one each and at least %d", len(receipts), n, 4*rounds)
	}
	t.Logf("%d saves by two processes while the protect ran", len(receipts))
	inRecord := map[receipt]int{}
	for _, e := range versionsOf(t, s) {
		if e.Kind == record.KindResult {
			if e.Source != record.SourceRecord {
				t.Errorf("version %+v is not from the record", e)
			}
			inRecord[receipt{e.Destination, e.Version}]++
		}
	}
	for _, r := range receipts {
		if inRecord[r] != 1 {
			t.Errorf("receipt %+v is in the record %d times", r, inRecord[r])
		}
	}
	if len(inRecord) != len(receipts) {
		t.Errorf("the record holds %d versions for %d receipts", len(inRecord), len(receipts))
	}
	m, err := grant.LoadManifest(s.manifest)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.Documents["probe"]; !ok {
		t.Fatal("the operator's protect was lost from manifest.json")
	}
}

// TestServerFollowsTheManifest: a running server serves manifest.json as
// the operator changes it, at the next call: a withdrawn approval refuses
// the read before anything is sent; an invalid file is logged and the
// last valid manifest kept; approving again serves the document again.
func TestServerFollowsTheManifest(t *testing.T) {
	s := newStack(t)
	cs := s.connect(t)
	read := map[string]any{"documentId": "evaluation-criteria"}
	if m, isErr := call(t, cs, "read_protected_document", read); isErr {
		t.Fatalf("read: %v", m)
	}
	s.editDocument(t, "evaluation-criteria", func(d *grant.Document) { d.Approved = false })
	s.quiet(t, "a read of a withdrawn document", func() {
		m, isErr := call(t, cs, "read_protected_document", read)
		wantRefused(t, m, isErr, "adapter", "DOCUMENT_NOT_APPROVED")
	})
	valid, err := os.ReadFile(s.manifest)
	if err != nil {
		t.Fatal(err)
	}
	// Approved again, but not a manifest: the last valid one is kept.
	broken := strings.Replace(string(valid), `"version": 1`, `"version": 99`, 1)
	broken = strings.Replace(broken, `"approved": false`, `"approved": true`, 1)
	if err := os.WriteFile(s.manifest, []byte(broken), 0o600); err != nil {
		t.Fatal(err)
	}
	s.quiet(t, "a read under an invalid manifest", func() {
		m, isErr := call(t, cs, "read_protected_document", read)
		wantRefused(t, m, isErr, "adapter", "DOCUMENT_NOT_APPROVED")
	})
	// A hand edit in place, valid again.
	if err := os.WriteFile(s.manifest, []byte(strings.Replace(string(valid), `"approved": false`, `"approved": true`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if m, isErr := call(t, cs, "read_protected_document", read); isErr {
		t.Fatalf("read after approving again: %v", m)
	}
}

// TestManifestWithSavedVersionsIsHistory: a manifest that lists saved
// versions, as today's main wrote them, keeps working with no migration:
// its versions are listed and exported as history, and a new save takes
// the version after them, in the record.
func TestManifestWithSavedVersionsIsHistory(t *testing.T) {
	s := newStack(t)
	m, err := grant.LoadManifest(s.manifest)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(s.manifest)
	if err := os.MkdirAll(filepath.Join(dir, "results"), 0o700); err != nil {
		t.Fatal(err)
	}
	d := m.Destinations["evaluation-summary"]
	for n := 1; n <= 2; n++ {
		p := fmt.Sprintf("results/evaluation-summary.v%d.bin", n)
		if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(p)), []byte("old ciphertext"), 0o600); err != nil {
			t.Fatal(err)
		}
		d.Versions = append(d.Versions, grant.SavedVersion{Version: n, Path: p, IV: "AAAAAAAAAAAAAAAAAAAAAA==",
			SHA256: strings.Repeat("ab", 32), Size: 14, SavedAt: time.Date(2026, 11, n, 0, 0, 0, 0, time.UTC)})
	}
	m.Destinations["evaluation-summary"] = d
	if err := m.Save(s.manifest); err != nil {
		t.Fatal(err)
	}
	cs := s.connect(t)
	if got, isErr := call(t, cs, "save_protected_result", saveArgs("evaluation-summary", "new", "n-1")); isErr || got["version"] != float64(3) {
		t.Fatalf("save after history: %v", got)
	}
	var sources []string
	for _, e := range versionsOf(t, s) {
		if e.Kind == record.KindResult {
			sources = append(sources, fmt.Sprintf("%d:%s", e.Version, e.Source))
		}
	}
	if want := []string{"1:manifest", "2:manifest", "3:record"}; !slices.Equal(sources, want) {
		t.Fatalf("versions %v, want %v", sources, want)
	}
	out := filepath.Join(t.TempDir(), "merged.json")
	run(t, "export-manifest", "--manifest", s.manifest, "--out", out)
	merged, err := grant.LoadManifest(out)
	if err != nil {
		t.Fatal(err)
	}
	if v := merged.Destinations["evaluation-summary"].Versions; len(v) != 3 || v[2].Version != 3 || v[2].Path != "results/evaluation-summary.v3.bin" {
		t.Fatalf("exported versions %+v", v)
	}
	// The export never replaces the manifest itself.
	if b, err := pdmcpCmd(t, "export-manifest", "--manifest", s.manifest, "--out", s.manifest).CombinedOutput(); err == nil || !strings.Contains(string(b), "would replace the manifest") {
		t.Fatalf("export over the manifest: %v %s", err, b)
	}
	text := run(t, "versions", "--manifest", s.manifest)
	if !strings.Contains(text, "results/evaluation-summary.v3.bin") || !strings.Contains(text, "SAVED AT") {
		t.Fatalf("versions table:\n%s", text)
	}
}

// TestSaveFragmentSurvivesKillWithTwoServers is the section save's crash
// suite with a second server process on the manifest: A is killed at each
// step, B saves the same section, then A's save is retried through B. The
// two receipts name distinct section versions and distinct document
// versions, both in the record once, and the section served is the newer.
func TestSaveFragmentSurvivesKillWithTwoServers(t *testing.T) {
	for _, point := range fragmentPoints {
		t.Run(point, func(t *testing.T) {
			s := newCompoundStack(t)
			s.giveAgent(t, "results")
			if point == "fragment:placed" {
				putStray(t, s, "documents/oru-0001/OBX.2.v2.bin")
			}
			b := s.connect(t)
			seg := func(v string) map[string]any {
				return map[string]any{"documentId": "oru-0001", "fragmentId": "OBX.2",
					"text": "OBX|2|NM|2085-9^HDL cholesterol^LN||" + v + "|mg/dL|>40|N|||F", "idempotencyKey": "k-" + v}
			}
			s.callDies(t, point, "save_protected_fragment", seg("58"))
			other, isErr := call(t, b, "save_protected_fragment", seg("61"))
			if isErr {
				t.Fatalf("B: %v", other)
			}
			retried, isErr := call(t, b, "save_protected_fragment", seg("58"))
			if isErr {
				t.Fatalf("A's retry through B: %v", retried)
			}
			if other["version"] == retried["version"] || other["documentVersion"] == retried["documentVersion"] {
				t.Fatalf("receipts share a version: %v %v", other, retried)
			}
			count := map[float64]int{}
			for _, e := range versionsOf(t, s) {
				if e.Kind == record.KindSection && e.FragmentID == "OBX.2" && e.Source == record.SourceRecord {
					count[float64(e.Version)]++
				}
			}
			if len(count) != 2 || count[other["version"].(float64)] != 1 || count[retried["version"].(float64)] != 1 {
				t.Fatalf("record %v, receipts %v and %v", count, other["version"], retried["version"])
			}
			newer := other
			if retried["version"].(float64) > other["version"].(float64) {
				newer = retried
			}
			got, _ := call(t, b, "read_protected_fragment", map[string]any{"documentId": "oru-0001", "fragmentId": "OBX.2"})
			if got["provenance"].(map[string]any)["version"] != newer["version"] {
				t.Fatalf("served %v, want the newer receipt %v", got["provenance"], newer)
			}
			checkSidecars(t, s)
		})
	}
}

// TestSeedCleanupNamesSavedVersions: seed --cleanup reads the record
// before it removes the keys and names every saved version under them,
// the manifest's history and the record's alike; a second run, with
// nothing left to remove, names none.
func TestSeedCleanupNamesSavedVersions(t *testing.T) {
	s := newStack(t)
	cs := s.connect(t)
	for i := range 2 {
		if m, isErr := call(t, cs, "save_protected_result", saveArgs("evaluation-summary", fmt.Sprint("text ", i), fmt.Sprint("c-", i))); isErr {
			t.Fatalf("save: %v", m)
		}
	}
	_ = cs.Close()
	out := run(t, "seed", "--config", s.config, "--cleanup", "--seed-record", s.record())
	if !strings.Contains(out, "2 saved versions were under the removed keys") ||
		!strings.Contains(out, "results/evaluation-summary.v1.bin") || !strings.Contains(out, "results/evaluation-summary.v2.bin") ||
		!strings.HasSuffix(strings.TrimSpace(out), "SEED CLEANUP: OK") {
		t.Fatalf("cleanup:\n%s", out)
	}
	if again := run(t, "seed", "--config", s.config, "--cleanup", "--seed-record", s.record()); strings.Contains(again, "saved versions") {
		t.Fatalf("second cleanup:\n%s", again)
	}
}

// TestServerServesADocumentUnderANewKey: the operator puts a document the
// grant names under a new key while the server runs (a new ciphertext, a
// new t-Tag in manifest.json); the next read serves it, the session
// widened to the new key.
func TestServerServesADocumentUnderANewKey(t *testing.T) {
	s := newStack(t)
	cs := s.connect(t)
	read := map[string]any{"documentId": "evaluation-criteria"}
	if m, isErr := call(t, cs, "read_protected_document", read); isErr {
		t.Fatalf("read: %v", m)
	}
	ctx := context.Background()
	c, rec, owner := s.asOwner(ctx, t)
	defer owner.Revoke(ctx)
	text := []byte("Evaluation criteria, second edition (synthetic).")
	enc, err := owner.Encrypt(ctx, gateway.EncryptInput{IV: make([]byte, api.IVBytes), Plaintext: text})
	if err != nil {
		t.Fatal(err)
	}
	agent, err := c.GetPrincipal(ctx, rec.AgentUser)
	if err != nil {
		t.Fatal(err)
	}
	if err := owner.ACLGrant(ctx, api.ACLGrantRequest{TTag: enc.TTag, SystemID: agent.SystemID, PrincipalID: agent.PrincipalID,
		Rights: []string{api.RightRead}}); err != nil {
		t.Fatal(err)
	}
	rel := "documents/evaluation-criteria.v2.bin"
	if err := os.WriteFile(filepath.Join(filepath.Dir(s.manifest), filepath.FromSlash(rel)), enc.Ciphertext, 0o600); err != nil {
		t.Fatal(err)
	}
	s.editDocument(t, "evaluation-criteria", func(d *grant.Document) {
		d.Version, d.Path, d.TTag, d.IV, d.SHA256, d.Size = 2, rel, enc.TTag, base64.StdEncoding.EncodeToString(enc.IV), sha(text), int64(len(text))
	})
	got, isErr := call(t, cs, "read_protected_document", read)
	if isErr || got["text"] != string(text) || got["provenance"].(map[string]any)["version"] != float64(2) {
		t.Fatalf("read under the new key: %v", got)
	}
}
