package main

import (
	"regexp"
	"strconv"
	"testing"

	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/server"
)

// byteCounts are the numbers a refusal's detail states, other than those
// inside a document or fragment id (ccd-0001).
var byteCounts = regexp.MustCompile(`(?:^|[^\w-])(\d+)`)

// TestStdioCompoundSizeNotShown: nothing a user is shown lets them work out
// the length of a section withheld from them. list_approved_documents gives
// a compound document no size (a single document keeps its size), the
// mixed view's size is that of the text returned, and the RESULT_TOO_LARGE
// refusals of the section tools name no length but the limit: today's
// document length less the mixed view's would be the withheld sections'.
func TestStdioCompoundSizeNotShown(t *testing.T) {
	s := newCompoundStack(t)
	s.giveAgent(t, "results")
	cs := s.connect(t)

	list, isErr := call(t, cs, "list_approved_documents", map[string]any{})
	if isErr {
		t.Fatal(list)
	}
	singles := 0
	for _, d := range list["documents"].([]any) {
		d := d.(map[string]any)
		_, hasSize := d["size"]
		switch {
		case d["kind"] == "compound" && hasSize:
			t.Errorf("compound document %v listed with a size", d["documentId"])
		case d["kind"] != "compound" && !hasSize:
			t.Errorf("single document %v listed without its size", d["documentId"])
		case d["kind"] != "compound":
			singles++
		}
	}
	if singles == 0 {
		t.Fatal("no single document listed; the test needs one")
	}
	got, isErr := call(t, cs, "read_protected_document", map[string]any{"documentId": "ccd-0001"})
	if isErr || got["complete"] != false || int(got["size"].(float64)) != len(got["text"].(string)) {
		t.Fatalf("mixed view: complete %v, size %v for %d bytes of text", got["complete"], got["size"], len(got["text"].(string)))
	}

	// Grow a withheld section in the manifest past one read, and the
	// whole of the other document.
	m, err := grant.LoadManifest(s.manifest)
	if err != nil {
		t.Fatal(err)
	}
	ccd := m.Documents["ccd-0001"]
	withheld := ""
	for i, f := range ccd.Fragments {
		if f.DataType != "results" && withheld == "" {
			withheld = f.ID
			ccd.Fragments[i].Size += 70001
		}
	}
	m.Documents["ccd-0001"] = ccd
	oru := m.Documents["oru-0001"]
	oru.Size = 70003
	m.Documents["oru-0001"] = oru
	if err := m.Save(s.manifest); err != nil {
		t.Fatal(err)
	}
	cs = s.connect(t)
	limit := strconv.Itoa(server.MaxTextBytes)
	for _, tc := range []struct {
		tool string
		args map[string]any
	}{
		{"read_protected_document", map[string]any{"documentId": "ccd-0001"}},
		{"read_protected_document", map[string]any{"documentId": "oru-0001"}},
		{"read_protected_fragment", map[string]any{"documentId": "ccd-0001", "fragmentId": withheld}},
		{"save_protected_fragment", map[string]any{"documentId": "ccd-0001", "fragmentId": "results",
			"text": "<section/>", "idempotencyKey": "size-1"}},
	} {
		s.quiet(t, tc.tool+" too large", func() {
			got, isErr := call(t, cs, tc.tool, tc.args)
			wantRefused(t, got, isErr, "adapter", "RESULT_TOO_LARGE")
			detail, _ := got["detail"].(string)
			for _, n := range byteCounts.FindAllStringSubmatch(detail, -1) {
				if n[1] != limit {
					t.Errorf("%s %v: the detail names %s bytes: %q", tc.tool, tc.args, n[1], detail)
				}
			}
		})
	}
}
