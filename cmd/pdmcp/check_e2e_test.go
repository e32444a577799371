package main

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/internal/check"
	"github.com/pdmcp/pdmcp/server/journal"
	"github.com/pdmcp/pdmcp/server/record"
)

// The operator suite of issue 32 (item 10): what an operator does to a
// task folder's journal, with `pdmcp check` to say so and `pdmcp check
// --repair` to bring back every receipted version.

// checkJSON runs `pdmcp check --json` on the stack with args and returns
// its report and exit code.
func checkJSON(t *testing.T, s *stack, args ...string) (check.Report, int) {
	t.Helper()
	cmd := pdmcpCmd(t, append([]string{"check", "--manifest", s.manifest, "--json"}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	var rep check.Report
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("check %v: exit %d, not a report: %v\nstdout: %s\nstderr: %s", args, code, err, out, stderr.String())
	}
	return rep, code
}

// findingKinds are the report's findings as "kind path", sorted.
func findingKinds(rep check.Report) []string {
	var out []string
	for _, f := range rep.Findings {
		out = append(out, f.Kind+" "+f.Path)
	}
	slices.Sort(out)
	return out
}

// backupJournal copies the journal as an operator's backup would (SQLite's
// VACUUM INTO: one consistent file, whatever the servers are doing) to a
// file of its own, and returns it.
func backupJournal(t *testing.T, s *stack) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "backup.journal.sqlite")
	db, err := sql.Open("sqlite", journal.DefaultPath(s.manifest))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`VACUUM INTO ?`, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// restoreJournal puts the backup in the journal's place, as a restore of
// the file would: a new file (mode 0600), the old one's -wal and -shm gone.
func restoreJournal(t *testing.T, s *stack, backup string) {
	t.Helper()
	removeJournal(t, s)
	b, err := os.ReadFile(backup)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(journal.DefaultPath(s.manifest), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// corruptJournal overwrites the journal's first page, as a bad copy or a
// failing disk would.
func corruptJournal(t *testing.T, s *stack) {
	t.Helper()
	f, err := os.OpenFile(journal.DefaultPath(s.manifest), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte(strings.Repeat("not a journal. ", 300)), 0); err != nil {
		t.Fatal(err)
	}
}

// receipted is one save an agent got a receipt for.
type receipted struct {
	tool    string
	args    map[string]any
	receipt map[string]any
}

// TestOperatorRestoresTheRecord: two servers save results and sections
// into one folder; then the journal is deleted, replaced by an older
// backup, or corrupted. `pdmcp check` reports it (exit 3), `pdmcp check
// --repair` brings the record back (exit 0): every receipted version is
// listed as before, its file is byte for byte what was saved, it decrypts
// to the text saved, the section is served at its newest version, a retry
// of every receipted save replays its receipt, and the next save takes the
// next version.
func TestOperatorRestoresTheRecord(t *testing.T) {
	for _, tc := range []struct {
		name string
		// damage runs while both servers are up when live, else after
		// they stopped (a checkpoint at their stop would rewrite a
		// damaged first page).
		live   bool
		damage func(t *testing.T, s *stack, backup string)
		want   []string
		// serveRefuses is what a server started on the damaged folder
		// says as it refuses to start; "" when it starts (an older
		// journal holds saves: only check tells it from the folder).
		serveRefuses string
	}{
		{"deleted", true, func(t *testing.T, s *stack, _ string) { removeJournal(t, s) },
			[]string{"journal-missing manifest.journal.sqlite"}, "pdmcp check --repair"},
		{"restored from an older copy", true, restoreJournal,
			[]string{"unrecorded documents/oru-0001/OBX.2.v3.bin", "unrecorded results/evaluation-summary.v2.bin",
				"unrecorded results/evaluation-summary.v3.bin"}, ""},
		{"corrupted", false, func(t *testing.T, s *stack, _ string) { corruptJournal(t, s) },
			[]string{"journal-damaged manifest.journal.sqlite"}, "not a database"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s := newCompoundStack(t)
			s.giveAgent(t, "results")
			a, b := s.connect(t), s.connect(t)
			var saves []receipted
			save := func(cs *mcp.ClientSession, tool string, args map[string]any) {
				t.Helper()
				m, isErr := call(t, cs, tool, args)
				if isErr {
					t.Fatalf("%s: %v", tool, m)
				}
				saves = append(saves, receipted{tool, args, m})
			}
			section := func(text, key string) map[string]any {
				return map[string]any{"documentId": "oru-0001", "fragmentId": "OBX.2", "text": text, "idempotencyKey": key}
			}
			save(a, "save_protected_result", saveArgs("evaluation-summary", "first summary", "r-1"))
			save(b, "save_protected_fragment", section("OBX|2|NM|2085-9^HDL cholesterol^LN||58|mg/dL|>40|N|||F", "f-1"))
			backup := backupJournal(t, s)
			save(b, "save_protected_result", saveArgs("evaluation-summary", "second summary", "r-2"))
			save(a, "save_protected_fragment", section("OBX|2|NM|2085-9^HDL cholesterol^LN||61|mg/dL|>40|N|||F", "f-2"))
			save(a, "save_protected_result", saveArgs("evaluation-summary", "third summary", "r-3"))
			before := versionsOf(t, s)
			dir := filepath.Dir(s.manifest)
			files := map[string][]byte{}
			for _, e := range before {
				if e.Source == record.SourceRecord {
					b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(e.Path)))
					if err != nil {
						t.Fatal(err)
					}
					files[e.Path] = b
				}
			}
			if len(files) != len(saves) {
				t.Fatalf("%d versions in the record for %d receipts", len(files), len(saves))
			}

			if tc.live {
				tc.damage(t, s, backup)
				// A running server takes no save on a journal that is no
				// longer the one it opened.
				m, isErr := call(t, a, "save_protected_result", saveArgs("evaluation-summary", "lost summary", "r-lost"))
				if !isErr || m["code"] != "RECORD_UNAVAILABLE" {
					t.Fatalf("a save after the journal was %s: %v", tc.name, m)
				}
			}
			_ = a.Close()
			_ = b.Close()
			if !tc.live {
				tc.damage(t, s, backup)
			}
			if tc.serveRefuses != "" {
				// serve's standard input is empty: on a good journal it
				// would serve until that ends, at once.
				cmd := s.serveCmd(t)
				var stderr strings.Builder
				cmd.Stderr = &stderr
				if err := cmd.Run(); err == nil || !strings.Contains(stderr.String(), tc.serveRefuses) {
					t.Fatalf("serve on the damaged folder: %v, want a refusal naming %q:\n%s", err, tc.serveRefuses, stderr.String())
				}
			}

			rep, code := checkJSON(t, s)
			if code != 3 || rep.OK || !slices.Equal(findingKinds(rep), tc.want) {
				t.Fatalf("check: exit %d, findings %v, want %v\n%+v", code, findingKinds(rep), tc.want, rep.Findings)
			}
			for _, f := range rep.Findings {
				if !f.Repairable {
					t.Errorf("%s %s is not repairable", f.Kind, f.Path)
				}
			}
			rep, code = checkJSON(t, s, "--repair")
			if code != 0 || !rep.OK || len(rep.Repaired) == 0 {
				t.Fatalf("check --repair: exit %d, %+v", code, rep)
			}
			if rep, code = checkJSON(t, s); code != 0 || !rep.OK {
				t.Fatalf("check after the repair: exit %d, %+v", code, rep)
			}

			if after := versionsOf(t, s); !slices.Equal(after, before) {
				t.Fatalf("versions after the repair\n got %+v\nwant %+v", after, before)
			}
			var keys []string
			for _, e := range before {
				if e.Source == record.SourceRecord && !slices.Contains(keys, e.TTag) {
					keys = append(keys, e.TTag)
				}
			}
			_, _, owner := s.asOwner(ctx, t, keys...)
			defer owner.Revoke(ctx)
			// The text each receipt's version was saved from, by the
			// version's kind, target and number.
			texts := map[string]string{}
			for _, r := range saves {
				id := fmt.Sprint(r.receipt["destinationId"])
				if r.tool == "save_protected_fragment" {
					id = fmt.Sprint(r.args["documentId"], "/", r.args["fragmentId"])
				}
				texts[fmt.Sprint(id, " v", r.receipt["version"])] = r.args["text"].(string)
			}
			versionID := func(e record.Entry) string {
				if e.Kind == record.KindResult {
					return fmt.Sprint(e.Destination, " v", e.Version)
				}
				return fmt.Sprint(e.DocumentID, "/", e.FragmentID, " v", e.Version)
			}
			if len(texts) != len(saves) {
				t.Fatalf("receipts name %d versions for %d saves", len(texts), len(saves))
			}
			for _, e := range before {
				if e.Source != record.SourceRecord {
					continue
				}
				ct, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(e.Path)))
				if err != nil || string(ct) != string(files[e.Path]) {
					t.Fatalf("%s changed: %v", e.Path, err)
				}
				iv, err := base64.StdEncoding.DecodeString(e.IV)
				if err != nil {
					t.Fatal(err)
				}
				want, ok := texts[versionID(e)]
				if !ok {
					t.Fatalf("%s (%s) is no receipt's version", e.Path, versionID(e))
				}
				plain, err := owner.Decrypt(ctx, e.TTag, iv, ct)
				if err != nil || string(plain) != want {
					t.Fatalf("%s decrypts to %q (%v), want %q", e.Path, plain, err, want)
				}
			}

			c := s.connect(t)
			got, isErr := call(t, c, "read_protected_fragment", map[string]any{"documentId": "oru-0001", "fragmentId": "OBX.2"})
			if isErr || got["text"] != saves[3].args["text"] || got["provenance"].(map[string]any)["version"] != saves[3].receipt["version"] {
				t.Fatalf("the section after the repair: %v, want version %v", got, saves[3].receipt["version"])
			}
			for _, r := range saves {
				m, isErr := call(t, c, r.tool, r.args)
				if isErr || m["replayed"] != true || m["version"] != r.receipt["version"] ||
					m["documentVersion"] != r.receipt["documentVersion"] || m["sha256"] != r.receipt["sha256"] ||
					m["savedAt"] != r.receipt["savedAt"] {
					t.Fatalf("retry of %v: %v, want a replay of %v", r.args["idempotencyKey"], m, r.receipt)
				}
			}
			m, isErr := call(t, c, "save_protected_result", saveArgs("evaluation-summary", "fourth summary", "r-4"))
			if isErr || m["version"] != float64(4) {
				t.Fatalf("the next save after the repair: %v", m)
			}
			checkSidecars(t, s)
		})
	}
}

// TestCheckAfterAKillAtEachStep is the kill-between-steps suite seen by
// the operator: a server killed at each step of a result save and of a
// section save leaves what `pdmcp check` either finds in order (a save in
// progress is a note, not a finding) or repairs (a temporary file); after
// the repair the check is clean, the save's retry finishes it, and the
// check is clean again with nothing in progress.
func TestCheckAfterAKillAtEachStep(t *testing.T) {
	type point struct {
		name, tool string
		args       map[string]any
	}
	var points []point
	for _, p := range savePoints {
		if p == "save:placed" {
			continue // a placement past a stray file: the stray is the operator's (unknown-file)
		}
		points = append(points, point{p, "save_protected_result", saveArgs("evaluation-summary", "Cirrus: best quality.", "k-1")})
	}
	for _, p := range fragmentPoints {
		if p == "fragment:placed" {
			continue
		}
		points = append(points, point{p, "save_protected_fragment", map[string]any{"documentId": "oru-0001", "fragmentId": "OBX.2",
			"text": "OBX|2|NM|2085-9^HDL cholesterol^LN||58|mg/dL|>40|N|||F", "idempotencyKey": "k-1"}})
	}
	for _, p := range points {
		t.Run(p.name, func(t *testing.T) {
			var s *stack
			if p.tool == "save_protected_fragment" {
				s = newCompoundStack(t)
				s.giveAgent(t, "results")
			} else {
				s = newStack(t)
			}
			s.callDies(t, p.name, p.tool, p.args)
			rep, code := checkJSON(t, s)
			// What each step leaves: the save's temporary file from its
			// creation until it is removed after the commit; a save in
			// progress (a note) from its sidecar until its commit.
			step := p.name[strings.Index(p.name, ":")+1:]
			wantTemp := slices.Contains([]string{"file-created", "file-written", "linked", "committed"}, step)
			wantNote := slices.Contains([]string{"sidecar-written", "file-created", "file-written", "linked"}, step)
			wantFindings := 0
			if wantTemp {
				wantFindings = 1
			}
			if len(rep.Findings) != wantFindings {
				t.Fatalf("after the kill: findings %v, want a temporary file: %v", findingKinds(rep), wantTemp)
			}
			for _, f := range rep.Findings {
				if f.Kind != check.KindTemporary || !f.Repairable {
					t.Errorf("after the kill: finding %+v", f)
				}
			}
			if got := len(rep.Notes) == 1 && rep.Notes[0].Kind == check.KindSaveUnfinished; got != wantNote || len(rep.Notes) > 1 {
				t.Fatalf("after the kill: notes %+v, want a save in progress: %v", rep.Notes, wantNote)
			}
			if (code == 0) != rep.OK || rep.OK == wantTemp {
				t.Fatalf("exit %d with OK %v", code, rep.OK)
			}
			if rep, code = checkJSON(t, s, "--repair"); code != 0 || !rep.OK {
				t.Fatalf("check --repair: exit %d, %+v", code, rep)
			}
			cs := s.connect(t)
			if m, isErr := call(t, cs, p.tool, p.args); isErr {
				t.Fatalf("retry: %v", m)
			}
			if rep, code = checkJSON(t, s); code != 0 || !rep.OK || len(rep.Notes) != 0 {
				t.Fatalf("check after the retry: exit %d, %+v", code, rep)
			}
			checkSidecars(t, s)
		})
	}
}

// TestCheckCommandLine: exit 2 and a message naming the path for a
// --journal that is not there (for check, versions and export-manifest),
// and for a missing --manifest; the human output ends with its summary.
func TestCheckCommandLine(t *testing.T) {
	s := newStack(t)
	typo := filepath.Join(filepath.Dir(s.manifest), "manifest.jornal.sqlite")
	for _, args := range [][]string{
		{"check", "--manifest", s.manifest, "--journal", typo},
		{"versions", "--manifest", s.manifest, "--journal", typo},
		{"export-manifest", "--manifest", s.manifest, "--journal", typo, "--out", filepath.Join(t.TempDir(), "x.json")},
		{"check"},
		{"check", "--manifest", s.manifest, "--no-such-flag"},
	} {
		cmd := pdmcpCmd(t, args...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Errorf("pdmcp %v: %v, want exit 2\n%s", args, err, out)
		}
		if slices.Contains(args, typo) && !strings.Contains(string(out), typo) {
			t.Errorf("pdmcp %v does not name %s:\n%s", args, typo, out)
		}
	}
	if _, err := os.Stat(typo); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a mistyped journal was created")
	}
	out := run(t, "check", "--manifest", s.manifest)
	if !strings.HasSuffix(strings.TrimSpace(out), "CHECK: OK (folder, record and manifest agree)") {
		t.Fatalf("check on a new task:\n%s", out)
	}
	// A stopped save's temporary file: one line under its group, the
	// summary, exit 3; --repair says what it removed and exits 0.
	temp := "results/.pdmcp-save-00112233445566778899aabb.tmp"
	if err := os.MkdirAll(filepath.Join(filepath.Dir(s.manifest), "results"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(filepath.Dir(s.manifest), filepath.FromSlash(temp)), []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := pdmcpCmd(t, "check", "--manifest", s.manifest).Output()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 ||
		!strings.Contains(string(b), "leftovers:\n  temporary "+temp+" [repairable]: ") ||
		!strings.HasSuffix(strings.TrimSpace(string(b)), "CHECK: 1 findings (1 repairable with --repair)") {
		t.Fatalf("check with a leftover: %v\n%s", err, b)
	}
	out = run(t, "check", "--manifest", s.manifest, "--repair")
	if !strings.Contains(out, "repaired: removed "+temp+": ") || !strings.HasSuffix(strings.TrimSpace(out), "CHECK: OK (folder, record and manifest agree)") {
		t.Fatalf("check --repair:\n%s", out)
	}
}

// TestCheckAsksTheKeyServer: with --config, check asks the Gateway as
// the keys' owner whether each recorded key still exists: all there is
// exit 0; once the destination's key is removed, key-gone names a version
// under it (the key by its first characters only) and exit 3; with the
// Gateway gone, exit 4.
func TestCheckAsksTheKeyServer(t *testing.T) {
	ctx := context.Background()
	s := newStack(t)
	cs := s.connect(t)
	if m, isErr := call(t, cs, "save_protected_result", saveArgs("evaluation-summary", "a summary", "k-1")); isErr {
		t.Fatalf("save: %v", m)
	}
	_ = cs.Close()
	if rep, code := checkJSON(t, s, "--config", s.config); code != 0 || !rep.OK {
		t.Fatalf("check with every key there: exit %d, %+v", code, rep)
	}
	var ttag string
	for _, e := range versionsOf(t, s) {
		if e.Source == record.SourceRecord {
			ttag = e.TTag
		}
	}
	_, _, owner := s.asOwner(ctx, t, ttag)
	if err := owner.RemoveKey(ctx, ttag); err != nil {
		t.Fatal(err)
	}
	_ = owner.Revoke(ctx)
	rep, code := checkJSON(t, s, "--config", s.config)
	if code != 3 || !slices.Equal(findingKinds(rep), []string{"key-gone results/evaluation-summary.v1.bin"}) {
		t.Fatalf("check after the key was removed: exit %d, %+v", code, rep)
	}
	if strings.Contains(rep.Findings[0].Detail, ttag) {
		t.Fatalf("the finding names the key in full: %s", rep.Findings[0].Detail)
	}

	// With the Gateway gone the keys cannot be asked about: exit 4 and
	// words that say so, no report (nothing was judged), not a finding.
	url := s.env.URL
	s.env.Server.Close()
	cmd := pdmcpCmd(t, "check", "--manifest", s.manifest, "--config", s.config, "--json")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitUnreachable || len(out) != 0 ||
		!strings.Contains(stderr.String(), "pdmcp check: the Gateway at "+url+" did not answer: ") || strings.Contains(stderr.String(), "gateway refused") {
		t.Fatalf("check with the Gateway gone: %v, want exit %d, no report, and words\nstdout: %s\nstderr: %s", err, exitUnreachable, out, stderr.String())
	}
}

// TestRepairWhileTwoServersSave: `pdmcp check --repair`, run again and
// again while two servers save to one destination, holds the savers'
// locks while it looks, so it never finds a half-made save to repair: each
// run exits 0, repairs nothing, and afterwards every receipt's version is
// in the record exactly once with its sidecar.
func TestRepairWhileTwoServersSave(t *testing.T) {
	s := newStack(t)
	const rounds = 6
	var (
		mu       sync.Mutex
		receipts = map[int]int{} // version -> receipts naming it
		wg       sync.WaitGroup
		done     atomic.Bool
	)
	for _, name := range []string{"a", "b"} {
		cs := s.connect(t)
		wg.Go(func() {
			for i := range rounds {
				args := saveArgs("evaluation-summary", fmt.Sprintf("%s %d", name, i), fmt.Sprintf("%s-%d", name, i))
				var res *mcp.CallToolResult
				var err error
				// DESTINATION_BUSY (a lock not free within the server's
				// bound) is retryable: the same call again.
				for range 5 {
					res, err = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "save_protected_result", Arguments: args})
					if err != nil || !res.IsError {
						break
					}
					if sc, _ := res.StructuredContent.(map[string]any); sc["code"] != "DESTINATION_BUSY" {
						break
					}
				}
				if err != nil || res.IsError {
					t.Errorf("%s: save %d: %v %+v", name, i, err, res)
					return
				}
				v := int(res.StructuredContent.(map[string]any)["version"].(float64))
				mu.Lock()
				receipts[v]++
				mu.Unlock()
			}
		})
	}
	go func() { wg.Wait(); done.Store(true) }()
	runs := 0
	for !done.Load() || runs == 0 {
		rep, code := checkJSON(t, s, "--repair")
		if code != 0 || !rep.OK || len(rep.Repaired) != 0 {
			t.Fatalf("check --repair during the saves: exit %d, %+v", code, rep)
		}
		runs++
	}
	wg.Wait()
	t.Logf("%d repairs during %d saves", runs, 2*rounds)
	if rep, code := checkJSON(t, s); code != 0 || !rep.OK || len(rep.Notes) != 0 {
		t.Fatalf("check after the saves: exit %d, %+v", code, rep)
	}
	got := resultVersions(t, s, "evaluation-summary")
	if len(got) != 2*rounds || len(receipts) != 2*rounds {
		t.Fatalf("record %v, receipts %v", got, receipts)
	}
	for _, v := range got {
		if receipts[v] != 1 {
			t.Errorf("version %d has %d receipts", v, receipts[v])
		}
	}
	checkSidecars(t, s)
}
