package server

import (
	"context"
	"sync"
)

// keyLocks serialises work per key (one destination's version allocation,
// one idempotency key) and nothing else: work under different keys runs at
// once. A key's lock exists only while someone holds or waits for it.
type keyLocks struct {
	mu    sync.Mutex
	locks map[string]*keyLock
}

type keyLock struct {
	ch    chan struct{} // holds one token while the lock is held
	users int           // holders and waiters
}

// lock takes key's lock, or gives up when ctx ends. The returned function
// releases it.
func (k *keyLocks) lock(ctx context.Context, key string) (func(), error) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyLock{}
	}
	l := k.locks[key]
	if l == nil {
		l = &keyLock{ch: make(chan struct{}, 1)}
		k.locks[key] = l
	}
	l.users++
	k.mu.Unlock()

	select {
	case l.ch <- struct{}{}:
		return func() {
			<-l.ch
			k.release(key, l)
		}, nil
	case <-ctx.Done():
		k.release(key, l)
		return nil, ctx.Err()
	}
}

func (k *keyLocks) release(key string, l *keyLock) {
	k.mu.Lock()
	defer k.mu.Unlock()
	l.users--
	if l.users == 0 {
		delete(k.locks, key)
	}
}

// held is how many keys have a holder or a waiter (for tests).
func (k *keyLocks) held() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.locks)
}
