// Package bench measures what pdmcp costs next to the parts it cannot do
// without, on a loopback stack it starts itself (the reference Gateway, the
// development provider, pdmcp over HTTPS and a bare go-sdk server behind
// the same TLS and a bearer check). Every figure is pdmcp's number beside
// its baselines', measured in alternating rounds in one process, and their
// ratio: the machines it runs on are shared and noisy, so only ratios
// travel. `pdmcp bench` prints the report.
package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
)

// Options size a run. Quick gives small counts (seconds, for tests).
type Options struct {
	Dir      string // state folder; a temporary one when empty
	Rounds   int    // alternating rounds of P1, P2, P4 and P6
	Calls    int    // P1 calls per user per round
	Users    int    // P1 users
	Rate     float64
	FileSize int // P2's file
	Churn    int // P3's distinct users
	Saves    int // P4 saves per round, and P6's per round and destination
	History  int // P6's earlier versions in the record
	NewUsers int // P5 new users per side
	Only     []string
	// HeapProfiles, when set, is a folder where P3 writes heap profiles
	// after its warm-up and at its end (p3-warm.heap, p3-end.heap), for
	// go tool pprof -diff_base.
	HeapProfiles string
	// Trace, when set, is a file where P1 writes a runtime/trace of one
	// more paced round of pdmcp's reads in both modes, after its measured
	// rounds; the report then breaks a read's time down from it.
	Trace string
	// Binary is the pdmcp binary P7 runs as its own server process
	// (`pdmcp bench` gives its own; a test builds one).
	Binary string
	// AbuseCalls and AbuseRate are P7's reads per phase and per second;
	// AbuseConnections the connection cap of P7's server (mcp-http.json's
	// connections.max); Abuse the attacks' sizes.
	AbuseCalls       int
	AbuseRate        float64
	AbuseConnections int
	Abuse            AbuseSizes
	// Tracing prices tracing: P1 also reads through a second pdmcp with
	// OpenTelemetry tracing on, every span exported to a loopback sink
	// (StackOptions.TracedTwin), in the same rounds as the untraced one,
	// and reports the traced reads over the untraced. Every other figure
	// measures the untraced pdmcp.
	Tracing  bool
	Progress io.Writer // stderr
	Logger   *slog.Logger
}

// Full is the default run; Quick keeps every figure but small.
func Full() Options {
	return Options{Rounds: 5, Calls: 60, Users: 8, Rate: 200, FileSize: api.MaxDataBytes, Churn: 1000, Saves: 40, NewUsers: 30, History: 50000,
		AbuseCalls: 300, AbuseRate: 25, AbuseConnections: 256,
		Abuse: AbuseSizes{StalledAnon: 256 + 64, StalledHeader: 256 + 64, StalledAuthed: 64, Listen: 64, JunkRate: 20, RefusalConns: 4, RefusalRate: 500, OpenRate: 50}}
}

// Quick is small enough for a test.
func Quick() Options {
	return Options{Rounds: 1, Calls: 5, Users: 8, Rate: 400, FileSize: 1 << 20, Churn: 24, Saves: 4, NewUsers: 3, History: 500,
		AbuseCalls: 10, AbuseRate: 50, AbuseConnections: 32,
		Abuse: AbuseSizes{StalledAnon: 32 + 8, StalledHeader: 32 + 8, StalledAuthed: 8, Listen: 8, JunkRate: 20, RefusalConns: 2, RefusalRate: 100, OpenRate: 50}}
}

// MarshalJSON leaves out the writers.
func (o Options) MarshalJSON() ([]byte, error) {
	type plain struct {
		Rounds, Calls, Users int
		Rate                 float64
		FileSize, Churn      int
		Saves, NewUsers      int
		History              int
		AbuseCalls           int
		AbuseRate            float64
		AbuseConnections     int
		Abuse                AbuseSizes
		Only                 []string `json:",omitempty"`
	}
	return json.Marshal(plain{o.Rounds, o.Calls, o.Users, o.Rate, o.FileSize, o.Churn, o.Saves, o.NewUsers, o.History,
		o.AbuseCalls, o.AbuseRate, o.AbuseConnections, o.Abuse, o.Only})
}

func (o Options) wants(id string) bool {
	if len(o.Only) == 0 {
		return true
	}
	for _, w := range o.Only {
		if strings.EqualFold(w, id) {
			return true
		}
	}
	return false
}

// Run starts the stacks, measures the figures and stops everything.
func Run(ctx context.Context, o Options) (*Report, error) {
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Users < 1 || o.Rounds < 1 || o.Calls < 1 || o.Rate <= 0 {
		return nil, errors.New("bench: users, rounds, calls and rate must be positive")
	}
	if o.wants(FigureAbuse) && (o.AbuseCalls < 1 || o.AbuseRate <= 0 || o.AbuseConnections < 2) {
		return nil, errors.New("bench: P7's calls and rate must be positive and its connection cap at least 2")
	}
	dir := o.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "pdmcp-bench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	r := &Report{Started: time.Now().UTC(), GoVer: runtime.Version(), CPUs: runtime.NumCPU(),
		OS: runtime.GOOS + "/" + runtime.GOARCH, Options: o}
	b := &run{o: o, r: r}
	b.say("starting the stack (reference Gateway, provider, pdmcp, bare server) in %s", dir)
	// P5's traced new users come after P3's.
	users := o.Users + 2*o.NewUsers + o.Churn + o.p5Group()
	st, err := StartStack(ctx, StackOptions{Dir: filepath.Join(dir, "main"), Users: users, MaxCallers: 8,
		BigFile: false, TracedTwin: o.Tracing && o.wants(FigureRead), Logger: o.Logger})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	b.st = st
	stop := b.watchLive()
	steps := []struct {
		id string
		fn func(context.Context) error
	}{
		{FigureSessionMemory, b.sessionMemoryPerCaller}, {FigureRead, b.readLatency}, {FigureFileEncrypt, b.fileEncrypt},
		{FigureDurableSave, b.durableSave}, {FigureSaveHistory, b.saveHistory}, {FigureFirstRead, b.firstRead},
		{FigureSessionMemory, b.sessionMemory}, {FigureAbuse, b.abuseLatency},
	}
	for _, s := range steps {
		if !o.wants(s.id) {
			continue
		}
		b.mu.Lock()
		b.phaseMax = 0
		b.mu.Unlock()
		if err := s.fn(ctx); err != nil {
			stop()
			return r, fmt.Errorf("%s: %w", s.id, err)
		}
		b.mu.Lock()
		b.say("%s: at most %d live Gateway sessions of pdmcp's during this step", s.id, b.phaseMax)
		b.mu.Unlock()
	}
	stop()
	r.Seconds = time.Since(r.Started).Seconds()
	for i := range r.Figures {
		r.Figures[i].settleSpread()
	}
	return r, nil
}

type run struct {
	o          Options
	r          *Report
	st         *Stack
	perSession float64
	// own counts the benchmark's own direct Gateway sessions, counted up
	// before each is minted and down after it is revoked, so the live
	// count never charges them to pdmcp.
	own atomic.Int64

	mu       sync.Mutex
	phaseMax int // most live sessions in the current step
}

// mint mints one of the benchmark's own sessions; end revokes it.
func (b *run) mint(ctx context.Context, c *gateway.Client, req gateway.MintRequest) (s *gateway.Session, end func(), err error) {
	b.own.Add(1)
	if s, err = c.Mint(ctx, req); err != nil {
		b.own.Add(-1)
		return nil, nil, err
	}
	return s, func() {
		_ = s.Revoke(context.WithoutCancel(ctx))
		b.own.Add(-1)
	}, nil
}

func (b *run) say(format string, args ...any) {
	fmt.Fprintf(b.o.Progress, "bench: "+format+"\n", args...)
}

// watchLive samples the reference Gateway's live scoped sessions until the
// returned function is called, keeping the most seen.
func (b *run) watchLive() func() {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(500 * time.Microsecond)
		defer t.Stop()
		for {
			n := b.st.LiveScopedSessions() - int(b.own.Load())
			b.mu.Lock()
			b.r.MaxLive = max(b.r.MaxLive, n)
			b.phaseMax = max(b.phaseMax, n)
			b.mu.Unlock()
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}
