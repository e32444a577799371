// Package testutil holds the helpers that the tests of several packages
// share, so each is written (and fixed) once: a log sink safe to read while
// others write it, the live-heap probe the memory benchmarks use, a clock
// moved by hand, a certificate authority made for one test, a poll for a
// condition that must come, golden files, a package's own non-test
// source, a folder's names and a file's mode, a bearer-token round
// tripper, and the test binary run again as a helper process. It has no
// dependencies outside the standard library and no state of its own.
package testutil

import (
	"bytes"
	"runtime"
	"runtime/metrics"
	"sync"
	"time"
)

// LogBuffer is a log sink (a slog handler's writer, a child process's
// stderr) that a test may read while goroutines or a process still write
// to it. The zero value is ready to use.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is everything written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// HeapPeak samples the live heap while fn runs and returns the most it
// grew above where it started, in bytes.
func HeapPeak(fn func()) uint64 {
	runtime.GC()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() uint64 { metrics.Read(sample); return sample[0].Value.Uint64() }
	base := read()
	var (
		mu   sync.Mutex
		peak = base
	)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(200 * time.Microsecond)
		defer t.Stop()
		for {
			v := read()
			mu.Lock()
			peak = max(peak, v)
			mu.Unlock()
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	fn()
	close(stop)
	<-done
	if v := read(); v > peak {
		peak = v
	}
	return peak - base
}
