package server

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// asker asks questions of a confirmSeal on a clock moved by hand.
type asker struct {
	t   *testing.T
	cs  *confirmSeal
	now time.Time
}

func newAsker(t *testing.T, perCaller, total int) *asker {
	t.Helper()
	cs, err := newConfirmSeal()
	if err != nil {
		t.Fatal(err)
	}
	cs.perCaller, cs.total = perCaller, total
	return &asker{t: t, cs: cs, now: time.Unix(1_800_000_000, 0)}
}

// ask asks a question of caller lapsing confirmTTL from now, and returns
// the state as the host echoes it (opened), or the bound's error.
func (a *asker) ask(caller string) (confirmState, error) {
	a.t.Helper()
	token, err := a.cs.ask(confirmState{Caller: caller, Step: "s", Expiry: a.now.Add(confirmTTL).Unix()}, a.now)
	if err != nil {
		return confirmState{}, err
	}
	st, ok := a.cs.open(token)
	if !ok {
		a.t.Fatalf("the state asked does not open: %q", token)
	}
	return st, nil
}

func (a *asker) mustAsk(caller string) confirmState {
	a.t.Helper()
	st, err := a.ask(caller)
	if err != nil {
		a.t.Fatalf("%s: %v", caller, err)
	}
	return st
}

// refused checks that err is the bound's refusal, of the caller's own
// bound or the server's, with a wait until the oldest lapses.
func (a *asker) refused(err error, callerBound bool, open int, wait time.Duration) {
	a.t.Helper()
	var over *errTooManyConfirms
	if !errors.As(err, &over) {
		a.t.Fatalf("got %v, want the bound's refusal", err)
	}
	if over.caller != callerBound || over.open != open || over.retryAfter != wait {
		a.t.Fatalf("refusal %+v, want caller bound %v, %d open, wait %s", over, callerBound, open, wait)
	}
}

// TestConfirmationsAreBoundedPerCallerAndInAll (issue 31 item 7): one
// caller asking without answering stays within its bound, and then is
// refused with the wait until its oldest question lapses, while another
// caller still gets questions; the server's bound holds over all callers.
// Lapsed questions are dropped and make room again; an answer is taken
// once, and frees its place.
func TestConfirmationsAreBoundedPerCallerAndInAll(t *testing.T) {
	a := newAsker(t, 4, 10)
	var alice []confirmState
	for range 4 {
		alice = append(alice, a.mustAsk("alice"))
		a.now = a.now.Add(time.Minute)
	}
	// alice's oldest lapses ten minutes after it was asked, four minutes
	// ago: six minutes and a second on.
	_, err := a.ask("alice")
	a.refused(err, true, 4, 6*time.Minute+time.Second)
	if got := a.cs.openCount(a.now); got != 4 {
		t.Fatalf("%d open after a refused question, want 4", got)
	}
	bob := a.mustAsk("bob")

	// An answer is taken once and frees its place.
	if !a.cs.spend(alice[1], a.now) || a.cs.spend(alice[1], a.now) {
		t.Fatal("alice's answer: not taken once")
	}
	if a.cs.spend(confirmState{Caller: "bob", Nonce: alice[2].Nonce}, a.now) {
		t.Fatal("bob spent alice's question")
	}
	alice = append(alice, a.mustAsk("alice"))

	// The server's bound: 10 in all.
	for i := range 5 {
		a.mustAsk(fmt.Sprint("carol", i))
	}
	if got := a.cs.openCount(a.now); got != 10 {
		t.Fatalf("%d open, want 10", got)
	}
	_, err = a.ask("dave")
	a.refused(err, false, 10, 6*time.Minute+time.Second)

	// Past the first question's lapse, it is dropped: alice may ask again,
	// and her lapsed question is not taken.
	a.now = a.now.Add(6*time.Minute + time.Second)
	if got := a.cs.openCount(a.now); got != 9 {
		t.Fatalf("%d open after alice's first lapsed, want 9", got)
	}
	if a.cs.spend(alice[0], a.now) {
		t.Fatal("a lapsed question's answer was taken")
	}
	a.mustAsk("alice")

	// Every question lapses in time, and none is kept past it.
	a.now = a.now.Add(confirmTTL + time.Second)
	if got := a.cs.openCount(a.now); got != 0 || len(a.cs.asked) != 0 || len(a.cs.byCaller) != 0 {
		t.Fatalf("after every question lapsed: %d in the heap, %d by nonce, %d callers", got, len(a.cs.asked), len(a.cs.byCaller))
	}
	if a.cs.spend(bob, a.now) {
		t.Fatal("bob's lapsed question's answer was taken")
	}
}

// TestConfirmationsBoundedAtTheirDefaults: with the bounds a server
// runs with, one caller asking in a loop holds maxOpenConfirmsPerCaller
// questions and no more, and other callers still get theirs until the
// server's bound.
func TestConfirmationsBoundedAtTheirDefaults(t *testing.T) {
	a := newAsker(t, maxOpenConfirmsPerCaller, maxOpenConfirms)
	for range 10 * maxOpenConfirmsPerCaller {
		if _, err := a.ask("mallory"); err != nil {
			var over *errTooManyConfirms
			if !errors.As(err, &over) || !over.caller {
				t.Fatalf("mallory: %v", err)
			}
		}
	}
	if got := a.cs.openCount(a.now); got != maxOpenConfirmsPerCaller {
		t.Fatalf("one caller holds %d open questions, want %d", got, maxOpenConfirmsPerCaller)
	}
	for i := maxOpenConfirmsPerCaller; i < maxOpenConfirms; i++ {
		a.mustAsk(fmt.Sprint("user", i))
	}
	_, err := a.ask("alice")
	a.refused(err, false, maxOpenConfirms, confirmTTL+time.Second)
}
