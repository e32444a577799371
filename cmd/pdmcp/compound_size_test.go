package main

import (
	"crypto/sha256"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
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
// refusals of the section tools name no length but the limit: the
// document's length less the mixed view's would be the withheld sections'.
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

	// Grow a withheld section in the manifest past one read.
	withheld := ""
	s.editDocument(t, "ccd-0001", func(ccd *grant.Document) {
		for i, f := range ccd.Fragments {
			if f.DataType != "results" && withheld == "" {
				withheld = f.ID
				ccd.Fragments[i].Size += 70001
			}
		}
	})
	cs = s.connect(t)
	limit := strconv.Itoa(server.MaxTextBytes)
	for _, tc := range []struct {
		tool string
		args map[string]any
	}{
		{"read_protected_document", map[string]any{"documentId": "ccd-0001"}},
		{"read_protected_fragment", map[string]any{"documentId": "ccd-0001", "fragmentId": withheld}},
		{"save_protected_fragment", map[string]any{"documentId": "ccd-0001", "fragmentId": "results",
			"text": strings.Repeat("x", server.MaxTextBytes+1), "idempotencyKey": "size-1"}},
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

// TestStdioCompoundAnswersIgnoreWithheldLengths: what read_protected_document
// and save_protected_fragment answer does not turn on the length of a
// section withheld from the caller. Before, both refused RESULT_TOO_LARGE
// once the skeleton and all sections were over one read, so a save of text
// of a chosen length that then fails the section-text check (nothing
// saved) told whether the other sections' total was over the limit less
// that length: a free binary search for the withheld sections' length.
func TestStdioCompoundAnswersIgnoreWithheldLengths(t *testing.T) {
	s := newCompoundStack(t)
	s.giveAgent(t, "results")
	// Text a section save refuses after the length check (a NUL byte), of
	// a length that fits one section: nothing is ever saved.
	probe := strings.Repeat("x", 30000) + "\x00"
	answers := func() []string {
		cs := s.connect(t)
		got, isErr := call(t, cs, "read_protected_document", map[string]any{"documentId": "ccd-0001"})
		text, _ := got["text"].(string)
		out := []string{fmt.Sprintf("read: isError %v code %v complete %v text sha256 %x", isErr, got["code"], got["complete"], sha256.Sum256([]byte(text)))}
		s.quiet(t, "the save probe", func() {
			got, isErr = call(t, cs, "save_protected_fragment", map[string]any{"documentId": "ccd-0001", "fragmentId": "results",
				"text": probe, "idempotencyKey": "probe-1"})
			out = append(out, fmt.Sprintf("save: isError %v code %v", isErr, got["code"]))
		})
		return out
	}
	before := answers()
	if !strings.Contains(before[0], "isError false") || !strings.Contains(before[1], "isError true") ||
		strings.Contains(before[1], "RESULT_TOO_LARGE") {
		t.Fatalf("before: %q, want the mixed view and the probe refused for its text", before)
	}

	// A withheld section 64,000 bytes longer: every section still fits one
	// read, the document does not.
	s.editDocument(t, "ccd-0001", func(ccd *grant.Document) {
		grown := false
		for i, f := range ccd.Fragments {
			if f.DataType != "results" && !grown {
				ccd.Fragments[i].Size += 64000
				ccd.Size += 64000
				grown = true
			}
		}
	})
	if after := answers(); !slices.Equal(after, before) {
		t.Errorf("with a withheld section 64,000 bytes longer the answers changed:\n before %q\n after  %q", before, after)
	}
}

// TestStdioCompoundGrownPastOneRead: saves may take a compound document
// past one read (each section within it); its mixed view is then refused
// RESULT_TOO_LARGE for a caller who would get more than one read, after
// the decrypts, and its sections are still read one by one.
func TestStdioCompoundGrownPastOneRead(t *testing.T) {
	s := newCompoundStack(t)
	s.giveAgent(t, "results", "vitals")
	cs := s.connect(t)
	pad := strings.Repeat("a", 40000)
	texts := map[string]string{
		"results": `<section><code code="30954-2" codeSystem="2.16.840.1.113883.6.1"/><text>` + pad + `</text></section>`,
		"vitals":  `<section><code code="8716-3" codeSystem="2.16.840.1.113883.6.1"/><text>` + pad + `</text></section>`,
	}
	for _, id := range []string{"results", "vitals"} {
		got, isErr := call(t, cs, "save_protected_fragment", map[string]any{"documentId": "ccd-0001", "fragmentId": id,
			"text": texts[id], "idempotencyKey": "grow-" + id})
		if isErr {
			t.Fatalf("save %s (%d bytes): %v", id, len(texts[id]), got)
		}
	}
	got, isErr := call(t, cs, "read_protected_document", map[string]any{"documentId": "ccd-0001"})
	wantRefused(t, got, isErr, "adapter", "RESULT_TOO_LARGE")
	for id, want := range texts {
		got, isErr := call(t, cs, "read_protected_fragment", map[string]any{"documentId": "ccd-0001", "fragmentId": id})
		if isErr || got["text"] != want {
			t.Errorf("read %s: isError %v, %d bytes, want the %d saved", id, isErr, len(fmt.Sprint(got["text"])), len(want))
		}
	}
}
