package reference

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/pdmcp/pdmcp/gateway/api"
)

// gcmTagBytes is the AES-GCM tag a ciphertext carries beyond its plaintext.
const gcmTagBytes = 16

func newGCM(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("aes key: %w", err)
	}
	// The contract's IV is 16 bytes, so the nonce is too.
	return cipher.NewGCMWithNonceSize(block, api.IVBytes)
}

// deterministicIV is the IV of an encrypt that named none: the same text
// under the same key gets the same IV and so the same ciphertext.
func deterministicIV(key, plaintext []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(plaintext)
	return m.Sum(nil)[:api.IVBytes]
}

func badRequest(detail string) *api.Error {
	return gatewayError(api.CodeBadRequest, http.StatusBadRequest, detail)
}

func notInScope() *api.Error {
	return gatewayError(api.CodeObjectNotInScope, http.StatusForbidden,
		"the t-Tag is not in this scoped session's objects; the key server was not asked; mint or widen a session that covers it")
}

// decodeIV decodes an optional (encrypt) or required (decrypt) IV.
func decodeIV(s string) ([]byte, *api.Error) {
	iv, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(iv) != api.IVBytes {
		return nil, badRequest(fmt.Sprintf("iv must be %d bytes in standard base64; send a valid IV", api.IVBytes))
	}
	return iv, nil
}

func (g *Gateway) encrypt(ctx context.Context, c *call) (any, error) {
	var req api.EncryptRequest
	if err := c.decode(&req); err != nil {
		return nil, err
	}
	s := c.scoped
	if req.TTag != "" && !s.inScope(req.TTag) {
		return nil, notInScope()
	}
	// Check the size from the encoded length first, so that an oversized
	// text is refused without decoding it.
	if base64.StdEncoding.DecodedLen(len(req.Plaintext)) > api.MaxDataBytes+2 {
		return nil, tooLarge("plaintext", api.MaxDataBytes)
	}
	plaintext, err := base64.StdEncoding.DecodeString(req.Plaintext)
	req.Plaintext = ""
	if err != nil {
		return nil, badRequest("plaintext must be standard base64 (with padding); encode it again")
	}
	if len(plaintext) > api.MaxDataBytes {
		return nil, tooLarge("plaintext", api.MaxDataBytes)
	}
	var iv []byte
	if req.IV != "" {
		var e *api.Error
		if iv, e = decodeIV(req.IV); e != nil {
			return nil, e
		}
	}
	seal := func(key []byte) ([]byte, []byte, error) {
		nonce := iv
		if nonce == nil {
			nonce = deterministicIV(key, plaintext)
		}
		aead, err := newGCM(key)
		if err != nil {
			return nil, nil, err
		}
		return nonce, aead.Seal(nil, nonce, plaintext, nil), nil
	}

	var ans encryptAnswer
	if req.TTag == "" {
		if e := s.reserveMint(); e != nil {
			return nil, e
		}
		k, err := g.mintKey(ctx, s, c.now, func(k *keyRecord) error {
			var err error
			ans.iv, ans.ciphertext, err = seal(k.Bytes)
			return err
		})
		if err != nil {
			s.finishMint("")
			return nil, err
		}
		s.finishMint(k.TTag)
		ans.ttag, ans.link, ans.minted = k.TTag, k.Link, true
	} else {
		err := g.runKeyOp(ctx, s, c.now, keyOp{op: OpEncrypt, ttag: req.TTag, role: api.RoleEncrypt,
			needs: needAnyRight, spend: true, do: func(_ *sql.Tx, d *decision) error {
				var err error
				ans.iv, ans.ciphertext, err = seal(d.key.Bytes)
				ans.link = d.key.Link
				return err
			}})
		if err != nil {
			return nil, err
		}
		ans.ttag = req.TTag
	}
	if g.faults.takeLoseEncrypt() {
		dropConnection(c.w)
		return nil, errAnswerDropped
	}
	if status, fail := g.faults.takeFailEncryptAfterWork(); fail {
		return nil, gatewayError(api.CodeInjectedFault, status,
			"the Gateway failed this encrypt after it was done (fault injection); the key may exist")
	}
	return ans.answer()
}

func (g *Gateway) decrypt(ctx context.Context, c *call) (any, error) {
	var req api.DecryptRequest
	if err := c.decode(&req); err != nil {
		return nil, err
	}
	if req.TTag == "" {
		return nil, badRequest("ttag is required; name the key the ciphertext is under")
	}
	s := c.scoped
	if !s.inScope(req.TTag) {
		return nil, notInScope()
	}
	if base64.StdEncoding.DecodedLen(len(req.Ciphertext)) > api.MaxDataBytes+gcmTagBytes+2 {
		return nil, tooLarge("ciphertext", api.MaxDataBytes+gcmTagBytes)
	}
	ciphertext, err := base64.StdEncoding.DecodeString(req.Ciphertext)
	req.Ciphertext = ""
	if err != nil {
		return nil, badRequest("ciphertext must be standard base64 (with padding); send it as encrypt returned it")
	}
	if len(ciphertext) > api.MaxDataBytes+gcmTagBytes {
		return nil, tooLarge("ciphertext", api.MaxDataBytes+gcmTagBytes)
	}
	iv, e := decodeIV(req.IV)
	if e != nil {
		return nil, e
	}
	var ans decryptAnswer
	err = g.runKeyOp(ctx, s, c.now, keyOp{op: OpDecrypt, ttag: req.TTag, role: api.RoleDecrypt,
		needs: needAnyRight, spend: true, do: func(_ *sql.Tx, d *decision) error {
			aead, err := newGCM(d.key.Bytes)
			if err != nil {
				return err
			}
			pt, err := aead.Open(nil, iv, ciphertext, nil)
			if err != nil {
				return keyServerError(api.CodeBadRequest, http.StatusBadRequest,
					"the ciphertext does not open under this key and IV; send the t-Tag, IV and ciphertext that encrypt returned together, do not retry")
			}
			ans.plaintext, ans.link = pt, d.key.Link
			return nil
		}})
	if err != nil {
		return nil, err
	}
	return ans.answer()
}

func tooLarge(field string, limit int) *api.Error {
	return badRequest(fmt.Sprintf("the decoded %s is over the limit of %d bytes; the key server was not asked; send less", field, limit))
}

// dropConnection ends the connection without an answer (fault injection:
// the client must not learn whether the encrypt happened).
func dropConnection(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		conn.Close()
		return
	}
	// HTTP/2 cannot hand over its connection; aborting the handler is the
	// standard library's way to reset the stream with no answer.
	panic(http.ErrAbortHandler)
}

// Large answers are streamed: the small fields as JSON, then the one large
// field base64-encoded in chunks, so that a 16 MiB answer is not held in
// memory twice more as a string and as JSON.

type encryptAnswer struct {
	ttag, link string
	minted     bool
	iv         []byte
	ciphertext []byte
}

func (a *encryptAnswer) answer() (any, error) {
	return newStreamed(struct {
		TTag   string `json:"ttag"`
		IV     string `json:"iv"`
		Minted bool   `json:"minted"`
		Link   string `json:"link"`
	}{a.ttag, base64.StdEncoding.EncodeToString(a.iv), a.minted, a.link}, "ciphertext", a.ciphertext)
}

type decryptAnswer struct {
	link      string
	plaintext []byte
}

func (a *decryptAnswer) answer() (any, error) {
	return newStreamed(struct {
		Link string `json:"link"`
	}{a.link}, "plaintext", a.plaintext)
}

// streamed is a JSON object whose last field is a large base64 string.
type streamed struct {
	head []byte
	data []byte
}

func newStreamed(small any, field string, data []byte) (*streamed, error) {
	head, err := json.Marshal(small)
	if err != nil {
		return nil, err
	}
	name, err := json.Marshal(field)
	if err != nil {
		return nil, err
	}
	// Replace the closing brace with the large field's opening.
	head = append(head[:len(head)-1], ',')
	head = append(head, name...)
	head = append(head, ':', '"')
	return &streamed{head: head, data: data}, nil
}

const streamedTail = "\"}\n"

func (s *streamed) size() int64 {
	return int64(len(s.head) + base64.StdEncoding.EncodedLen(len(s.data)) + len(streamedTail))
}

func (s *streamed) WriteTo(w io.Writer) (int64, error) {
	var total int64
	write := func(b []byte) error {
		n, err := w.Write(b)
		total += int64(n)
		return err
	}
	if err := write(s.head); err != nil {
		return total, err
	}
	// Chunks of a multiple of 3 bytes encode without padding in between.
	const chunk = 3 << 14
	buf := make([]byte, base64.StdEncoding.EncodedLen(chunk))
	for off := 0; off < len(s.data); off += chunk {
		end := min(off+chunk, len(s.data))
		n := base64.StdEncoding.EncodedLen(end - off)
		base64.StdEncoding.Encode(buf[:n], s.data[off:end])
		if err := write(buf[:n]); err != nil {
			return total, err
		}
	}
	return total, write([]byte(streamedTail))
}
