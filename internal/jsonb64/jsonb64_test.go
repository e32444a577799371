package jsonb64

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

type doc struct {
	TTag       string `json:"ttag"`
	Ciphertext []byte `json:"ciphertext"`
	Minted     bool   `json:"minted"`
}

// decodeBoth reads text with Read (then unmarshals Rest) and with
// json.Unmarshal, the behaviour Read must keep.
func decodeBoth(t *testing.T, text string, r io.Reader) (got, want doc, gotErr, wantErr error) {
	t.Helper()
	wantErr = json.Unmarshal([]byte(text), &want)
	res, err := Read(r, "ciphertext", 0, 1<<30)
	if err != nil {
		return got, want, err, wantErr
	}
	if err := json.Unmarshal(res.Rest, &got); err != nil {
		return got, want, err, wantErr
	}
	if res.Seen {
		got.Ciphertext = res.Data
	}
	return got, want, nil, wantErr
}

func TestReadMatchesUnmarshal(t *testing.T) {
	big := make([]byte, 3*chunk+5)
	for i := range big {
		big[i] = byte(i * 7)
	}
	bigB64 := base64.StdEncoding.EncodeToString(big)
	cases := []struct {
		name string
		text string
		ok   bool
	}{
		{"plain", `{"ttag":"T","ciphertext":"` + bigB64 + `","minted":true}`, true},
		{"field first", `{"ciphertext":"QUJD","ttag":"T"}`, true},
		{"spaces", "{ \"ttag\" : \"T\" ,\n \"ciphertext\" :\t\"QUJD\" }", true},
		{"other case", `{"CipherText":"QUJD"}`, true},
		{"escaped slash", `{"ciphertext":"` + strings.ReplaceAll(bigB64, "/", `\/`) + `"}`, true},
		{"unicode escapes", `{"ciphertext":"\u0051UJ\u0044"}`, true},
		{"escaped newline ignored", `{"ciphertext":"QUJD\nQUJD"}`, true},
		{"empty", `{"ciphertext":""}`, true},
		{"nested same name", `{"x":{"ciphertext":"not base64!"},"ciphertext":"QUJD"}`, true},
		{"name inside a value", `{"ttag":"ciphertext","ciphertext":"QUJD"}`, true},
		{"array of names", `{"x":["ciphertext","QUJD"],"ciphertext":"QUJD"}`, true},
		{"escaped name left to unmarshal", `{"cipher\u0074ext":"QUJD"}`, true},
		{"null", `{"ciphertext":null}`, true},
		{"padding", `{"ciphertext":"QUI="}`, true},
		{"not base64", `{"ciphertext":"QU!D"}`, false},
		{"bad escape", `{"ciphertext":"QU\tJD"}`, false},
		{"escaped quote", `{"ciphertext":"QU\"JD"}`, false},
		{"control char", "{\"ciphertext\":\"QU\x01JD\"}", false},
		{"data after padding", `{"ciphertext":"QQ==QUJD"}`, false},
		{"unterminated", `{"ciphertext":"QUJD`, false},
		{"not an object", `[1,2`, false},
		{"trailing garbage", `{"ciphertext":"QUJD"}x`, false},
		{"number", `{"ciphertext":12}`, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, r := range []io.Reader{strings.NewReader(tc.text), iotest.OneByteReader(strings.NewReader(tc.text))} {
				got, want, gotErr, wantErr := decodeBoth(t, tc.text, r)
				if (wantErr == nil) != tc.ok {
					t.Fatalf("json.Unmarshal: %v; the case expects ok=%v", wantErr, tc.ok)
				}
				if (gotErr == nil) != tc.ok {
					t.Fatalf("Read: %v, want ok=%v", gotErr, tc.ok)
				}
				if tc.ok && (got.TTag != want.TTag || !bytes.Equal(got.Ciphertext, want.Ciphertext) || got.Minted != want.Minted ||
					(got.Ciphertext == nil) != (want.Ciphertext == nil)) {
					t.Fatalf("Read gave %+v, json.Unmarshal %+v", got, want)
				}
			}
		})
	}
}

func TestReadStreamsTheField(t *testing.T) {
	data := bytes.Repeat([]byte("pdmcp"), 100_000)
	text := `{"ttag":"T","ciphertext":"` + base64.StdEncoding.EncodeToString(data) + `"}`
	res, err := Read(strings.NewReader(text), "ciphertext", len(data), int64(len(text)))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Seen || !bytes.Equal(res.Data, data) {
		t.Fatalf("field not decoded: seen %v, %d bytes", res.Seen, len(res.Data))
	}
	if string(res.Rest) != `{"ttag":"T","ciphertext":""}` {
		t.Fatalf("rest %q", res.Rest)
	}
	if cap(res.Data) != len(data) {
		t.Fatalf("data grew past its hint: cap %d, len %d", cap(res.Data), len(data))
	}
}

func TestReadTwiceAndLimit(t *testing.T) {
	if _, err := Read(strings.NewReader(`{"ciphertext":"QUJD","Ciphertext":"QUJD"}`), "ciphertext", 0, 1<<20); !errors.Is(err, ErrFormat) {
		t.Fatalf("a second member: %v, want ErrFormat", err)
	}
	text := `{"ciphertext":"QUJD"}`
	if _, err := Read(strings.NewReader(text), "ciphertext", 0, int64(len(text)-1)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("over the limit: %v, want ErrTooLarge", err)
	}
	if _, err := Read(strings.NewReader(text), "ciphertext", 0, int64(len(text))); err != nil {
		t.Fatalf("at the limit: %v", err)
	}
	boom := errors.New("boom")
	if _, err := Read(iotest.ErrReader(boom), "ciphertext", 0, 1<<20); !errors.Is(err, boom) {
		t.Fatalf("read error: %v", err)
	}
}
