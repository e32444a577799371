package files

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/server/refusal"
)

// TestEnvelopeRoundTrip: what WriteEnvelope writes, ReadEnvelope reads back
// (the ciphertext decoded while it is read), with or without the size, and
// with the ciphertext's slashes escaped as another JSON writer might.
func TestEnvelopeRoundTrip(t *testing.T) {
	ct := make([]byte, 200_001)
	for i := range ct {
		ct[i] = byte(i*7 + i>>9)
	}
	in := Envelope{CreatedAt: time.Date(2026, 12, 1, 16, 0, 0, 0, time.UTC), TTag: "T-1", IV: []byte("0123456789ab"),
		Ciphertext: ct, Name: "q3.csv", Bytes: 199_985, SHA256: strings.Repeat("ab", 32)}
	var buf bytes.Buffer
	if err := WriteEnvelope(&buf, in); err != nil {
		t.Fatal(err)
	}
	text := buf.String()
	if !strings.Contains(text, "/") {
		t.Fatal("the test's ciphertext should have a / in its base64")
	}
	for _, tc := range []struct {
		name string
		text string
		size int64
	}{
		{"as written, sized", text, int64(len(text))},
		{"as written, size unknown", text, 0},
		{"escaped slashes", strings.ReplaceAll(text, "/", `\/`), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReadEnvelope(strings.NewReader(tc.text), tc.size, "q3.csv.pisoft")
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Ciphertext, ct) || got.TTag != in.TTag || !bytes.Equal(got.IV, in.IV) || got.Name != in.Name ||
				got.Bytes != in.Bytes || got.SHA256 != in.SHA256 || !got.CreatedAt.Equal(in.CreatedAt) {
				t.Fatalf("read back %+v", got)
			}
		})
	}
	for name, bad := range map[string]string{
		"ciphertext not base64": strings.Replace(text, `"ciphertext":"`, `"ciphertext":"!`, 1),
		"an unknown field":      strings.Replace(text, `"ttag"`, `"extra":1,"ttag"`, 1),
		"two values":            text + text,
		"cut short":             text[:len(text)/2],
		"ciphertext empty":      text[:strings.Index(text, `"ciphertext":"`)+len(`"ciphertext":"`)] + text[strings.Index(text, `","plaintext"`):],
	} {
		_, err := ReadEnvelope(strings.NewReader(bad), 0, "x.pisoft")
		var fe *Error
		if !errors.As(err, &fe) || fe.Code != refusal.NotAnEnvelope {
			t.Errorf("%s: %v, want NOT_AN_ENVELOPE", name, err)
		}
	}
}
