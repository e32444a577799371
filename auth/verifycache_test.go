package auth

import (
	"context"
	"crypto/sha256"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwk"
)

// TestVerifyCachesUntilExpiry: a token that passed is answered from the
// cache (its signature not checked again), only until its exp with the
// skew and only while the held key set still has its key; another token,
// a tampered one included, is verified in full; a new key set empties the
// cache.
func TestVerifyCachesUntilExpiry(t *testing.T) {
	f := newVerifierFixture(t)
	ctx := context.Background()
	tok := f.token(t, nil)
	first, err := f.v.Verify(ctx, tok)
	if err != nil {
		t.Fatal(err)
	}
	first.Scopes[0] = "changed by the caller"

	// The cached entry is served without the signature check: its key,
	// replaced in the held set by one of the same id and type that did not
	// sign it, would fail that check.
	f.v.mu.Lock()
	held := f.v.keys
	f.v.keys = jwk.NewSet()
	f.v.mu.Unlock()
	impostor, err := newRSAKey(t, "rsa-1").key.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.v.keys.AddKey(impostor); err != nil {
		t.Fatal(err)
	}
	again, err := f.v.Verify(ctx, tok)
	if err != nil {
		t.Fatalf("the same token, not from the cache: %v", err)
	}
	if again.ID() != first.ID() || again.Scopes[0] != "openid" {
		t.Errorf("cached caller = %+v", again)
	}
	other := f.token(t, func(c map[string]any) { c["jti"] = "jti-2" })
	if _, err := f.v.Verify(ctx, other); !errors.Is(err, &TokenError{Class: ClassBadSignature}) {
		t.Errorf("another token was not verified in full: %v", err)
	}

	// With its key gone from the held set, the cache no longer answers
	// for the token: it is verified in full, and refused.
	f.v.mu.Lock()
	f.v.keys = jwk.NewSet()
	f.v.mu.Unlock()
	if _, err := f.v.Verify(ctx, tok); !errors.Is(err, &TokenError{Class: ClassUnknownKey}) {
		t.Errorf("a cached token whose key left the held set: %v, want unknown-key", err)
	}
	f.v.mu.Lock()
	f.v.keys = held
	f.v.mu.Unlock()
	if _, err := f.v.Verify(ctx, tok); err != nil {
		t.Fatalf("with the key back: %v", err)
	}
	tampered := tok[:len(tok)-2] + "AA"
	if tampered == tok {
		tampered = tok[:len(tok)-2] + "BB"
	}
	if _, err := f.v.Verify(ctx, tampered); err == nil {
		t.Error("a tampered token was accepted")
	}

	// Past exp and the skew, the cached token is refused as expired.
	f.clock.Advance(5*time.Minute + DefaultClockSkew)
	if _, err := f.v.Verify(ctx, tok); !errors.Is(err, &TokenError{Class: ClassExpired}) {
		t.Errorf("an expired cached token: %v, want expired", err)
	}

	// A fetched key set empties the cache.
	f.v.remember([32]byte{1}, verifiedToken{caller: Caller{Subject: "x", Expiry: f.clock.Now().Add(time.Hour)}})
	if err := f.v.fetch(ctx); err != nil {
		t.Fatal(err)
	}
	f.v.cacheMu.Lock()
	n := len(f.v.verified)
	f.v.cacheMu.Unlock()
	if n != 0 {
		t.Errorf("%d entries kept across a key-set fetch", n)
	}
}

// TestVerifyCacheBounded: the cache never holds more than maxVerified.
func TestVerifyCacheBounded(t *testing.T) {
	f := newVerifierFixture(t)
	for i := range maxVerified + 10 {
		f.v.remember([32]byte{byte(i), byte(i >> 8), byte(i >> 16)}, verifiedToken{caller: Caller{Expiry: f.clock.Now().Add(time.Hour)}})
	}
	if n := len(f.v.verified); n > maxVerified {
		t.Errorf("%d entries, bound %d", n, maxVerified)
	}
}

// BenchmarkVerify compares a token answered from the cache (with the check
// that the held key set still has its key) against a full verification of
// the same token, in the same process: the cache's ratio is what the
// key-set check costs on every call.
func BenchmarkVerify(b *testing.B) {
	f := newVerifierFixture(b)
	ctx := context.Background()
	tok := f.token(b, nil)
	if _, err := f.v.Verify(ctx, tok); err != nil {
		b.Fatal(err)
	}
	b.Run("cached", func(b *testing.B) {
		for b.Loop() {
			if _, err := f.v.Verify(ctx, tok); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("full", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := f.v.verify(ctx, tok); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestVerifyCacheSizedOnce: filling the cache to its bound allocates no
// table: it was made for maxVerified entries, so the heap does not step up
// once the first maxVerified users have called (bench figure P3).
func TestVerifyCacheSizedOnce(t *testing.T) {
	f := newVerifierFixture(t)
	exp := f.clock.Now().Add(time.Hour)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range maxVerified {
		f.v.remember([32]byte{byte(i), 1}, verifiedToken{caller: Caller{Expiry: exp}})
	}
	runtime.ReadMemStats(&after)
	// A map grown from empty to 64 entries allocates its table 4 or more
	// times; the fixture's own goroutines may allocate once meanwhile.
	if n := after.Mallocs - before.Mallocs; n > 1 {
		t.Errorf("filling the cache to %d entries made %d allocations, want at most 1", maxVerified, n)
	}
}

// TestTokenSum: the hash from the stack copy is the token's SHA-256, on
// either side of the stack buffer's size.
func TestTokenSum(t *testing.T) {
	for _, n := range []int{0, 1, 63, tokenSumStack - 1, tokenSumStack, tokenSumStack + 1, MaxTokenBytes} {
		tok := strings.Repeat("a.b-c_", n/6+1)[:n]
		if got, want := tokenSum(tok), sha256.Sum256([]byte(tok)); got != want {
			t.Errorf("tokenSum of %d bytes: %x, want %x", n, got, want)
		}
	}
}
