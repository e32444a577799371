package server

import (
	"container/heap"
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

// The bounds of the questions a confirmSeal keeps open. A question stays
// open from when it is asked until it is answered or lapses (confirmTTL),
// and is remembered that long so that its answer is taken once. A user who
// answers what is asked has one or two open at a time; 32 leaves room for
// a host that asks again each time its user closes the form, while one
// user calling hand_off in a loop cannot grow the store past 32 entries
// (before the bound: 513 new states a second, 300,000 entries, each answer
// sweeping all of them under one lock). 4,096 in all is 128 users at their
// own bound, about 1 MiB.
const (
	maxOpenConfirmsPerCaller = 32
	maxOpenConfirms          = 4096
)

// confirmSeal seals and opens confirmStates, and keeps the questions asked
// and not yet answered or lapsed, so one answer confirms one hand-off and
// no caller holds more than its share. Open questions are kept by nonce,
// in a min-heap by expiry (a lapsed one is dropped in O(log n)), and in a
// short list per caller (at most perCaller long).
type confirmSeal struct {
	key []byte
	// perCaller and total bound the open questions: one caller's, and
	// every caller's together.
	perCaller, total int

	mu       sync.Mutex
	asked    map[string]*openConfirm // by nonce
	byExpiry confirmHeap
	byCaller map[string][]*openConfirm
}

// openConfirm is one question asked and not yet answered.
type openConfirm struct {
	nonce, caller string
	expiry        int64 // Unix seconds, as confirmState.Expiry
	index         int   // in the heap
}

func newConfirmSeal() (*confirmSeal, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("server: confirmation secret: %w", err)
	}
	return &confirmSeal{key: key, perCaller: maxOpenConfirmsPerCaller, total: maxOpenConfirms,
		asked: map[string]*openConfirm{}, byCaller: map[string][]*openConfirm{}}, nil
}

func (cs *confirmSeal) mac(payload []byte) []byte {
	m := hmac.New(sha256.New, cs.key)
	m.Write([]byte("pdmcp hand-off confirmation v1\x00"))
	m.Write(payload)
	return m.Sum(nil)
}

// errTooManyConfirms is an ask over a bound; retryAfter is when the
// oldest question in the way lapses.
type errTooManyConfirms struct {
	caller     bool // the caller's own bound, not the server's
	open       int
	retryAfter time.Duration
}

func (e *errTooManyConfirms) Error() string {
	return fmt.Sprintf("%d confirmations open", e.open)
}

// ask gives st a fresh nonce, keeps it as an open question until
// st.Expiry, and returns its requestState. Over the caller's bound or the
// server's it returns *errTooManyConfirms and keeps nothing.
func (cs *confirmSeal) ask(st confirmState, now time.Time) (string, error) {
	nonce, err := newNonce()
	if err != nil {
		return "", err
	}
	st.Nonce = nonce
	state, err := cs.seal(st)
	if err != nil {
		return "", err
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.dropLapsed(now)
	if mine := cs.byCaller[st.Caller]; len(mine) >= cs.perCaller {
		return "", &errTooManyConfirms{caller: true, open: len(mine), retryAfter: until(now, oldest(mine))}
	}
	if len(cs.byExpiry) >= cs.total {
		return "", &errTooManyConfirms{open: len(cs.byExpiry), retryAfter: until(now, cs.byExpiry[0].expiry)}
	}
	q := &openConfirm{nonce: nonce, caller: st.Caller, expiry: st.Expiry}
	cs.asked[nonce] = q
	heap.Push(&cs.byExpiry, q)
	cs.byCaller[st.Caller] = append(cs.byCaller[st.Caller], q)
	return state, nil
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
//
// The lenient decoder reads the two halves: a state spelt with other
// padding bits in a last character opens as the same state. That is safe
// because an answer is spent by the nonce inside the sealed bytes, never
// by the string (TestConfirmationStateSpeltAnotherWayIsTheSameAnswer).
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

// spend takes the answer to st: true once for a question asked and open,
// false for one answered before, lapsed, or never kept.
func (cs *confirmSeal) spend(st confirmState, now time.Time) bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.dropLapsed(now)
	q, ok := cs.asked[st.Nonce]
	if !ok || q.caller != st.Caller {
		return false
	}
	cs.drop(q)
	heap.Remove(&cs.byExpiry, q.index)
	return true
}

// dropLapsed drops the questions that lapsed before now, each in
// O(log n); of those still open only the heap's root is looked at.
func (cs *confirmSeal) dropLapsed(now time.Time) {
	for len(cs.byExpiry) > 0 && cs.byExpiry[0].expiry < now.Unix() {
		cs.drop(heap.Pop(&cs.byExpiry).(*openConfirm))
	}
}

// drop forgets q by nonce and from its caller's list; the caller removes
// it from the heap.
func (cs *confirmSeal) drop(q *openConfirm) {
	delete(cs.asked, q.nonce)
	mine := cs.byCaller[q.caller]
	for i, o := range mine {
		if o == q {
			mine = append(mine[:i], mine[i+1:]...)
			break
		}
	}
	if len(mine) == 0 {
		delete(cs.byCaller, q.caller)
		return
	}
	cs.byCaller[q.caller] = mine
}

// openCount is how many questions are open, the lapsed ones dropped.
func (cs *confirmSeal) openCount(now time.Time) int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.dropLapsed(now)
	return len(cs.byExpiry)
}

// oldest is the earliest expiry among qs (non-empty).
func oldest(qs []*openConfirm) int64 {
	e := qs[0].expiry
	for _, q := range qs[1:] {
		e = min(e, q.expiry)
	}
	return e
}

// until is the wait from now until just after the Unix second expiry has
// passed (a question lapses once the clock is past its expiry second).
func until(now time.Time, expiry int64) time.Duration {
	return max(time.Unix(expiry+1, 0).Sub(now), time.Second)
}

// confirmHeap orders open questions by expiry, earliest first
// (container/heap).
type confirmHeap []*openConfirm

func (h confirmHeap) Len() int           { return len(h) }
func (h confirmHeap) Less(i, j int) bool { return h[i].expiry < h[j].expiry }
func (h confirmHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}

func (h *confirmHeap) Push(x any) {
	q := x.(*openConfirm)
	q.index = len(*h)
	*h = append(*h, q)
}

func (h *confirmHeap) Pop() any {
	old := *h
	q := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return q
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
