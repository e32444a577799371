package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// encoded is what encoding/json's Encoder, HTML left unescaped, writes for
// c, without the opening brace: what Write wrote for every line before
// appendToolCall.
func encoded(t *testing.T, c ToolCall) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(c); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()[1:]
}

func TestAppendToolCallIsTheEncoders(t *testing.T) {
	at := time.Date(2026, 10, 24, 12, 0, 0, 123000000, time.UTC)
	full := ToolCall{RunID: "r", GrantID: "g", ActingAs: "alice", Caller: "https://idp|alice", JKT: "abc_-",
		HandleDigest: "0123456789ab", Tool: "read_protected_fragment", DocumentID: "d", FragmentID: "f", StepID: "s",
		Version: 7, Outcome: OutcomeRefused, Layer: LayerGateway, Code: "SCOPE_DENIED", Status: 403, StartedAt: at,
		LatencyMs: 12, GatewayRequests: []Request{{Route: "/v1/decrypt", Status: 403, Code: "SCOPE_DENIED", LatencyMs: 3},
			{Route: "/v1/mint", Status: 200}},
		ServiceRelogin: true, SessionReplaced: true, Path: "out/a.txt", PlaintextSHA256: "ff", Minted: true,
		KeyLink: "0123456789ab", Sections: []Section{{ID: "a", Outcome: OutcomeOK, StartedAt: at, LatencyMs: 1},
			{ID: "b", Outcome: OutcomeRefused, Layer: LayerKeyServer, Code: "DENIED", StartedAt: at.Add(time.Second)}},
		Confirmation: ConfirmAccepted, EntriesLeftAlone: 2, TraceID: "0af7651916cd43dd8448eb211c80319c",
		SpanID: "b7ad6b7169203331"}
	// with is full changed by f, its lists copied first.
	with := func(f func(*ToolCall)) ToolCall {
		c := full
		c.GatewayRequests, c.Sections = slices.Clone(c.GatewayRequests), slices.Clone(c.Sections)
		f(&c)
		return c
	}
	for _, tc := range []struct {
		name  string
		line  ToolCall
		plain bool
	}{
		{"zero", ToolCall{}, true},
		{"a read", readLine(), true},
		{"every member", full, true},
		{"negative numbers", with(func(c *ToolCall) { c.Version, c.Status, c.LatencyMs, c.EntriesLeftAlone = -1, -2, -3, -4 }), true},
		{"empty lists", with(func(c *ToolCall) { c.GatewayRequests, c.Sections = []Request{}, []Section{} }), true},
		{"a zone", with(func(c *ToolCall) { c.StartedAt = at.In(time.FixedZone("x", 5*3600+1800)) }), true},
		{"no fraction", with(func(c *ToolCall) { c.StartedAt = at.Truncate(time.Second) }), true},
		{"every printable byte", with(func(c *ToolCall) {
			b := []byte{}
			for ch := byte(0x20); ch <= 0x7e; ch++ {
				if ch != '"' && ch != '\\' {
					b = append(b, ch)
				}
			}
			c.Path = string(b)
		}), true},
		{"html", with(func(c *ToolCall) { c.DocumentID = "<a&b>" }), true},
		{"a quote", with(func(c *ToolCall) { c.DocumentID = `a"b` }), false},
		{"a backslash", with(func(c *ToolCall) { c.Path = `a\b` }), false},
		{"a control character", with(func(c *ToolCall) { c.Caller = "a\tb" }), false},
		{"delete", with(func(c *ToolCall) { c.StepID = "a\x7fb" }), false},
		{"not ASCII", with(func(c *ToolCall) { c.ActingAs = "zoë" }), false},
		{"a line separator", with(func(c *ToolCall) { c.RunID = "a\u2028b" }), false},
		{"invalid UTF-8", with(func(c *ToolCall) { c.GrantID = "a\xffb" }), false},
		{"a request's code", with(func(c *ToolCall) { c.GatewayRequests[0].Code = "é" }), false},
		{"a section's id", with(func(c *ToolCall) { c.Sections = []Section{{ID: "\n"}} }), false},
		{"year 10000", with(func(c *ToolCall) { c.StartedAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) }), false},
		{"a section's year", with(func(c *ToolCall) {
			c.Sections = []Section{{ID: "a", StartedAt: time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)}}
		}), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := appendToolCall([]byte("head"), tc.line)
			if ok != tc.plain {
				t.Fatalf("appendToolCall's ok = %v, want %v", ok, tc.plain)
			}
			if !ok {
				if string(got) != "head" {
					t.Fatalf("a line left to the encoder changed the buffer: %q", got)
				}
				return
			}
			if want := encoded(t, tc.line); !bytes.Equal(got[len("head"):], want) {
				t.Fatalf("appendToolCall =\n%s\nencoding/json =\n%s", got[len("head"):], want)
			}
		})
	}
}

// TestWriteEncodesEveryToolCallAlike: a line appendToolCall leaves to the
// encoder is written in the same form, escapes and all.
func TestWriteEncodesEveryToolCallAlike(t *testing.T) {
	l, path := openTemp(t)
	plain := readLine()
	escaped := readLine()
	escaped.DocumentID = "doc \"ë\"\t<1>"
	for _, c := range []ToolCall{plain, escaped} {
		if err := l.Write(c); err != nil {
			t.Fatal(err)
		}
	}
	lines := readLines(t, path)
	if len(lines) != 2 || lines[0]["documentId"] != plain.DocumentID || lines[1]["documentId"] != escaped.DocumentID {
		t.Fatalf("lines = %v", lines)
	}
	r, err := Verify(context.Background(), []string{path}, VerifyOptions{})
	if err != nil || !r.Whole || r.BreakCount != 0 {
		t.Fatalf("Verify = %+v, %v; want a whole chain", r, err)
	}
}

// TestWriteToolCallIsWrite: WriteToolCall writes the bytes Write writes,
// and returns the same error, for plain lines, lines left to the encoder,
// lines with fields dropped and lines with no time of their own; and a
// dropped request field never changes the caller's requests.
func TestWriteToolCallIsWrite(t *testing.T) {
	now := func() time.Time { return time.Date(2026, 7, 28, 9, 0, 0, 5, time.UTC) }
	dir := t.TempDir()
	open := func(name string) (*Log, string) {
		path := filepath.Join(dir, name)
		l, err := OpenWith(path, Options{Now: now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l, path
	}
	viaWrite, writePath := open("write.jsonl")
	viaTool, toolPath := open("tool.jsonl")
	escaped := readLine()
	escaped.DocumentID = "doc \"ë\"\t<1>"
	badRoute := readLine()
	badRoute.GatewayRequests = []Request{{Route: "/v1/decrypt", Status: 200}, {Route: "not a route", Code: "bad code", Status: 403}}
	untimed := readLine()
	untimed.StartedAt = time.Time{}
	farTime := readLine()
	farTime.StartedAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, c := range []ToolCall{readLine(), escaped, badRoute, untimed, farTime, {Tool: "x", Outcome: OutcomeOK}} {
		errWrite, errTool := viaWrite.Write(c), viaTool.WriteToolCall(c)
		if fmt.Sprint(errWrite) != fmt.Sprint(errTool) {
			t.Errorf("line %d: Write = %v, WriteToolCall = %v", i, errWrite, errTool)
		}
	}
	if badRoute.GatewayRequests[1].Route != "not a route" || badRoute.GatewayRequests[1].Code != "bad code" {
		t.Errorf("the caller's requests were changed: %+v", badRoute.GatewayRequests)
	}
	a, b := fileLines(t, writePath), fileLines(t, toolPath)
	if len(a) != 5 || !slices.Equal(a, b) { // the far time is refused alike
		t.Fatalf("Write wrote\n%s\nWriteToolCall wrote\n%s", strings.Join(a, ""), strings.Join(b, ""))
	}
	if !strings.Contains(a[2], `"gatewayRequests":[{"route":"/v1/decrypt","status":200,"latencyMs":0},{"route":"","status":403,"latencyMs":0}]`) {
		t.Errorf("dropped request fields: %s", a[2])
	}
	if err := (*Log)(nil).WriteToolCall(readLine()); err != nil {
		t.Errorf("nil Log: %v", err)
	}
}
