package server

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/pdmcp/pdmcp/server/handoff"
)

// confirmTTL is how long the host's user has to answer a hand-off's
// confirmation on the 2026-07-28 protocol (the answer arrives with a new
// call carrying the request state).
const confirmTTL = 10 * time.Minute

// confirmState is the question a hand-off's confirmation asked, carried in
// the input-required result's requestState and echoed by the host with its
// answer: who was asked (the verified caller, under this grant), about
// which step and what exactly (a digest of the recipient and sections),
// until when the hand-off would last, and until when the question stands.
// It is sealed with a secret this server process drew at start, so a host
// cannot make one up, alter one, or carry one to another server.
type confirmState struct {
	Caller string `json:"c"`
	Grant  string `json:"g"`
	Step   string `json:"s"`
	Plan   string `json:"p"`
	End    int64  `json:"e"` // the hand-off's end asked about, Unix seconds (Gateway clock)
	Expiry int64  `json:"x"` // the question lapses then, Unix seconds (this server's clock)
	Nonce  string `json:"n"`
}

// confirmSeal seals and opens confirmStates, and remembers the nonces of
// the answers already taken, so one answer confirms one hand-off.
type confirmSeal struct {
	key []byte

	mu   sync.Mutex
	used map[string]int64 // nonce -> the state's expiry, Unix seconds
}

func newConfirmSeal() (*confirmSeal, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("server: confirmation secret: %w", err)
	}
	return &confirmSeal{key: key, used: map[string]int64{}}, nil
}

func (cs *confirmSeal) mac(payload []byte) []byte {
	m := hmac.New(sha256.New, cs.key)
	m.Write([]byte("pdmcp hand-off confirmation v1\x00"))
	m.Write(payload)
	return m.Sum(nil)
}

// seal is the requestState for st.
func (cs *confirmSeal) seal(st confirmState) (string, error) {
	payload, err := json.Marshal(st)
	if err != nil {
		return "", err
	}
	enc := base64.RawURLEncoding
	return enc.EncodeToString(payload) + "." + enc.EncodeToString(cs.mac(payload)), nil
}

// open returns the state sealed in token, or false if it was not sealed by
// this server as it reads now.
func (cs *confirmSeal) open(token string) (confirmState, bool) {
	var st confirmState
	body, sig, ok := strings.Cut(token, ".")
	if !ok {
		return st, false
	}
	enc := base64.RawURLEncoding
	payload, err1 := enc.DecodeString(body)
	got, err2 := enc.DecodeString(sig)
	if err1 != nil || err2 != nil || !hmac.Equal(got, cs.mac(payload)) {
		return st, false
	}
	if json.Unmarshal(payload, &st) != nil {
		return st, false
	}
	return st, true
}

// spend records that the answer to st was taken; false if it already was.
func (cs *confirmSeal) spend(st confirmState, now time.Time) bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for n, exp := range cs.used {
		if now.Unix() > exp {
			delete(cs.used, n)
		}
	}
	if _, seen := cs.used[st.Nonce]; seen {
		return false
	}
	cs.used[st.Nonce] = st.Expiry
	return true
}

func newNonce() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("server: confirmation nonce: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// planDigest names what a confirmation asks about: the step, its
// recipient's ids and label, and each section with its key. The manifest
// changing any of them between the question and the answer makes the
// answer one to another question.
func planDigest(p *handoff.Plan) string {
	h := sha256.New()
	fmt.Fprintf(h, "%q %q %d %q %q\n", p.StepID, p.Step.Label, p.Step.To.SystemID, p.Step.To.PrincipalID, p.Step.To.Label)
	for _, s := range p.Sections {
		fmt.Fprintf(h, "%q %q %q %q %q\n", s.DocumentID, s.FragmentID, s.DataType, s.Label, p.TypeKey[s.DataType])
	}
	return hex.EncodeToString(h.Sum(nil))
}
