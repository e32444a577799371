package audit

import (
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/pdmcp/pdmcp/internal/safefile"
)

// Signed heads. The chain alone shows an edit to anyone who has the file,
// but anyone who can write the file can also compute a new chain. With a
// key the operator names (Options.HeadKey), the Log writes now and then an
// "audit-head" line whose signature covers the chain's head: the hash that
// line names as "prev" (or "prevFile"), which commits to every line before
// it. A party without the private key can then change nothing before the
// last signed head without Verify (given the public key) finding it. Lines
// after the last signed head are covered by the chain only; cutting them
// off the end is not detectable from the file.
//
// The signature is Ed25519 over the bytes
//
//	"pdmcp audit head v1\n" + <the head, 64 lowercase hex digits>
//
// and the line is
//
//	{"event":"audit-head","ts":"…","keyId":"<12 hex>","sig":"<base64url, no padding>","prev":"<the head>"}
//
// where keyId is the first 12 hex digits of the SHA-256 of the public
// key's 32 bytes.

// EventHead is the event of a signed head line.
const EventHead = "audit-head"

// headContext is signed ahead of the head, so the signature cannot be
// taken for one over anything else.
const headContext = "pdmcp audit head v1\n"

// Defaults for when a signed head is written: after HeadEvery lines, or
// with the first line written HeadInterval after the last head; and always
// at Close and Reopen.
const (
	HeadEvery    = 64
	HeadInterval = time.Minute
)

// HeadKey is an Ed25519 key for signed heads: the private key to sign
// with (Log), or only the public key to check with (Verify).
type HeadKey struct {
	priv ed25519.PrivateKey
	pub  ed25519.PublicKey
	id   string
}

// ErrKeyFile: a key file is not an Ed25519 key in PEM.
var ErrKeyFile = errors.New("not an Ed25519 key in PEM (PKCS #8 \"PRIVATE KEY\" or PKIX \"PUBLIC KEY\")")

// LoadHeadKey reads an Ed25519 key in PEM: a PKCS #8 "PRIVATE KEY" (as
// `openssl genpkey -algorithm ed25519` writes it) to sign with, or a PKIX
// "PUBLIC KEY" (`openssl pkey -pubout`) to check with. A private key file
// that group or others can read is refused, as the audit file is.
func LoadHeadKey(path string) (*HeadKey, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("audit: head key: %w", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("audit: head key: %w", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, fmt.Errorf("audit: head key %s: %w", path, ErrKeyFile)
	}
	switch blk.Type {
	case "PRIVATE KEY":
		if err := checkPrivate(fi); err != nil {
			return nil, fmt.Errorf("audit: head key: %w", modeError{&safefile.ModeError{Path: path, Mode: fi.Mode(), Secret: true}})
		}
		k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
		priv, ok := k.(ed25519.PrivateKey)
		if err != nil || !ok {
			return nil, fmt.Errorf("audit: head key %s: %w", path, ErrKeyFile)
		}
		return NewHeadKey(priv), nil
	case "PUBLIC KEY":
		k, err := x509.ParsePKIXPublicKey(blk.Bytes)
		pub, ok := k.(ed25519.PublicKey)
		if err != nil || !ok {
			return nil, fmt.Errorf("audit: head key %s: %w", path, ErrKeyFile)
		}
		return PublicHeadKey(pub), nil
	}
	return nil, fmt.Errorf("audit: head key %s: %w", path, ErrKeyFile)
}

// NewHeadKey is a key that signs with priv.
func NewHeadKey(priv ed25519.PrivateKey) *HeadKey {
	k := PublicHeadKey(priv.Public().(ed25519.PublicKey))
	k.priv = priv
	return k
}

// PublicHeadKey is a key that checks signatures of pub.
func PublicHeadKey(pub ed25519.PublicKey) *HeadKey {
	sum := sha256.Sum256(pub)
	return &HeadKey{pub: pub, id: hex.EncodeToString(sum[:6])}
}

// ID is the key's id as a head line names it.
func (k *HeadKey) ID() string { return k.id }

// CanSign reports whether k holds the private key.
func (k *HeadKey) CanSign() bool { return k != nil && k.priv != nil }

// headLine is the bytes of a signed head line up to the chain member,
// which write adds: the signature covers head.
func (k *HeadKey) headLine(now time.Time, head string) []byte {
	sig := ed25519.Sign(k.priv, []byte(headContext+head))
	ts, _ := json.Marshal(now.UTC().Truncate(time.Millisecond))
	return []byte(`{"event":"` + EventHead + `","ts":` + string(ts) + `,"keyId":"` + k.id +
		`","sig":"` + base64.RawURLEncoding.EncodeToString(sig) + `"}` + "\n")
}

// headRef is what Verify reads of a head line.
type headRef struct {
	KeyID string `json:"keyId"`
	Sig   string `json:"sig"`
}

// headDue reports whether a signed head is to follow the line just
// written. Called with l.mu held.
func (l *Log) headDue() bool {
	return l.headKey != nil && l.sinceHead > 0 &&
		(l.sinceHead >= HeadEvery || l.clock().Sub(l.headAt) >= HeadInterval)
}

// signHeadLocked writes a signed head line. A failure is logged, not
// returned: the line it follows was written. Called with l.mu held.
func (l *Log) signHeadLocked() {
	now := l.clock()
	err := l.appendLocked(EventHead, func(head string) []byte {
		return append([]byte{'\n'}, l.headKey.headLine(now, head)...)
	})
	if err != nil {
		l.slogger().Error("audit write failed", "event", EventHead, "err", err)
		return
	}
	l.sinceHead, l.headAt = 0, now
}

// checkHead checks a signed head line against the key given, if any.
func (v *verifier) checkHead(path string, lineNo int, b []byte, ref chainRef) {
	if v.key == nil {
		return
	}
	var h headRef
	_ = json.Unmarshal(b, &h)
	head := ""
	switch {
	case ref.Prev != nil:
		head = *ref.Prev
	case ref.PrevFile != nil:
		head = *ref.PrevFile
	}
	sig, err := base64.RawURLEncoding.DecodeString(h.Sig)
	switch {
	case h.KeyID != v.key.id:
		v.brk(path, lineNo, BreakSignature, "the head is signed with another key (keyId %q; the key given is %s)", clip(h.KeyID, 16), v.key.id)
	case err != nil || !ed25519.Verify(v.key.pub, []byte(headContext+head), sig):
		v.brk(path, lineNo, BreakSignature, "the head's signature does not hold for the key given: the head line was changed, or the lines before it and their chain were written anew")
	default:
		v.rep.SignedHeads++
		v.unsigned = 0
		v.lastSigned = Finding{File: path, Line: lineNo}
	}
}

// finishHeads checks, with a key given, that the files hold a signed head
// and says how many lines come after the last one.
func (v *verifier) finishHeads() {
	if v.key == nil {
		return
	}
	if v.rep.SignedHeads == 0 {
		last := v.rep.Files[len(v.rep.Files)-1].Path
		v.brk(last, 0, BreakSignature, "no head signed with key %s: the files were written without it, or rewritten", v.key.id)
		return
	}
	if v.unsigned > 0 {
		v.note(v.lastSigned.File, v.lastSigned.Line, NoteUnsigned, "%d lines come after the last signed head (here): the chain covers them, the signature does not", v.unsigned)
	}
}
