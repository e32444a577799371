package files

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/internal/jsonb64"
	"github.com/pdmcp/pdmcp/internal/lowerhex"
	"github.com/pdmcp/pdmcp/server/refusal"
)

// The envelope encrypt_file writes beside a file: JSON, format
// "pisoft-file-envelope", formatVersion 1. It holds what a decrypt needs
// (the key's t-Tag, the IV, the ciphertext) and what the plaintext was (its
// name, size and sha256), and nothing else: no session handle, proof,
// credential or plaintext.
const (
	EnvelopeFormat  = "pisoft-file-envelope"
	EnvelopeVersion = 1
	// EnvelopeExt is the envelope's name suffix: <name>.pisoft.
	EnvelopeExt = ".pisoft"
	// gcmTagBytes is what AES-GCM adds to a plaintext.
	gcmTagBytes = 16
	// envelopeOverhead bounds everything in an envelope but the
	// ciphertext's base64: the fields, a t-Tag, an IV, a name and a hash.
	envelopeOverhead = 64 << 10
)

// MaxEnvelopeBytes is the largest envelope that can hold a file of
// api.MaxDataBytes; decrypt_file refuses a larger one before reading it.
const MaxEnvelopeBytes = (api.MaxDataBytes+gcmTagBytes+2)/3*4 + envelopeOverhead

// Envelope is an envelope's content.
type Envelope struct {
	CreatedAt  time.Time
	TTag       string
	IV         []byte
	Ciphertext []byte
	Name       string // the plaintext's file name, no folder
	Bytes      int64
	SHA256     string // the plaintext's sha256, lowercase hex
}

type plaintextInfo struct {
	Name   string `json:"name"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// WriteEnvelope writes e as JSON to w, streaming the ciphertext's base64 so
// no second copy of it is made in memory.
func WriteEnvelope(w io.Writer, e Envelope) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	head := struct {
		Format        string `json:"format"`
		FormatVersion int    `json:"formatVersion"`
		CreatedAt     string `json:"createdAt"`
		TTag          string `json:"ttag"`
		IV            []byte `json:"iv"`
	}{EnvelopeFormat, EnvelopeVersion, e.CreatedAt.UTC().Format(time.RFC3339), e.TTag, e.IV}
	hb, err := json.Marshal(head)
	if err != nil {
		return fmt.Errorf("envelope: %w", err)
	}
	tail, err := json.Marshal(plaintextInfo{Name: e.Name, Bytes: e.Bytes, SHA256: e.SHA256})
	if err != nil {
		return fmt.Errorf("envelope: %w", err)
	}
	// head without its closing brace, then the ciphertext field.
	bw.Write(hb[:len(hb)-1])
	bw.WriteString(`,"ciphertext":"`)
	enc := base64.NewEncoder(base64.StdEncoding, bw)
	enc.Write(e.Ciphertext)
	enc.Close()
	bw.WriteString(`","plaintext":`)
	bw.Write(tail)
	bw.WriteString("}\n")
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("envelope: write: %w", err)
	}
	return nil
}

// ReadEnvelope parses an envelope of at most MaxEnvelopeBytes. Anything that
// is not a version 1 envelope with every field present is NOT_AN_ENVELOPE;
// an unknown field is too, since the server writes none. size is the
// envelope's size when known (0 if not): the ciphertext's buffer is then
// made once, not grown.
func ReadEnvelope(r io.Reader, size int64, p string) (Envelope, error) {
	var doc struct {
		Format        *string        `json:"format"`
		FormatVersion *int           `json:"formatVersion"`
		CreatedAt     *string        `json:"createdAt"`
		TTag          *string        `json:"ttag"`
		IV            []byte         `json:"iv"`
		Ciphertext    []byte         `json:"ciphertext"`
		Plaintext     *plaintextInfo `json:"plaintext"`
	}
	not := func(why string) (Envelope, error) {
		return Envelope{}, refuse(refusal.NotAnEnvelope, "%q is not an envelope encrypt_file wrote: %s", p, why)
	}
	// The ciphertext's base64 is decoded as it is read, so the envelope's
	// text and the ciphertext are never both held whole.
	hint := 0
	if size > 0 && size <= MaxEnvelopeBytes {
		hint = int(size / 4 * 3)
	}
	res, err := jsonb64.Read(r, "ciphertext", hint, MaxEnvelopeBytes)
	switch {
	case errors.Is(err, jsonb64.ErrTooLarge):
		return not("it is larger than any envelope")
	case errors.Is(err, jsonb64.ErrFormat):
		return not("it is not the envelope's JSON")
	case err != nil:
		return not("it could not be read")
	}
	dec := json.NewDecoder(bytes.NewReader(res.Rest))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		return not("it is not the envelope's JSON")
	}
	if res.Seen {
		doc.Ciphertext = res.Data
	}
	if dec.More() {
		return not("it holds more than one JSON value")
	}
	if doc.Format == nil || *doc.Format != EnvelopeFormat {
		return not("its format is not " + EnvelopeFormat)
	}
	if doc.FormatVersion == nil || *doc.FormatVersion != EnvelopeVersion {
		return not("its formatVersion is not 1")
	}
	if doc.TTag == nil || *doc.TTag == "" || len(doc.IV) == 0 || len(doc.Ciphertext) == 0 || doc.Plaintext == nil ||
		doc.CreatedAt == nil {
		return not("a field is missing")
	}
	created, err := time.Parse(time.RFC3339, *doc.CreatedAt)
	if err != nil {
		return not("its createdAt is not a time")
	}
	pt := doc.Plaintext
	if pt.Bytes <= 0 || pt.Bytes > api.MaxDataBytes || !lowerhex.Valid(pt.SHA256, 64) || pt.Name == "" ||
		strings.ContainsAny(pt.Name, `/\`) {
		return not("its plaintext record is not valid")
	}
	return Envelope{CreatedAt: created, TTag: *doc.TTag, IV: doc.IV, Ciphertext: doc.Ciphertext,
		Name: pt.Name, Bytes: pt.Bytes, SHA256: pt.SHA256}, nil
}

// IsEnvelopeName reports a name ending in .pisoft, in any case.
func IsEnvelopeName(name string) bool {
	return len(name) > len(EnvelopeExt) && strings.EqualFold(name[len(name)-len(EnvelopeExt):], EnvelopeExt)
}

// DecryptedName is the n-th candidate name for a decrypted file: for
// "report.docx", "report.decrypted.docx" then "report.decrypted-2.docx"; a
// name with no extension (or a dot file) gets ".decrypted" at its end.
func DecryptedName(name string, n int) string {
	base, ext := name, ""
	if i := strings.LastIndexByte(name, '.'); i > 0 {
		base, ext = name[:i], name[i:]
	}
	suffix := ".decrypted"
	if n > 1 {
		suffix = fmt.Sprintf(".decrypted-%d", n)
	}
	return base + suffix + ext
}
