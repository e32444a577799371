package reference

import (
	"bytes"
	"encoding/base64"
	"net/http"
	"testing"

	"github.com/pdmcp/pdmcp/gateway/api"
)

// The size test moves 22 MB of base64 each way. encoding/json is slow over
// strings that long under the race detector, so the test writes its bodies
// and reads the big field of its answers by hand; the Gateway still parses
// every body with encoding/json.

// bigBody is a JSON object of small string fields and one large base64
// field, written without escaping (neither t-Tags, IVs nor base64 need it).
func bigBody(small map[string]string, field string, data []byte) []byte {
	var b bytes.Buffer
	b.Grow(base64.StdEncoding.EncodedLen(len(data)) + 1024)
	b.WriteByte('{')
	for k, v := range small {
		b.WriteString(`"` + k + `":"` + v + `",`)
	}
	b.WriteString(`"` + field + `":"`)
	enc := base64.NewEncoder(base64.StdEncoding, &b)
	enc.Write(data)
	enc.Close()
	b.WriteString(`"}`)
	return b.Bytes()
}

// bigField decodes the base64 string field of an answer.
func bigField(t *testing.T, body []byte, field string) []byte {
	t.Helper()
	out, err := base64.StdEncoding.DecodeString(smallField(t, body, field))
	if err != nil {
		t.Fatalf("answer's %s field: %v", field, err)
	}
	return out
}

// smallField reads a string field of an answer.
func smallField(t *testing.T, body []byte, field string) string {
	t.Helper()
	marker := []byte(`"` + field + `":"`)
	i := bytes.Index(body, marker)
	if i < 0 {
		t.Fatalf("answer has no %s field", field)
	}
	rest := body[i+len(marker):]
	end := bytes.IndexByte(rest, '"')
	if end < 0 {
		t.Fatalf("answer's %s field is not terminated", field)
	}
	return string(rest[:end])
}

// TestSizeLimit sends the largest plaintext the contract allows and one
// byte more. It runs once.
func TestSizeLimit(t *testing.T) {
	w := newWorld(t)
	text := bytes.Repeat([]byte("0123456789abcdef"), api.MaxDataBytes/16+1)
	send := func(route string, body []byte) response {
		return w.do(request{route: route, body: body, handle: w.owner.handle, key: w.owner.key})
	}

	before := len(w.audit())
	resp := send(api.RouteEncrypt, bigBody(map[string]string{"ttag": w.key.TTag}, "plaintext", text[:api.MaxDataBytes+1]))
	wantRefusal(t, "16,777,216 bytes", w.decode(api.RouteEncrypt, resp, nil), api.LayerGateway, api.CodeBadRequest, http.StatusBadRequest)
	if n := len(w.audit()); n != before {
		t.Errorf("the oversized encrypt reached the key server (%d rows)", n-before)
	}

	max := text[:api.MaxDataBytes]
	resp = send(api.RouteEncrypt, bigBody(map[string]string{"ttag": w.key.TTag}, "plaintext", max))
	if resp.status != http.StatusOK {
		t.Fatalf("16,777,215 bytes: %s", resp.body)
	}
	ct, iv := bigField(t, resp.body, "ciphertext"), smallField(t, resp.body, "iv")
	if len(ct) != api.MaxDataBytes+16 {
		t.Errorf("ciphertext of %d bytes, want the plaintext and a 16-byte tag", len(ct))
	}
	resp = send(api.RouteDecrypt, bigBody(map[string]string{"ttag": w.key.TTag, "iv": iv}, "ciphertext", ct))
	if resp.status != http.StatusOK {
		t.Fatalf("decrypt 16,777,215 bytes: %s", resp.body)
	}
	if pt := bigField(t, resp.body, "plaintext"); !bytes.Equal(pt, max) {
		t.Fatalf("round trip of %d bytes came back as %d different bytes", len(max), len(pt))
	}

	// A ciphertext longer than the largest one encrypt makes is refused
	// before the key server.
	before = len(w.audit())
	resp = send(api.RouteDecrypt, bigBody(map[string]string{"ttag": w.key.TTag, "iv": iv}, "ciphertext", append(ct, 0)))
	wantRefusal(t, "ciphertext over the limit", w.decode(api.RouteDecrypt, resp, nil), api.LayerGateway, api.CodeBadRequest, http.StatusBadRequest)
	if n := len(w.audit()); n != before {
		t.Errorf("the oversized decrypt reached the key server (%d rows)", n-before)
	}
}
