package serve

import (
	"bytes"
	"net/http"
	"reflect"
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
