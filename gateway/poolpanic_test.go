package gateway

import (
	"context"
	"testing"
)

// panicMinter is never asked: the test revokes a session it made itself.
type panicMinter struct{}

func (panicMinter) Mint(context.Context, MintRequest) (*Session, error) { panic("not called") }

// TestPoolRevokeRecoversAPanic (issue 31 item 5): a revoke that panics (a
// session with no client behind it) returns as a revoke not confirmed
// would, so an eviction's own goroutine goes on to give the place up
// instead of ending the process; the panic goes to OnPanic.
func TestPoolRevokeRecoversAPanic(t *testing.T) {
	var told []any
	p, err := NewPool(PoolConfig{Minter: panicMinter{}, Objects: []string{"ttag-1"}, OnPanic: func(v any) { told = append(told, v) }})
	if err != nil {
		t.Fatal(err)
	}
	sess := &Session{}
	p.revoke(context.Background(), taken{entry: &poolEntry{id: "alice", digest: "d"}, sess: sess}, "test")
	if len(told) != 1 {
		t.Fatalf("OnPanic told %d times, want 1", len(told))
	}
	if _, ok := told[0].(error); !ok {
		t.Errorf("OnPanic was told %T, want the runtime error recovered", told[0])
	}
	if !sess.revoked || sess.key != nil {
		t.Error("the session is not marked revoked with its holder key gone")
	}
}
