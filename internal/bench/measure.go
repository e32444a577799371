package bench

import (
	"context"
	"math"
	"runtime"
	"runtime/metrics"
	"slices"
	"strings"
	"sync"
	"time"
)

// Latencies are one target's per-call times.
type Latencies []time.Duration

// Quantile is the q-quantile (nearest rank) in milliseconds.
func (l Latencies) Quantile(q float64) float64 {
	if len(l) == 0 {
		return math.NaN()
	}
	s := slices.Clone(l)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	i = min(max(i, 0), len(s)-1)
	return float64(s[i]) / float64(time.Millisecond)
}

// paced runs calls per user at a fixed total rate (calls/s) spread over
// users, each user on its own schedule, and returns each call's time from
// its start to its answer. The first error stops the run.
func paced(ctx context.Context, users, calls int, rate float64, fn func(ctx context.Context, user int) error) (Latencies, error) {
	interval := time.Duration(float64(users) / rate * float64(time.Second))
	var (
		mu    sync.Mutex
		lat   = make(Latencies, 0, users*calls)
		first error
		wg    sync.WaitGroup
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	for u := range users {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Users start spread over one interval, not all at once.
			offset := time.Duration(u) * interval / time.Duration(users)
			for k := range calls {
				next := start.Add(offset + time.Duration(k)*interval)
				if d := time.Until(next); d > 0 {
					select {
					case <-time.After(d):
					case <-ctx.Done():
						return
					}
				}
				t0 := time.Now()
				err := fn(ctx, u)
				d := time.Since(t0)
				mu.Lock()
				if err != nil && first == nil {
					first = err
					cancel()
				}
				lat = append(lat, d)
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	return lat, first
}

// testParts are the packages that run in this process only because the
// benchmark puts them there: the reference Gateway, the development
// provider and its OpenID library, and the benchmark's own clients.
var testParts = []string{
	"github.com/pdmcp/pdmcp/gateway/reference",
	"github.com/pdmcp/pdmcp/auth/devidp",
	"github.com/zitadel/",
	"github.com/pdmcp/pdmcp/internal/bench",
	"go-sdk/mcp.(*ClientSession)",
	"go-sdk/mcp.(*Client)",
	"go-sdk/mcp.(*streamableClientConn)",
}

// settle is how long P3 lets the server's work after a call (the pool's
// eviction ahead of need, a token exchange ahead, idle connections
// closing) finish before it reads the heap: what it measures is what the
// server keeps, not what a request in flight holds at that instant.
const settle = 250 * time.Millisecond

// settledHeap is serverHeap after settle.
func settledHeap() (own, total uint64) {
	time.Sleep(settle)
	return serverHeap()
}

// serverHeap is the live heap (after two collections) allocated by code
// other than testParts, estimated from the heap profile (the sampling
// rate is set by the caller); and the whole live heap.
func serverHeap() (own, total uint64) {
	runtime.GC()
	runtime.GC()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(sample)
	total = sample[0].Value.Uint64()
	var recs []runtime.MemProfileRecord
	n, _ := runtime.MemProfile(nil, false)
	for {
		recs = make([]runtime.MemProfileRecord, n+64)
		var ok bool
		if n, ok = runtime.MemProfile(recs, false); ok {
			recs = recs[:n]
			break
		}
	}
	rate := float64(runtime.MemProfileRate)
	var ownF float64
	for _, r := range recs {
		inuse := r.InUseBytes()
		objs := r.InUseObjects()
		if inuse <= 0 || objs <= 0 {
			continue
		}
		if fromTestPart(r.Stack()) {
			continue
		}
		// Unsample as pprof does: each object of this size was recorded
		// with probability 1-exp(-size/rate).
		avg := float64(r.AllocBytes) / float64(max(r.AllocObjects, 1))
		scale := 1.0
		if rate > 1 {
			scale = 1 / (1 - math.Exp(-avg/rate))
		}
		ownF += float64(inuse) * scale
	}
	return uint64(ownF), total
}

func fromTestPart(stack []uintptr) bool {
	frames := runtime.CallersFrames(stack)
	for {
		f, more := frames.Next()
		for _, p := range testParts {
			if strings.Contains(f.Function, p) {
				return true
			}
		}
		if !more {
			return false
		}
	}
}
