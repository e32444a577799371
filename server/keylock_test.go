package server

import (
	"context"
	"errors"
	"testing"
)

func TestKeyLocks(t *testing.T) {
	var k keyLocks
	ctx := context.Background()
	unlockA, err := k.lock(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	// Another key is free while "a" is held.
	unlockB, err := k.lock(ctx, "b")
	if err != nil {
		t.Fatalf("key b while a is held: %v", err)
	}
	unlockB()
	// The same key waits; a waiter whose context ends gives up.
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := k.lock(done, "a"); !errors.Is(err, context.Canceled) {
		t.Fatalf("second lock of a held key: %v, want context.Canceled", err)
	}
	got := make(chan struct{})
	go func() {
		unlock, err := k.lock(ctx, "a")
		if err == nil {
			unlock()
		}
		close(got)
	}()
	select {
	case <-got:
		t.Fatal("a held key was taken twice")
	default:
	}
	unlockA()
	<-got
	if n := k.held(); n != 0 {
		t.Errorf("%d keys still tracked after every lock was released", n)
	}
}
