package testutil

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// TestLogBufferConcurrent writes from many goroutines while reading (run
// with -race): every line arrives whole.
func TestLogBufferConcurrent(t *testing.T) {
	var l LogBuffer
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 100 {
				fmt.Fprintf(&l, "w%d-%d\n", i, j)
				_ = l.String()
			}
		}()
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(l.String(), "\n"), "\n")
	if len(lines) != 800 {
		t.Fatalf("%d lines, want 800", len(lines))
	}
	seen := map[string]bool{}
	for _, line := range lines {
		seen[line] = true
	}
	if len(seen) != 800 || !seen["w7-99"] {
		t.Fatalf("lines lost or torn: %d distinct", len(seen))
	}
}

// TestHeapPeakSeesALiveAllocation: a 32 MiB buffer kept alive while fn
// runs is seen; the probe reports growth, not the heap's size.
func TestHeapPeakSeesALiveAllocation(t *testing.T) {
	const size = 32 << 20
	var keep []byte
	p := HeapPeak(func() {
		keep = make([]byte, size)
		keep[size-1] = 1
	})
	if p < size {
		t.Fatalf("peak %d bytes, want at least %d", p, size)
	}
	if keep[size-1] != 1 {
		t.Fatal("unreachable")
	}
}
