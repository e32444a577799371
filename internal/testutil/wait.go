package testutil

import (
	"testing"
	"time"
)

// WaitFor polls cond until it holds; it fails the test when it does not
// within a generous bound. It asserts that something comes, not how soon.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
