package main

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	_ "modernc.org/sqlite"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/reference"
	"github.com/pdmcp/pdmcp/grant"
)

var (
	ccdSource = filepath.Join("..", "..", "internal", "operator", "seeddata", "synthetic-ccd.xml")
	oruSource = filepath.Join("..", "..", "internal", "operator", "seeddata", "synthetic-oru.hl7")
)

// keyCount is how many keys the reference key server holds.
func (s *stack) keyCount(t *testing.T) int {
	t.Helper()
	return countRows(t, s.env.DBPath, "keys")
}

// countRows counts a table's rows in a reference Gateway's database.
func countRows(t *testing.T, dbPath, table string) int {
	t.Helper()
	db, err := sql.Open("sqlite", dbPath+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	// The table name is the test's own constant.
	if err := db.QueryRow("SELECT count(*) FROM " + table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (s *stack) record() string { return filepath.Join(filepath.Dir(s.manifest), "seed-record.json") }

// firstKeyLost runs protect on the ORU source with faults set on the
// encrypt that creates its first key: the run must fail saying the answer
// was lost, that one key made. It returns the key count before the run.
func (s *stack) firstKeyLost(t *testing.T, faults reference.Faults) int {
	t.Helper()
	keys := s.keyCount(t)
	s.env.Gateway.SetFaults(faults)
	_, stderr, ok := s.protect(t, nil, "--source", oruSource, "--document-id", "oru-0001")
	if ok || !strings.Contains(stderr, "answer was lost") {
		t.Fatalf("first run: %s", stderr)
	}
	if n := s.keyCount(t) - keys; n != 1 {
		t.Fatalf("the first run made %d keys, want 1", n)
	}
	return keys
}

// recordHoldsKeys fails unless the seed record lists every key of m's
// compoundKeys, so that seed --cleanup removes them.
func recordHoldsKeys(t *testing.T, s *stack, m *grant.Manifest) {
	t.Helper()
	rec, err := grant.LoadSeedRecord(s.record())
	if err != nil {
		t.Fatal(err)
	}
	for dt, k := range m.CompoundKeys {
		if !slices.Contains(rec.Keys, k) {
			t.Errorf("the seed record lacks %s's key", dt)
		}
	}
}

// asOwner signs the stack's service client in and mints a session as the
// seed's owner over objects (every key the owner may use when none). It
// returns the client and the seed record too; the caller revokes the
// session.
func (s *stack) asOwner(ctx context.Context, t *testing.T, objects ...string) (*gateway.Client, *grant.SeedRecord, *gateway.Session) {
	t.Helper()
	sc, err := gateway.LoadServiceConfig(s.config)
	if err != nil {
		t.Fatal(err)
	}
	c, err := gateway.New(sc.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SignIn(ctx); err != nil {
		t.Fatal(err)
	}
	rec, err := grant.LoadSeedRecord(s.record())
	if err != nil {
		t.Fatal(err)
	}
	owner, err := c.Mint(ctx, gateway.MintRequest{ActingAs: rec.OwnerUser, Objects: objects, TTL: api.MaxScopedTTL})
	if err != nil {
		t.Fatal(err)
	}
	return c, rec, owner
}

// protectCmd is `pdmcp protect` with args, into the stack's manifest and
// seed record.
func (s *stack) protectCmd(t testing.TB, args ...string) *exec.Cmd {
	t.Helper()
	return pdmcpCmd(t, append([]string{"protect", "--config", s.config, "--manifest", s.manifest, "--seed-record", s.record()}, args...)...)
}

// protect runs pdmcp protect and returns stdout, stderr and whether it
// succeeded.
func (s *stack) protect(t *testing.T, env []string, args ...string) (string, string, bool) {
	t.Helper()
	cmd := s.protectCmd(t, args...)
	cmd.Env = append(cmd.Env, env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	return string(out), stderr.String(), err == nil
}

// checkAgree asserts that the manifest and the protect journal agree: every
// fragment the manifest lists is a file whose ciphertext is the journal's
// encrypted answer under the manifest's key for its type.
func checkAgree(t *testing.T, s *stack, docID string) *grant.Manifest {
	t.Helper()
	m, err := grant.LoadManifest(s.manifest)
	if err != nil {
		t.Fatal(err)
	}
	var j struct {
		Documents map[string]struct {
			State    string `json:"state"`
			Attempts []struct {
				Fragment, DataType, State, TTag, IV, Ciphertext string
			} `json:"attempts"`
		} `json:"documents"`
	}
	data, err := os.ReadFile(filepath.Join(filepath.Dir(s.manifest), "protect-journal.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &j); err != nil {
		t.Fatal(err)
	}
	run := j.Documents[docID]
	d, ok := m.Documents[docID]
	if !ok || run.State != "done" {
		t.Fatalf("manifest has %s: %v; journal state %q", docID, ok, run.State)
	}
	for _, f := range d.Fragments {
		var last *struct{ Fragment, DataType, State, TTag, IV, Ciphertext string }
		for i := range run.Attempts {
			if run.Attempts[i].Fragment == f.ID {
				last = &run.Attempts[i]
			}
		}
		if last == nil || last.State != "encrypted" || last.IV != f.IV || last.TTag != m.CompoundKeys[f.DataType] {
			t.Fatalf("fragment %s: journal %+v, manifest %+v", f.ID, last, f)
		}
		p, _ := m.Resolve(f.Path)
		ct, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if b64(ct) != last.Ciphertext {
			t.Fatalf("fragment %s: file differs from the journal's ciphertext", f.ID)
		}
	}
	return m
}

func TestProtectBothFixtures(t *testing.T) {
	s := newStack(t)
	keys := s.keyCount(t)
	out, stderr, ok := s.protect(t, nil, "--source", oruSource, "--document-id", "oru-0001", "--label", "Lab results (synthetic)")
	if !ok || !strings.Contains(out, "PROTECT: OK") || !strings.Contains(out, "OBX.4") || !strings.Contains(stderr, "OBX.1 (results") {
		t.Fatalf("protect ORU: %s\n%s", out, stderr)
	}
	out, stderr, ok = s.protect(t, nil, "--source", ccdSource, "--document-id", "ccd-0001")
	if !ok || !strings.Contains(out, "PROTECT: OK") {
		t.Fatalf("protect CCD: %s\n%s", out, stderr)
	}
	t.Logf("protect CCD:\n%s%s", stderr, out)
	// One key per data type across both documents: demographics and
	// results from the ORU, reused by the CCD, and four more.
	if n := s.keyCount(t) - keys; n != 6 {
		t.Fatalf("keys created: %d, want 6", n)
	}
	m := checkAgree(t, s, "ccd-0001")
	checkAgree(t, s, "oru-0001")
	if len(m.CompoundKeys) != 6 {
		t.Fatalf("compoundKeys %v", m.CompoundKeys)
	}
	recordHoldsKeys(t, s, m)
	d := m.Documents["ccd-0001"]
	if d.Fragments[1].TemplateID != "2.16.840.1.113883.10.20.22.2.6.1" || !d.IsCompound() {
		t.Fatalf("ccd %+v", d)
	}
	// The summary and progress name no t-Tag.
	for tt := range strings.SplitSeq(strings.Join(slices.Collect(mapsValues(m.CompoundKeys)), "\n"), "\n") {
		if strings.Contains(out+stderr, tt) {
			t.Fatal("protect printed a t-Tag")
		}
	}
	// Again: already protected, nothing sent.
	encrypts := s.env.Gateway.Count(api.RouteEncrypt)
	out, _, ok = s.protect(t, nil, "--source", ccdSource, "--document-id", "ccd-0001")
	if !ok || !strings.Contains(out, "already protected") || s.env.Gateway.Count(api.RouteEncrypt) != encrypts {
		t.Fatalf("rerun: %s", out)
	}
	// The same id from another source is refused.
	if out, stderr, ok := s.protect(t, nil, "--source", oruSource, "--document-id", "ccd-0001"); ok || !strings.Contains(stderr, "already in the manifest") {
		t.Fatalf("another source under a used id: %s %s", out, stderr)
	}
	// A source the table refuses touches no key.
	bad := filepath.Join(s.dir, "adt.hl7")
	os.WriteFile(bad, []byte("MSH|^~\\&|A\rEVN|A01\rPID|1\r"), 0o600)
	_, stderr, ok = s.protect(t, nil, "--source", bad, "--document-id", "adt-1")
	if ok || !strings.Contains(stderr, "EVN[1]") || !strings.Contains(stderr, "--hl7-segment EVN=") || s.env.Gateway.Count(api.RouteEncrypt) != encrypts {
		t.Fatalf("refused source: %s", stderr)
	}
	if out, stderr, ok = s.protect(t, nil, "--source", bad, "--document-id", "adt-1", "--hl7-segment", "EVN=clear"); !ok {
		t.Fatalf("extended table: %s %s", out, stderr)
	}
	if n := s.keyCount(t) - keys; n != 6 {
		t.Fatalf("keys after the ADT: %d, want still 6", n)
	}
	// --record put the created keys in the seed record: cleanup removes
	// them with the seed's own.
	if out := run(t, "seed", "--config", s.config, "--cleanup", "--seed-record", s.record()); !strings.Contains(out, "SEED CLEANUP: OK") {
		t.Fatalf("cleanup: %s", out)
	}
	if n := s.keyCount(t); n != 0 {
		t.Fatalf("%d keys left after cleanup", n)
	}
}

func mapsValues(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for _, v := range m {
			if !yield(v) {
				return
			}
		}
	}
}

// TestProtectLostAnswerNotRepeated loses the answer to the encrypt that
// creates the first key: the rerun sends nothing and says why; naming the
// way out (--abandon-lost) finishes with exactly one more key.
func TestProtectLostAnswerNotRepeated(t *testing.T) {
	s := newStack(t)
	keys := s.firstKeyLost(t, reference.Faults{LoseEncryptAnswer: 1})
	encrypts := s.env.Gateway.Count(api.RouteEncrypt)
	_, stderr, ok := s.protect(t, nil, "--source", oruSource, "--document-id", "oru-0001")
	if ok || !strings.Contains(stderr, "never sent again") || !strings.Contains(stderr, "--key demographics=") {
		t.Fatalf("rerun: %s", stderr)
	}
	if s.env.Gateway.Count(api.RouteEncrypt) != encrypts || s.keyCount(t)-keys != 1 {
		t.Fatal("the rerun sent the lost encrypt again")
	}
	if m, _ := grant.LoadManifest(s.manifest); m.Documents["oru-0001"].Version != 0 {
		t.Fatal("the manifest lists a half-protected document")
	}
	out, stderr, ok := s.protect(t, nil, "--source", oruSource, "--document-id", "oru-0001", "--abandon-lost")
	if !ok || !strings.Contains(out, "PROTECT: OK") {
		t.Fatalf("abandon-lost: %s %s", out, stderr)
	}
	if n := s.keyCount(t) - keys; n != 3 {
		t.Fatalf("keys: %d, want the lost one and two", n)
	}
	checkAgree(t, s, "oru-0001")

	// A lost answer under an existing key created nothing: the rerun
	// encrypts that section anew and no key is added.
	s.env.Gateway.SetFaults(reference.Faults{LoseEncryptAnswer: 1})
	if _, stderr, ok = s.protect(t, nil, "--source", ccdSource, "--document-id", "ccd-0001"); ok {
		t.Fatalf("expected the lost answer: %s", stderr)
	}
	if out, stderr, ok = s.protect(t, nil, "--source", ccdSource, "--document-id", "ccd-0001"); !ok {
		t.Fatalf("rerun: %s %s", out, stderr)
	}
	if n := s.keyCount(t) - keys; n != 7 {
		t.Fatalf("keys: %d, want 7", n)
	}
	checkAgree(t, s, "ccd-0001")
}

// TestProtectAnswerAfterWorkIsLost: the Gateway answers the encrypt that
// creates the demographics key 504 after the key server made it. That
// counts as lost, not as "nothing done": no rerun of that document, and no
// run of another document that needs demographics, creates a second key for
// it; the refusal names the type and the document; --abandon-lost is the
// operator's way on, and then every data type has exactly one key in the
// manifest.
func TestProtectAnswerAfterWorkIsLost(t *testing.T) {
	s := newStack(t)
	keys := s.firstKeyLost(t, reference.Faults{FailEncryptAfterWork: 1, Status: 504})
	encrypts := s.env.Gateway.Count(api.RouteEncrypt)
	// The same document again, then another that needs demographics too.
	for _, run := range []struct{ source, id string }{{oruSource, "oru-0001"}, {ccdSource, "ccd-0001"}, {oruSource, "oru-0002"}} {
		_, stderr, ok := s.protect(t, nil, "--source", run.source, "--document-id", run.id)
		if ok || !strings.Contains(stderr, "never sent again") || !strings.Contains(stderr, "data type demographics") ||
			!strings.Contains(stderr, `of "oru-0001"`) || !strings.Contains(stderr, "--abandon-lost") {
			t.Fatalf("%s after the lost answer: %s", run.id, stderr)
		}
		if s.env.Gateway.Count(api.RouteEncrypt) != encrypts || s.keyCount(t)-keys != 1 {
			t.Fatalf("%s: an encrypt was sent (%d) or a key made (%d) after the lost answer", run.id,
				s.env.Gateway.Count(api.RouteEncrypt)-encrypts, s.keyCount(t)-keys)
		}
	}
	if m, _ := grant.LoadManifest(s.manifest); m.Documents["oru-0001"].Version != 0 || m.Documents["ccd-0001"].Version != 0 || len(m.CompoundKeys) != 0 {
		t.Fatalf("the manifest lists a document or key of the refused runs: %v", m.CompoundKeys)
	}
	// The operator accepts the possible orphan for that one document's
	// run; the key it then creates serves the other document.
	if out, stderr, ok := s.protect(t, nil, "--source", oruSource, "--document-id", "oru-0001", "--abandon-lost"); !ok {
		t.Fatalf("abandon-lost: %s %s", out, stderr)
	}
	if out, stderr, ok := s.protect(t, nil, "--source", ccdSource, "--document-id", "ccd-0001"); !ok {
		t.Fatalf("ccd after abandon-lost: %s %s", out, stderr)
	}
	m := checkAgree(t, s, "ccd-0001")
	checkAgree(t, s, "oru-0001")
	// Six data types, six keys in use, one orphan the operator accepted.
	if n := s.keyCount(t) - keys; n != 7 || len(m.CompoundKeys) != 6 {
		t.Fatalf("keys %d (want the orphan and 6), compoundKeys %v", n, m.CompoundKeys)
	}
}

// TestProtectSurvivesKill kills protect at each step and reruns it: no
// second key for any type, and manifest and journal agree.
func TestProtectSurvivesKill(t *testing.T) {
	for _, point := range []string{"protect:encrypted", "protect:files-written", "protect:manifest-saved", "protect:sent"} {
		t.Run(point, func(t *testing.T) {
			s := newStack(t)
			keys := s.keyCount(t)
			if _, _, ok := s.protect(t, []string{crashEnv + "=" + point}, "--source", oruSource, "--document-id", "oru-0001"); ok {
				t.Fatal("protect was not killed")
			}
			out, stderr, ok := s.protect(t, nil, "--source", oruSource, "--document-id", "oru-0001")
			if point == "protect:sent" {
				// Killed after the journal recorded the key-creating encrypt
				// and before its answer: it counts as lost and is not sent.
				if ok || !strings.Contains(stderr, "never sent again") || s.keyCount(t) != keys {
					t.Fatalf("rerun after a kill before the answer: %s", stderr)
				}
				return
			}
			if !ok {
				t.Fatalf("rerun: %s %s", out, stderr)
			}
			if n := s.keyCount(t) - keys; n != 2 {
				t.Fatalf("keys: %d, want 2", n)
			}
			checkAgree(t, s, "oru-0001")
		})
	}
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// TestProtectNamedKey: --key puts a data type under an existing key; a
// second, different key for a type the manifest already names is refused
// before anything is sent.
func TestProtectNamedKey(t *testing.T) {
	s := newStack(t)
	ctx := context.Background()
	_, rec, owner := s.asOwner(ctx, t)
	defer owner.Revoke(ctx)
	anchor, err := owner.Encrypt(ctx, gateway.EncryptInput{Plaintext: []byte("results key")})
	if err != nil {
		t.Fatal(err)
	}
	keys := s.keyCount(t)
	out, stderr, ok := s.protect(t, nil, "--source", oruSource, "--document-id", "oru-0001", "--key", "results="+anchor.TTag)
	if !ok || !strings.Contains(out, "named") {
		t.Fatalf("protect --key: %s %s", out, stderr)
	}
	m := checkAgree(t, s, "oru-0001")
	if m.CompoundKeys["results"] != anchor.TTag || s.keyCount(t)-keys != 1 {
		t.Fatalf("results key %q, keys created %d", m.CompoundKeys["results"], s.keyCount(t)-keys)
	}
	encrypts := s.env.Gateway.Count(api.RouteEncrypt)
	_, stderr, ok = s.protect(t, nil, "--source", ccdSource, "--document-id", "ccd-0001", "--key", "results="+rec.Keys[0])
	if ok || !strings.Contains(stderr, "one key per data type") || s.env.Gateway.Count(api.RouteEncrypt) != encrypts {
		t.Fatalf("a second key for results: %s", stderr)
	}
}
