package gateway

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/pdmcp/pdmcp/gateway/api"
)

// bigPlaintext spans many of the streaming reader's and decoder's chunks,
// with a length that is not a multiple of 3 (the base64 ends padded).
func bigPlaintext() []byte {
	b := make([]byte, 1<<20+1)
	for i := range b {
		b[i] = byte(i*31 + i>>8)
	}
	return b
}

// TestEncryptStreamedBodyResentOnProofStale: the request body encoded while
// it is sent is complete, says its length, and is built again for the one
// proof-stale resend; the answer's ciphertext is decoded as it is read.
func TestEncryptStreamedBodyResentOnProofStale(t *testing.T) {
	g := newFakeGateway(t)
	s := g.aliceSession(t)
	pt := bigPlaintext()
	var bodies [][]byte
	stale := true
	g.set(func(g *fakeGateway) {
		g.override = func(w http.ResponseWriter, r *http.Request) bool {
			if r.URL.Path != api.RouteEncrypt {
				return false
			}
			b, err := io.ReadAll(r.Body)
			if err != nil || r.ContentLength != int64(len(b)) {
				t.Errorf("body read %d bytes (%v), Content-Length %d", len(b), err, r.ContentLength)
			}
			bodies = append(bodies, b)
			r.Body = io.NopCloser(bytes.NewReader(b))
			if stale {
				stale = false
				refuse(w, http.StatusUnauthorized, api.LayerGateway, api.CodeProofStale)
				return true
			}
			return false
		}
	})
	rec := &Recorder{}
	out, err := s.Encrypt(WithRecorder(t.Context(), rec), EncryptInput{IV: make([]byte, api.IVBytes), Plaintext: pt})
	if err != nil {
		t.Fatal(err)
	}
	if len(bodies) != 2 || !bytes.Equal(bodies[0], bodies[1]) {
		t.Fatalf("%d bodies sent; the resend must be the same body", len(bodies))
	}
	var req api.EncryptRequest
	if err := json.Unmarshal(bodies[1], &req); err != nil {
		t.Fatalf("the streamed body is not JSON: %v", err)
	}
	if req.Plaintext != base64.StdEncoding.EncodeToString(pt) {
		t.Fatal("the streamed body's plaintext is not the plaintext's base64")
	}
	if !bytes.Equal(out.Ciphertext, toyCipher(pt)) || !out.Minted || out.TTag != "ttag-minted" {
		t.Fatalf("answer decoded wrongly: %d bytes, minted %v, ttag %q", len(out.Ciphertext), out.Minted, out.TTag)
	}
	codes := []string{}
	for _, r := range rec.Requests() {
		codes = append(codes, r.Code)
	}
	if !slices.Equal(codes, []string{api.CodeProofStale, ""}) {
		t.Fatalf("requests %v, want one PROOF_STALE then one answer", codes)
	}
}

// TestCryptoAnswerForms: the streamed answer field is read as encoding/json
// would read it (escapes, any member order, a name in another case), and
// an answer that is not base64 or not JSON is BAD_RESPONSE.
func TestCryptoAnswerForms(t *testing.T) {
	pt := bigPlaintext()
	ct := base64.StdEncoding.EncodeToString(toyCipher(pt))
	cases := []struct {
		name   string
		answer string
		ok     bool
	}{
		{"plain", `{"ttag":"T","iv":"AAAAAAAAAAAAAAAA","ciphertext":"` + ct + `","minted":true,"link":"L"}`, true},
		{"escaped slashes, field first", `{"ciphertext":"` + strings.ReplaceAll(ct, "/", `\/`) + `","ttag":"T","minted":true}`, true},
		{"other case", `{"CipherText":"` + ct + `","ttag":"T","minted":true}`, true},
		{"not base64", `{"ttag":"T","ciphertext":"` + ct[:100] + `!` + ct[101:] + `","minted":true}`, false},
		{"cut short", `{"ttag":"T","ciphertext":"` + ct[:1000], false},
		{"not JSON after it", `{"ttag":"T","ciphertext":"` + ct + `",minted}`, false},
		{"twice", `{"ttag":"T","ciphertext":"` + ct + `","ciphertext":"QUJD"}`, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := newFakeGateway(t)
			s := g.aliceSession(t)
			g.set(func(g *fakeGateway) {
				g.override = func(w http.ResponseWriter, r *http.Request) bool {
					if r.URL.Path != api.RouteEncrypt {
						return false
					}
					_, _ = io.Copy(io.Discard, r.Body)
					w.Header().Set("Content-Type", "application/json")
					_, _ = io.WriteString(w, tc.answer)
					return true
				}
			})
			out, err := s.Encrypt(t.Context(), EncryptInput{Plaintext: pt})
			if !tc.ok {
				if ae := asAPIError(t, err); ae.Code != api.CodeBadResponse {
					t.Fatalf("got %+v, want BAD_RESPONSE", ae)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out.Ciphertext, toyCipher(pt)) || out.TTag != "T" {
				t.Fatalf("decoded %d bytes under %q", len(out.Ciphertext), out.TTag)
			}
		})
	}
}

func TestDecryptStreamed(t *testing.T) {
	g := newFakeGateway(t)
	s := g.aliceSession(t)
	pt := bigPlaintext()
	got, err := s.Decrypt(t.Context(), "T", make([]byte, api.IVBytes), toyCipher(pt))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, pt) {
		t.Fatalf("decrypt gave %d bytes, not the plaintext", len(got))
	}
}
