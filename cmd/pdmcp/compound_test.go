package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/grant"
)

// compoundStack is a stack with both synthetic compound documents
// protected and a grant that names the section tools.
func newCompoundStack(t *testing.T) *stack {
	t.Helper()
	s := newStack(t)
	for _, p := range [][2]string{{oruSource, "oru-0001"}, {ccdSource, "ccd-0001"}} {
		if out, stderr, ok := s.protect(t, nil, "--source", p[0], "--document-id", p[1]); !ok {
			t.Fatalf("protect %s: %s %s", p[1], out, stderr)
		}
	}
	s.grant = filepath.Join(filepath.Dir(s.manifest), "grant-compound.json")
	run(t, "grant", "--manifest", s.manifest, "--all-approved", "--ttl", "15m", "--out", s.grant,
		"--tools", strings.Join(append(grant.DocumentTools(), grant.FragmentTools()...), ","))
	return s
}

// giveAgent grants the seed's agent READ on the keys of the given data types,
// as the keys' owner.
func (s *stack) giveAgent(t *testing.T, types ...string) {
	t.Helper()
	ctx := context.Background()
	m, err := grant.LoadManifest(s.manifest)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, dt := range types {
		keys = append(keys, m.CompoundKeys[dt])
	}
	c, rec, owner := s.asOwner(ctx, t, keys...)
	defer owner.Revoke(ctx)
	agent, err := c.GetPrincipal(ctx, rec.AgentUser)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if err := owner.ACLGrant(ctx, api.ACLGrantRequest{TTag: k, SystemID: agent.SystemID, PrincipalID: agent.PrincipalID,
			Rights: []string{api.RightRead}}); err != nil {
			t.Fatal(err)
		}
	}
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestStdioCompoundMixedView: a user with only the results key reads both
// compound documents as mixed views (results in plaintext, a placeholder
// refused ACL_DENIED by the key server elsewhere); with every key, the
// read returns the source's exact bytes.
func TestStdioCompoundMixedView(t *testing.T) {
	s := newCompoundStack(t)
	s.giveAgent(t, "results")
	ccd, _ := os.ReadFile(ccdSource)
	oru, _ := os.ReadFile(oruSource)
	cs := s.connect(t)

	list, isErr := call(t, cs, "list_approved_documents", map[string]any{})
	if isErr {
		t.Fatal(list)
	}
	var found bool
	for _, d := range list["documents"].([]any) {
		d := d.(map[string]any)
		if d["documentId"] != "ccd-0001" {
			continue
		}
		found = true
		frags, _ := d["fragments"].([]any)
		if d["kind"] != "compound" || len(frags) != 6 {
			t.Fatalf("listed %v", d)
		}
		for _, f := range frags {
			f := f.(map[string]any)
			if len(f) != 3 || f["fragmentId"] == nil || f["dataType"] == nil || f["label"] == nil {
				t.Fatalf("a fragment lists more or less than id, label, data type: %v", f)
			}
		}
	}
	if !found {
		t.Fatal("ccd-0001 not listed")
	}

	got, isErr := call(t, cs, "read_protected_document", map[string]any{"documentId": "ccd-0001"})
	if isErr || got["complete"] != false || got["untrusted"] != true {
		t.Fatalf("mixed view: %v", got)
	}
	text := got["text"].(string)
	if got["provenance"].(map[string]any)["sha256"] != sha([]byte(text)) || int(got["size"].(float64)) != len(text) {
		t.Fatalf("the mixed view's sha256 or size is not the returned text's: %v", got["provenance"])
	}
	if !strings.Contains(text, "LDL cholesterol") || strings.Contains(text, "Penicillin") || strings.Contains(text, "Zoë") {
		t.Fatalf("mixed view text:\n%s", text)
	}
	if !strings.Contains(text, "<!-- pdmcp: fragment allergies (allergies) withheld: keyserver ACL_DENIED -->") {
		t.Fatalf("no placeholder for allergies:\n%s", text)
	}
	for _, o := range got["sections"].([]any) {
		o := o.(map[string]any)
		if o["dataType"] == "results" {
			if o["outcome"] != "opened" {
				t.Fatalf("results: %v", o)
			}
		} else if o["outcome"] != "withheld" || o["layer"] != "keyserver" || o["code"] != "ACL_DENIED" {
			t.Fatalf("section %v", o)
		}
	}
	got, _ = call(t, cs, "read_protected_document", map[string]any{"documentId": "oru-0001"})
	text = got["text"].(string)
	if !strings.Contains(text, "\rZPF|PID.1|demographics|keyserver|ACL_DENIED\r") || !strings.Contains(text, "OBX|4|NM|4548-4") || strings.Contains(text, "ÅNGSTRÖM") {
		t.Fatalf("ORU mixed view: %q", text)
	}

	// The section tools: the key server's refusal is the call's.
	got, isErr = call(t, cs, "read_protected_fragment", map[string]any{"documentId": "ccd-0001", "fragmentId": "results"})
	if isErr || !strings.Contains(got["text"].(string), "Hemoglobin A1c") || got["provenance"].(map[string]any)["fragmentId"] != "results" {
		t.Fatalf("read results: %v", got)
	}
	got, isErr = call(t, cs, "read_protected_fragment", map[string]any{"documentId": "ccd-0001", "fragmentId": "allergies"})
	wantRefused(t, got, isErr, "keyserver", "ACL_DENIED")
	got, isErr = call(t, cs, "save_protected_fragment", map[string]any{"documentId": "ccd-0001", "fragmentId": "allergies",
		"text": "<section/>", "idempotencyKey": "a-1"})
	wantRefused(t, got, isErr, "keyserver", "ACL_DENIED")
	// Adapter refusals send nothing.
	s.quiet(t, "NOT_COMPOUND and UNKNOWN_FRAGMENT", func() {
		got, isErr = call(t, cs, "read_protected_fragment", map[string]any{"documentId": "proposal-aurora", "fragmentId": "x"})
		wantRefused(t, got, isErr, "adapter", "NOT_COMPOUND")
		got, isErr = call(t, cs, "read_protected_fragment", map[string]any{"documentId": "ccd-0001", "fragmentId": "social"})
		wantRefused(t, got, isErr, "adapter", "UNKNOWN_FRAGMENT")
		got, isErr = call(t, cs, "save_protected_fragment", map[string]any{"documentId": "ccd-0001", "fragmentId": "results",
			"text": strings.Repeat("x", 65537), "idempotencyKey": "big"})
		wantRefused(t, got, isErr, "adapter", "RESULT_TOO_LARGE")
		got, isErr = call(t, cs, "read_protected_fragment", map[string]any{"documentId": "ccd-0001", "fragmentId": "results", "path": "x"})
		wantRefused(t, got, isErr, "adapter", "UNEXPECTED_ARGUMENT")
	})
	// Section text that would change the document's structure: refused
	// before anything is sent, even for a section the key server would
	// let this user save.
	s.quiet(t, "INVALID_FRAGMENT_TEXT", func() {
		for _, bad := range []struct{ doc, frag, text string }{
			{"oru-0001", "OBX.2", "OBX|2|NM|2085-9^HDL cholesterol^LN||58|mg/dL|>40|N|||F\rPID|2||PAT-999^^^SYN^MR"},
			{"oru-0001", "OBX.2", "OBX|2|NM|x||1\nZZZ|1|smuggled"},
			{"oru-0001", "OBX.2", "PID|1||PAT-999"},
			{"ccd-0001", "results", `<section><text>x</text></section></component><component><section><code code="29762-2"/></section>`},
			{"ccd-0001", "results", `<section><text>x</text>`},
		} {
			got, isErr = call(t, cs, "save_protected_fragment", map[string]any{"documentId": bad.doc, "fragmentId": bad.frag,
				"text": bad.text, "idempotencyKey": "bad-" + bad.frag})
			wantRefused(t, got, isErr, "adapter", "INVALID_FRAGMENT_TEXT")
			if d, _ := got["detail"].(string); strings.Contains(d, "PAT-999") || strings.Contains(d, "smuggled") {
				t.Fatalf("the refusal echoes the text: %v", d)
			}
		}
	})

	// Every key: the original bytes.
	s.giveAgent(t, "demographics", "allergies", "medications", "problems", "vitals")
	for id, src := range map[string][]byte{"ccd-0001": ccd, "oru-0001": oru} {
		got, isErr = call(t, cs, "read_protected_document", map[string]any{"documentId": id})
		if isErr || got["complete"] != true || got["text"] != string(src) || got["provenance"].(map[string]any)["sha256"] != sha(src) {
			t.Fatalf("%s with every key: complete %v, equal %v", id, got["complete"], got["text"] == string(src))
		}
	}

	// A save: the section's next version, the document's version up.
	newText := `<section><code code="30954-2" codeSystem="2.16.840.1.113883.6.1"/><text>HbA1c 6.5 % (2026-05-20)</text></section>`
	args := map[string]any{"documentId": "ccd-0001", "fragmentId": "results", "text": newText, "idempotencyKey": "r-1"}
	first, isErr := call(t, cs, "save_protected_fragment", args)
	if isErr || first["version"] != float64(2) || first["documentVersion"] != float64(2) || first["replayed"] != false {
		t.Fatalf("save: %v", first)
	}
	again, _ := call(t, cs, "save_protected_fragment", args)
	if again["replayed"] != true || again["savedAt"] != first["savedAt"] || again["documentVersion"] != float64(2) {
		t.Fatalf("replay: %v", again)
	}
	// A second section's save: that section's version 2, the document's 3;
	// the list and the mixed view name the same document version.
	second, isErr := call(t, cs, "save_protected_fragment", map[string]any{"documentId": "ccd-0001", "fragmentId": "vitals",
		"text": string(sectionOf(t, ccd, "8716-3")), "idempotencyKey": "v-1"})
	if isErr || second["version"] != float64(2) || second["documentVersion"] != float64(3) {
		t.Fatalf("second save: %v", second)
	}
	list, _ = call(t, cs, "list_approved_documents", map[string]any{})
	for _, d := range list["documents"].([]any) {
		if d := d.(map[string]any); d["documentId"] == "ccd-0001" && d["version"] != second["documentVersion"] {
			t.Fatalf("listed version %v, receipt's documentVersion %v", d["version"], second["documentVersion"])
		}
	}
	args["text"] = strings.Replace(newText, "6.5", "6.6", 1)
	got, isErr = call(t, cs, "save_protected_fragment", args)
	wantRefused(t, got, isErr, "adapter", "IDEMPOTENCY_CONFLICT")
	got, _ = call(t, cs, "read_protected_document", map[string]any{"documentId": "ccd-0001"})
	want := bytes.Replace(ccd, sectionOf(t, ccd, "30954-2"), []byte(newText), 1)
	if got["text"] != string(want) || got["provenance"].(map[string]any)["version"] != second["documentVersion"] {
		t.Fatalf("after the save: version %v, equal %v", got["provenance"], got["text"] == string(want))
	}
	_ = cs.Close()

	b, _ := os.ReadFile(s.audit)
	if bytes.Contains(b, []byte("Hemoglobin")) || bytes.Contains(b, []byte("HbA1c")) {
		t.Fatal("the audit holds section text")
	}
	if !bytes.Contains(b, []byte(`{"id":"allergies","outcome":"refused","layer":"keyserver","code":"ACL_DENIED"`)) ||
		!bytes.Contains(b, []byte(`{"id":"results","outcome":"ok"`)) {
		t.Fatalf("the audit does not record each section's outcome:\n%s", b)
	}
	// Each section's time: its own start, within its call's.
	var timed int
	for _, l := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var m struct {
			StartedAt time.Time `json:"startedAt"`
			LatencyMs int64     `json:"latencyMs"`
			Sections  []struct {
				ID        string     `json:"id"`
				StartedAt *time.Time `json:"startedAt"`
			} `json:"sections"`
		}
		_ = json.Unmarshal(l, &m)
		for _, sec := range m.Sections {
			end := m.StartedAt.Add(time.Duration(m.LatencyMs+1) * time.Millisecond)
			if sec.StartedAt == nil || sec.StartedAt.Before(m.StartedAt) || sec.StartedAt.After(end) {
				t.Fatalf("section %s's time %v is not within its call's %v + %dms", sec.ID, sec.StartedAt, m.StartedAt, m.LatencyMs)
			}
			timed++
		}
	}
	if timed == 0 {
		t.Fatal("no section carries its time")
	}
	// Each save line names the version written; the replay, the same.
	var saved []float64
	for _, l := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var m map[string]any
		_ = json.Unmarshal(l, &m)
		if m["tool"] == "save_protected_fragment" && m["outcome"] == "ok" {
			v, _ := m["version"].(float64)
			saved = append(saved, v)
		}
	}
	// results v2, its replay, vitals v2: a save line names the section's version.
	if !slices.Equal(saved, []float64{2, 2, 2}) {
		t.Fatalf("save lines name versions %v, want [2 2 2]", saved)
	}
}

// sectionOf returns the <section> element with the given code in src.
func sectionOf(t *testing.T, src []byte, code string) []byte {
	t.Helper()
	i := bytes.Index(src, []byte(`<code code="`+code+`"`))
	start := bytes.LastIndex(src[:i], []byte("<section>"))
	end := bytes.Index(src[i:], []byte("</section>")) + i + len("</section>")
	return src[start:end]
}

// TestSaveFragmentSurvivesKill kills the server at each step of a section
// save and retries it: one receipt, one Gateway encrypt, one new file, no
// temporary one, and a merged manifest (export-manifest) whose section and
// document are one version up.
func TestSaveFragmentSurvivesKill(t *testing.T) {
	for _, point := range fragmentPoints {
		t.Run(point, func(t *testing.T) {
			s := newCompoundStack(t)
			s.giveAgent(t, "results")
			args := map[string]any{"documentId": "oru-0001", "fragmentId": "OBX.2", "text": "OBX|2|NM|2085-9^HDL cholesterol^LN||58|mg/dL|>40|N|||F", "idempotencyKey": "k-1"}
			// A save places again only past a stray file: one is at v2.
			want, files := 2, 2
			if point == "fragment:placed" {
				putStray(t, s, "documents/oru-0001/OBX.2.v2.bin")
				want, files = 3, 3
			}
			cs, first, again := s.retryAfterKill(t, point, "save_protected_fragment", args)
			if first["version"] != float64(want) || first["documentVersion"] != float64(2) || again["documentVersion"] != float64(2) {
				t.Fatalf("retry %v, second retry %v; want section v%d in document v2", first, again, want)
			}
			dir := filepath.Join(filepath.Dir(s.manifest), "documents", "oru-0001")
			if got, _ := filepath.Glob(filepath.Join(dir, "OBX.2.v*.bin")); len(got) != files {
				t.Errorf("section files %v, want %d", got, files)
			}
			if tmp, _ := filepath.Glob(filepath.Join(dir, ".*")); len(tmp) != 0 {
				t.Errorf("temporary files left: %v", tmp)
			}
			checkSidecars(t, s)
			out := filepath.Join(t.TempDir(), "merged.json")
			run(t, "export-manifest", "--manifest", s.manifest, "--out", out)
			m, err := grant.LoadManifest(out)
			if err != nil {
				t.Fatal(err)
			}
			d := m.Documents["oru-0001"]
			f, _ := d.Fragment("OBX.2")
			if f.Version != want || d.Version != 2 || f.Path != fmt.Sprintf("documents/oru-0001/OBX.2.v%d.bin", want) {
				t.Fatalf("manifest: document v%d, section %+v", d.Version, f)
			}
			got, _ := call(t, cs, "read_protected_fragment", map[string]any{"documentId": "oru-0001", "fragmentId": "OBX.2"})
			if got["text"] != args["text"] {
				t.Fatalf("read back %v", got["text"])
			}
		})
	}
}

func mcpCall(name string, args map[string]any) *mcp.CallToolParams {
	return &mcp.CallToolParams{Name: name, Arguments: args}
}

// TestStdioCompoundAdapterRefusals: what the manifest does not vouch for is
// never returned, and the checks before any decrypt send nothing.
func TestStdioCompoundAdapterRefusals(t *testing.T) {
	s := newCompoundStack(t)
	s.giveAgent(t, "results", "demographics")
	m, err := grant.LoadManifest(s.manifest)
	if err != nil {
		t.Fatal(err)
	}
	// A section whose plaintext no longer matches the manifest.
	ccd := m.Documents["ccd-0001"]
	for i := range ccd.Fragments {
		if ccd.Fragments[i].ID == "results" {
			ccd.Fragments[i].SHA256 = strings.Repeat("0", 64)
		}
	}
	m.Documents["ccd-0001"] = ccd
	// A section too large for one read.
	oru := m.Documents["oru-0001"]
	oru.Fragments[0].Size = 70000
	m.Documents["oru-0001"] = oru
	if err := m.Save(s.manifest); err != nil {
		t.Fatal(err)
	}
	cs := s.connect(t)

	got, isErr := call(t, cs, "read_protected_document", map[string]any{"documentId": "ccd-0001"})
	if isErr || got["complete"] != false || strings.Contains(got["text"].(string), "LDL cholesterol") ||
		!strings.Contains(got["text"].(string), "fragment results (results) withheld: adapter INTEGRITY_MISMATCH") {
		t.Fatalf("tampered section: %v", got)
	}
	got, isErr = call(t, cs, "read_protected_fragment", map[string]any{"documentId": "ccd-0001", "fragmentId": "results"})
	wantRefused(t, got, isErr, "adapter", "INTEGRITY_MISMATCH")
	s.quiet(t, "an oversized compound read", func() {
		got, isErr = call(t, cs, "read_protected_document", map[string]any{"documentId": "oru-0001"})
		wantRefused(t, got, isErr, "adapter", "RESULT_TOO_LARGE")
	})
	// A skeleton changed on disk.
	sk := filepath.Join(filepath.Dir(s.manifest), filepath.FromSlash(ccd.Skeleton))
	b, _ := os.ReadFile(sk)
	if err := os.WriteFile(sk, append(b, ' '), 0o600); err != nil {
		t.Fatal(err)
	}
	s.quiet(t, "a tampered skeleton", func() {
		got, isErr = call(t, cs, "read_protected_document", map[string]any{"documentId": "ccd-0001"})
		wantRefused(t, got, isErr, "adapter", "INTEGRITY_MISMATCH")
		got, isErr = call(t, cs, "save_protected_fragment", map[string]any{"documentId": "ccd-0001", "fragmentId": "demographics",
			"text": "<recordTarget/>", "idempotencyKey": "t-1"})
		wantRefused(t, got, isErr, "adapter", "INTEGRITY_MISMATCH")
	})
}
