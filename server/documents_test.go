package server

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestSHA256Is: the integrity check says what comparing the hex string
// case-insensitively says, for the digest in either case and for what is
// not it.
func TestSHA256Is(t *testing.T) {
	sum := sha256.Sum256([]byte("synthetic notes"))
	lower := hex.EncodeToString(sum[:])
	other := sha256.Sum256([]byte("other"))
	for _, tc := range []struct {
		digest string
		want   bool
	}{
		{lower, true},
		{strings.ToUpper(lower), true},
		{strings.ToUpper(lower[:10]) + lower[10:], true},
		{hex.EncodeToString(other[:]), false},
		{lower[:63], false},
		{lower + "0", false},
		{"", false},
		{lower[:62] + "g" + lower[63:], false},
		{lower[:62] + "\u212a", false},
		{strings.Repeat("0", 64), false},
	} {
		if got := sha256Is(sum, tc.digest); got != tc.want {
			t.Errorf("%q: got %v, want %v", tc.digest, got, tc.want)
		}
		if fold := strings.EqualFold(lower, tc.digest); fold != tc.want {
			t.Errorf("%q: the case-insensitive compare says %v, the table %v", tc.digest, fold, tc.want)
		}
	}
}

// TestNoticeLineIsTheNotice: the read's notice made in one string is the
// notice and its content block's newline, and its result's content is what
// noticeThenText makes of it.
func TestNoticeLineIsTheNotice(t *testing.T) {
	for _, p := range []provenance{
		{DocumentID: "doc-1", Version: 1, SHA256: strings.Repeat("ab", 32)},
		{DocumentID: "", Version: 0, SHA256: ""},
		{DocumentID: "zoë \"x\"\n", Version: 12345, SHA256: "not hex"},
		{DocumentID: "d", Version: -7, SHA256: "0"},
	} {
		line := p.noticeLine()
		if want := untrustedNotice(p.source()) + "\n"; line != want {
			t.Errorf("%+v: noticeLine = %q, want %q", p, line, want)
		}
		o := readOutput{Notice: line[:len(line)-1], Text: "text", noticeLine: line}
		got, want := o.content(), noticeThenText(o.Notice, o.Text)
		if len(got) != 2 || got[0].(*mcp.TextContent).Text != want[0].(*mcp.TextContent).Text ||
			got[1].(*mcp.TextContent).Text != want[1].(*mcp.TextContent).Text {
			t.Errorf("%+v: content = %v, want %v", p, got, want)
		}
	}
}

// BenchmarkReadNotice: a read's notice and content blocks, made as
// separate strings and as one.
func BenchmarkReadNotice(b *testing.B) {
	p := provenance{DocumentID: "doc-1", Version: 3, SHA256: strings.Repeat("ab", 32)}
	b.Run("separate", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			o := readOutput{Notice: untrustedNotice(p.source()), Text: "text"}
			_ = o.content()
		}
	})
	b.Run("one", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			line := p.noticeLine()
			o := readOutput{Notice: line[:len(line)-1], Text: "text", noticeLine: line}
			_ = o.content()
		}
	})
}
