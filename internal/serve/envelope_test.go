package serve

import (
	"bytes"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestEnvelopeAgrees: for every body parseEnvelope takes, what the checks
// read from its envelope is what they read from the body itself (the
// functions jsonRPCShape falls back on), under each header a request may
// carry; and the bodies it leaves to those functions are the odd ones.
func TestEnvelopeAgrees(t *testing.T) {
	const v = `"io.modelcontextprotocol/protocolVersion"`
	for _, tc := range []struct {
		body   string
		parsed bool
	}{
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","_meta":{` + v + `:"2026-07-28"}}}`, true},
		{` {"jsonrpc":"2.0","id":"a","method":"tools/list","params":{"_meta":{` + v + `:"2025-11-25"}}} `, true},
		{`{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"_meta":{` + v + `:"1999-01-01"}}}`, true},
		{`{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"_meta":{` + v + `:""}}}`, true},
		{`{"jsonrpc":"2.0","id":4,"method":"tools/list","params":{"_meta":{` + v + `:7}}}`, true},
		{`{"jsonrpc":"2.0","id":5,"method":"tools/list","params":{"_meta":{` + v + `:null}}}`, true},
		{`{"jsonrpc":"2.0","id":6,"method":"tools/list","params":{"_meta":[1]}}`, true},
		{`{"jsonrpc":"2.0","id":7,"method":"tools/list","params":"x"}`, true},
		{`{"jsonrpc":"2.0","id":8,"method":"tools/list","params":null}`, true},
		{`{"jsonrpc":"2.0","id":9,"method":7,"params":{"_meta":{` + v + `:"2026-07-28"}}}`, true},
		{`{"jsonrpc":"2.0","id":10,"method":null,"params":{"_meta":{` + v + `:"2026-07-28"}}}`, true},
		{`{"jsonrpc":"2.0","ID":11,"METHOD":"subscriptions/listen","Params":{"_meta":{` + v + `:"2026-07-28"}}}`, true},
		{`{"jsonrpc":"2.0","id":12,"method":"subscriptions\/listen","params":{}}`, true},
		{`{"jsonrpc":"2.0","id":null,"result":{}}`, true},
		{`{"jsonrpc":"2.0","id":13,"error":null}`, true},
		{`{"jsonrpc":"2.0","id":14}`, true},
		{`{}`, true},
		// What the hand walk must read as encoding/json does: spacing,
		// strings holding braces, quotes and escapes, names it leaves to
		// the general decode (escaped, not ASCII, folded by Unicode).
		{" {\n\t\"id\" : 21 ,\r\n \"method\"\t:\t\"tools/call\" , \"params\" : { \"_meta\" : { " + v + " : \"2026-07-28\" } } }\n", true},
		{`{"jsonrpc":"2.0","id":"a}\"]{","method":"tools/call","params":{"arguments":{"x":"}{\"","y":[1,{"z":[]}],"w":-1.5e3},"_meta":{` + v + `:"2026-07-28"}}}`, true},
		{`{"jsonrpc":"2.0","id":22,"method":"tools/call","params":{"_meta":{` + v + `:"2026-07-28",` + v + `:"2025-11-25"}}}`, true},
		{`{"jsonrpc":"2.0","id":23,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol\/protocolVersion":"2026-07-28"}}}`, true},
		{`{"jsonrpc":"2.0","id":24,"method":"tools/call","params":{"_meta":{` + v + `:"2026\u002d07-28"}}}`, true},
		{`{"jsonrpc":"2.0","id":25,"method":"tools/call","params":{"_META":{` + v + `:"2026-07-28"}}}`, true},
		{`{"jsonrpc":"2.0","id":26,"method":"tools/call","params":{"_meta":{` + v + `:"2026-07-28"},"_meta":{"x":1}}}`, true},
		{`{"jsonrpc":"2.0","id":27,"method":"tools/call","params":{"_meta":null}}`, true},
		{`{"jsonrpc":"2.0","id":28,"method":"tools/call","params":{"\u005fmeta":{` + v + `:"2026-07-28"}}}`, true},
		{`{"jsonrpc":"2.0","id":29,"method":"tools/call","params":{"_meta":{` + v + `:"\u00e9"}}}`, true},
		{`{"jsonrpc":"2.0","id":30,"method":"tools/call","params":{"_meta":{` + v + `:"` + "\xff" + `"}}}`, true},
		{`{"jsonrpc":"2.0","id":31,"m\u0065thod":"subscriptions/listen"}`, true},
		{`{"jsonrpc":"2.0","id":32,"method":"tools/call","param\u017f":{"_meta":{` + v + `:"2026-07-28"}}}`, true},
		{`{"jsonrpc":"2.0","id":33,"method":"tools/call","paramſ":{"_meta":{` + v + `:"2026-07-28"}}}`, true},
		{`{"jsonrpc":"2.0","id":34,"method":"tools/call","params":{"_meta":{` + v + `:"2026-07-28"}},"paramſ":{}}`, false},
		{`{"jsonrpc":"2.0","id":35,"method":"` + "\xff" + `","params":{}}`, true},
		{`{"jsonrpc":"2.0","id":36,"method":true,"params":[1,2]}`, true},
		{`{"jsonrpc":"2.0","id":15,"method":"tools/list","method":"subscriptions/listen"}`, false},
		{`{"jsonrpc":"2.0","id":16,"Method":"subscriptions/listen","method":"tools/list"}`, false},
		{`{"jsonrpc":"2.0","id":1,"id":2,"method":"tools/list"}`, false},
		{`{"params":{"_meta":{` + v + `:"2026-07-28"}},"params":{},"method":"a"}`, false},
		{`[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]`, false},
		{`{"jsonrpc":"2.0"} {}`, false},
		{`null`, false},
		{`not json`, false},
		{``, false},
	} {
		body := []byte(tc.body)
		env, parsed := parseEnvelope(body)
		if parsed != tc.parsed {
			t.Errorf("%s: parsed %v, want %v", tc.body, parsed, tc.parsed)
			continue
		}
		if !parsed {
			continue
		}
		trimmed := bytes.TrimSpace(body)
		// The hand walk, where it answers, reads what the general decode
		// reads.
		if walked, ok := walkEnvelope(trimmed); ok {
			decoded, _ := decodeEnvelope(trimmed)
			if !reflect.DeepEqual(walked, decoded) {
				t.Errorf("%s: walked %+v; decoded %+v", tc.body, walked, decoded)
			}
		}
		isMsg, id := messageShape(trimmed)
		if envMsg := env.Method.n+env.Result.n+env.Error.n > 0; envMsg != isMsg || string(env.ID.raw) != string(id) {
			t.Errorf("%s: envelope says message %v, id %s; the body %v, %s", tc.body, envMsg, env.ID.raw, isMsg, id)
		}
		if got := string(messageID(trimmed)); got != string(env.ID.raw) {
			t.Errorf("%s: envelope id %s; messageID %s", tc.body, env.ID.raw, got)
		}
		_, listen := listenRequest(body)
		if m, ok := env.method(); (ok && m == methodListen) != listen {
			t.Errorf("%s: envelope says listen %v; listenRequest %v", tc.body, !listen, listen)
		}
		for _, header := range []string{"", "2026-07-28", "2025-11-25", "2027-01-01"} {
			h := http.Header{}
			if header != "" {
				h.Set("Mcp-Protocol-Version", header)
			}
			_, want := protocolHeaderMismatch(h, trimmed)
			if got := headerMismatch(h, env); got != want {
				t.Errorf("%s, header %q: envelope mismatch %q; the body %q", tc.body, header, got, want)
			}
			supported := mcp.SupportedProtocolVersions()
			wantReq, wantWhy := unsupportedVersion(h, trimmed, supported)
			gotReq, gotWhy := unsupportedVersionOf(h, env.metaVersion(), true, supported)
			if gotReq != wantReq || gotWhy != wantWhy {
				t.Errorf("%s, header %q: envelope version %q, %q; the body %q, %q", tc.body, header, gotReq, gotWhy, wantReq, wantWhy)
			}
		}
	}
}

// envelopeBodies are bodies for the scanner's tests and the fuzz seeds:
// valid and invalid JSON of every kind the one-pass scan meets.
var envelopeBodies = []string{
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`,
	`{}`, `{ }`, `{"a":1}`, `{"a":1,}`, `{,"a":1}`, `{"a" 1}`, `{"a":}`, `{"a":1 "b":2}`, `{"a":1}}`, `{"a":1`,
	`{"a":[]}`, `{"a":[ ]}`, `{"a":[1,]}`, `{"a":[,1]}`, `{"a":[1 2]}`, `{"a":[1,[2,[3,{}]]]}`, `{"a":{"b":{"c":{}}}}`,
	`{"a":{"b":1,}}`, `{"a":{1:2}}`, `{"a":{"b"}}`, `{"a":]`, `{"a":[}`, `{"a":{]}`,
	`{"a":0}`, `{"a":-0}`, `{"a":01}`, `{"a":-}`, `{"a":1.}`, `{"a":.5}`, `{"a":1.5}`, `{"a":1e5}`, `{"a":1E+5}`,
	`{"a":1e-5}`, `{"a":1e}`, `{"a":1e+}`, `{"a":-1.25e-3}`, `{"a":+1}`, `{"a":1x}`, `{"a":0x1}`, `{"a":1.5.5}`,
	`{"a":true}`, `{"a":false}`, `{"a":null}`, `{"a":tru}`, `{"a":truex}`, `{"a":nul}`, `{"a":NULL}`, `{"a":True}`,
	`{"a":"x"}`, `{"a":"\"\\\/\b\f\n\r\t"}`, `{"a":"\u00e9\uD83D\uDE00"}`, `{"a":"\u00g9"}`, `{"a":"\u00e"}`,
	`{"a":"\x"}`, `{"a":"\'"}`, "{\"a\":\"\x01\"}", "{\"a\":\"\t\"}", "{\"a\":\"\x7f\"}", "{\"a\":\"\xff\xfe\"}",
	`{"a":"unterminated}`, `{"a":"\`, `{"a":"\u12`, "{\"\xff\":1}", `{"\u0069d":1}`, `{"ID":1,"id":2}`,
	" {\n\t\"id\" : 21 ,\r\n \"method\"\t:\t\"tools/call\" }", "{\"a\":1}\v", "{\"a\":\v1}", "{\"a\":1\f}",
	`{"a":1} {}`, `{"a":1}x`, `[1]`, `"x"`, `null`, ``, `{`, `}`,
	// params and its _meta, read in the same pass: once, twice, not an
	// object, names not plain, _meta twice or folded, params twice.
	`{"method":"m","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`,
	`{"method":"m","params":{"a":{"_meta":1},"_meta":{"io.modelcontextprotocol/protocolVersion":"v"},"b":[]}}`,
	`{"method":"m","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"v"},"_META":{}}}`,
	`{"method":"m","params":{"_Meta":{"io.modelcontextprotocol/protocolVersion":"v"}}}`,
	`{"method":"m","params":{"\u005fmeta":{"io.modelcontextprotocol/protocolVersion":"v"}}}`,
	`{"method":"m","params":{"é":1,"_meta":{"io.modelcontextprotocol/protocolVersion":"v"}}}`,
	`{"method":"m","params":{"_meta":{"io.modelcontextprotocol\/protocolVersion":"v"}}}`,
	`{"method":"m","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"v\u0031"}}}`,
	`{"method":"m","params":{"_meta":null}}`, `{"method":"m","params":{"_meta":[]}}`, `{"method":"m","params":[]}`,
	`{"method":"m","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"v"}},"PARAMS":{}}`,
	`{"method":"m","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"v"}},"params":1}`,
	`{"method":"m","params":1,"params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"v"}}}`,
	`{"method":"m","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"v"},}}`,
	`{"method":"m","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"v"}`,
	`{"a":` + strings.Repeat("[", maxScanDepth+2) + strings.Repeat("]", maxScanDepth+2) + `}`,
	`{"a":` + strings.Repeat("[", maxScanDepth-1) + strings.Repeat("]", maxScanDepth-1) + `}`,
	`{"a":` + strings.Repeat(`{"b":`, maxScanDepth+1) + `1` + strings.Repeat("}", maxScanDepth+1) + `}`,
	`{"a":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `}`,
}

// TestScanEnvelopeIsGeneral: the one-pass scan never takes a body
// json.Valid refuses, and for every body it takes it reads what the
// general path (json.Valid, then the walk or the decode) reads.
func TestScanEnvelopeIsGeneral(t *testing.T) {
	scanned := 0
	for _, body := range envelopeBodies {
		if scanAgreesWithGeneral(t, []byte(body)) {
			scanned++
		}
	}
	// The test means something only if the scan took most bodies that
	// are valid.
	if scanned < 25 {
		t.Errorf("the scan took only %d bodies", scanned)
	}
}

// scanAgreesWithGeneral checks scanEnvelope on body against the general
// path, and reports whether the scan took it.
func scanAgreesWithGeneral(t *testing.T, body []byte) bool {
	t.Helper()
	trimmed := bytes.TrimSpace(body)
	valid := json.Valid(trimmed)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		if _, ok := parseEnvelope(body); ok {
			t.Errorf("%q: parsed, not an object", body)
		}
		return false
	}
	scan, ok := scanEnvelope(trimmed)
	if !ok {
		return false
	}
	if !valid {
		t.Errorf("%q: scanned, but json.Valid refuses it", body)
		return true
	}
	general, gok := parseEnvelopeGeneral(trimmed)
	got, pok := parseEnvelope(body)
	if pok != gok {
		t.Errorf("%q: parseEnvelope %v; the general path %v", body, pok, gok)
	}
	if !gok {
		// A name given twice: the general path leaves it; the scan counted it.
		if scan.counted() {
			t.Errorf("%q: the general path refuses it; the scan counts it right", body)
		}
		return true
	}
	if !reflect.DeepEqual(scan, general) || !reflect.DeepEqual(got, general) {
		t.Errorf("%q: scanned %+v; the general path %+v", body, scan, general)
	}
	return true
}

// FuzzScanEnvelope: the one-pass scan against json.Valid and the general
// path, on any body. Run: go test -run X -fuzz FuzzScanEnvelope ./internal/serve/
func FuzzScanEnvelope(f *testing.F) {
	for _, body := range envelopeBodies {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		scanAgreesWithGeneral(t, body)
	})
}
