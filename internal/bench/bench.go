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
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/auth/devidp"
	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/internal/testutil"
	"github.com/pdmcp/pdmcp/server/journal"
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
	Trace    string
	Progress io.Writer // stderr
	Logger   *slog.Logger
}

// Full is the default run; Quick keeps every figure but small.
func Full() Options {
	return Options{Rounds: 5, Calls: 60, Users: 8, Rate: 200, FileSize: api.MaxDataBytes, Churn: 1000, Saves: 40, NewUsers: 30, History: 50000}
}

// Quick is small enough for a test.
func Quick() Options {
	return Options{Rounds: 1, Calls: 5, Users: 8, Rate: 400, FileSize: 1 << 20, Churn: 24, Saves: 4, NewUsers: 3, History: 500}
}

// The figures' ids, which reports, options (--only) and the docs name, by
// what each measures.
const (
	// FigureRead: read_protected_document of 4 KiB against a direct
	// decrypt plus a bare no-op, paced, in both session modes.
	FigureRead = "P1"
	// FigureFileEncrypt: encrypt_file of a big file against posting it to
	// the Gateway directly, and the heap each takes.
	FigureFileEncrypt = "P2"
	// FigureSessionMemory: what the server holds as distinct users churn
	// through maxCallers, and the most live Gateway sessions.
	FigureSessionMemory = "P3"
	// FigureDurableSave: a durable save against one without fsync.
	FigureDurableSave = "P4"
	// FigureFirstRead: a new user's first read against the same exchange,
	// mint and decrypt made directly.
	FigureFirstRead = "P5"
	// FigureSaveHistory: a save to a destination with a long history in
	// the record against one with none.
	FigureSaveHistory = "P6"
)

// Figure is one measured comparison.
type Figure struct {
	ID        string             `json:"id"`
	Name      string             `json:"name"`
	Unit      string             `json:"unit"`
	PDMCP     float64            `json:"pdmcp"`
	Baselines map[string]float64 `json:"baselines,omitempty"`
	Baseline  float64            `json:"baseline"` // what the ratio divides by
	Ratio     float64            `json:"ratio"`
	Goal      string             `json:"goal"`
	Met       bool               `json:"met"`
	Note      string             `json:"note,omitempty"`
	// Spread: the ratio's least and greatest over the rounds it was
	// measured in (the same ratio computed round by round), and how many.
	// A figure measured once has its ratio as both.
	RatioMin float64 `json:"ratioMin"`
	RatioMax float64 `json:"ratioMax"`
	Rounds   int     `json:"rounds"`
}

// Report is a run's result.
type Report struct {
	Started time.Time `json:"started"`
	Seconds float64   `json:"seconds"`
	GoVer   string    `json:"go"`
	CPUs    int       `json:"cpus"`
	OS      string    `json:"os"`
	Options Options   `json:"options"`
	Figures []Figure  `json:"figures"`
	MaxLive int       `json:"maxLiveGatewaySessions"`
	// Trace is where a read's time goes, when Options.Trace is set.
	Trace    []Breakdown `json:"trace,omitempty"`
	Problems []string    `json:"problems,omitempty"`
}

// MarshalJSON leaves out the writers.
func (o Options) MarshalJSON() ([]byte, error) {
	type plain struct {
		Rounds, Calls, Users int
		Rate                 float64
		FileSize, Churn      int
		Saves, NewUsers      int
		History              int
		Only                 []string `json:",omitempty"`
	}
	return json.Marshal(plain{o.Rounds, o.Calls, o.Users, o.Rate, o.FileSize, o.Churn, o.Saves, o.NewUsers, o.History, o.Only})
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
	users := o.Users + 2*o.NewUsers + o.Churn
	st, err := StartStack(ctx, StackOptions{Dir: filepath.Join(dir, "main"), Users: users, MaxCallers: 8,
		BigFile: false, Logger: o.Logger})
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
		{FigureSessionMemory, b.sessionMemory},
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

func readArgs() map[string]any { return map[string]any{"documentId": DocumentID} }

// callOK calls a tool and turns a refusal into an error.
func callOK(ctx context.Context, cs *mcp.ClientSession, name string, args map[string]any) error {
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if res.IsError {
		var text string
		for _, c := range res.Content {
			if t, ok := c.(*mcp.TextContent); ok {
				text += t.Text
			}
		}
		return fmt.Errorf("%s refused: %s", name, text)
	}
	return nil
}

// readLatency (P1) is the read figure: pdmcp's read_protected_document
// against a direct decrypt plus a bare no-op, 8 users, paced, in both
// session modes.
func (b *run) readLatency(ctx context.Context) error {
	o := b.o
	b.say("P1: %d users, %.0f calls/s, %d calls per user per target, %d rounds", o.Users, o.Rate, o.Calls, o.Rounds)
	var closers []func()
	defer func() {
		for _, c := range closers {
			c()
		}
	}()
	targets, err := b.readTargets(ctx, &closers)
	if err != nil {
		return err
	}
	direct, err := b.directReads(ctx, &closers)
	if err != nil {
		return err
	}
	m, err := b.readRounds(ctx, append(targets, direct))
	if err != nil {
		return err
	}
	if o.Trace != "" {
		pdmcp := map[string][]*mcp.ClientSession{}
		for _, t := range targets {
			if mode, ok := strings.CutPrefix(t.name, "pdmcp "); ok {
				pdmcp[mode] = t.cs
			}
		}
		if err := b.traceReads(ctx, pdmcp); err != nil {
			return fmt.Errorf("trace: %w", err)
		}
	}
	for _, mode := range []string{SessionProtocol, StatelessProtocol} {
		b.readFigures(m, mode)
	}
	return nil
}

// readTarget is one side of the read figure: what user u's call is.
type readTarget struct {
	name string
	cs   []*mcp.ClientSession // the users' sessions, for the MCP sides
	call func(ctx context.Context, u int) error
}

// readTargets connects every user to pdmcp (reading the 4 KiB document)
// and to the bare server (its no-op) in both session modes.
func (b *run) readTargets(ctx context.Context, closers *[]func()) ([]readTarget, error) {
	o, st := b.o, b.st
	tokens := make([]string, o.Users)
	for i := range o.Users {
		t, err := st.Token(ctx, i)
		if err != nil {
			return nil, err
		}
		tokens[i] = t
	}
	target := func(name, url, mode, tool string, args map[string]any, token func(u int) string) (readTarget, error) {
		t := readTarget{name: name + " " + mode}
		for u := range o.Users {
			cs, err := st.Connect(ctx, url, token(u), mode)
			if err != nil {
				return t, err
			}
			*closers = append(*closers, func() { cs.Close() })
			t.cs = append(t.cs, cs)
		}
		t.call = func(ctx context.Context, u int) error { return callOK(ctx, t.cs[u], tool, args) }
		return t, nil
	}
	var targets []readTarget
	for _, mode := range []string{SessionProtocol, StatelessProtocol} {
		p, err := target("pdmcp", st.MCPURL, mode, "read_protected_document", readArgs(), func(u int) string { return tokens[u] })
		if err != nil {
			return nil, err
		}
		n, err := target("bare", st.BareURL, mode, "noop", map[string]any{}, func(int) string { return st.BareToken })
		if err != nil {
			return nil, err
		}
		targets = append(targets, p, n)
	}
	return targets, nil
}

// directReads is baseline (a): one Gateway session per user acting as the
// reader, as pdmcp's are, decrypting the document's ciphertext.
func (b *run) directReads(ctx context.Context, closers *[]func()) (readTarget, error) {
	st := b.st
	t := readTarget{name: "direct"}
	c, err := gateway.New(st.Service.ClientConfig())
	if err != nil {
		return t, err
	}
	if err := c.SignIn(ctx); err != nil {
		return t, err
	}
	doc := st.Manifest.Documents[DocumentID]
	iv, ct, err := docBytes(st, doc.IV, doc.Path)
	if err != nil {
		return t, err
	}
	direct := make([]*gateway.Session, b.o.Users)
	for i := range direct {
		s, end, err := b.mint(ctx, c, gateway.MintRequest{ActingAs: st.Reader, Objects: []string{doc.TTag}, TTL: api.MaxScopedTTL})
		if err != nil {
			return t, err
		}
		direct[i] = s
		*closers = append(*closers, end)
	}
	t.call = func(ctx context.Context, u int) error {
		_, err := direct[u].Decrypt(ctx, doc.TTag, iv, ct)
		return err
	}
	return t, nil
}

// readMeasures are each target's latencies and CPU time, over all the
// measured rounds and round by round (for each ratio's spread).
type readMeasures struct {
	lat      map[string]Latencies
	cpu      map[string]time.Duration
	roundLat map[string][]Latencies
	roundCPU map[string][]time.Duration
}

// readRounds runs the targets in turn, paced, for o.Rounds rounds after a
// first unmeasured one that warms every path (pdmcp mints the users'
// sessions there).
func (b *run) readRounds(ctx context.Context, targets []readTarget) (*readMeasures, error) {
	o := b.o
	m := &readMeasures{lat: map[string]Latencies{}, cpu: map[string]time.Duration{},
		roundLat: map[string][]Latencies{}, roundCPU: map[string][]time.Duration{}}
	for round := 0; round <= o.Rounds; round++ {
		for _, t := range targets {
			c0 := cpuTime()
			l, err := paced(ctx, o.Users, o.Calls, o.Rate, t.call)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", t.name, err)
			}
			if round > 0 {
				c := cpuTime() - c0
				m.lat[t.name] = append(m.lat[t.name], l...)
				m.cpu[t.name] += c
				m.roundLat[t.name] = append(m.roundLat[t.name], l)
				m.roundCPU[t.name] = append(m.roundCPU[t.name], c)
			}
		}
		if round > 0 {
			b.say("P1: round %d of %d done", round, o.Rounds)
		}
	}
	return m, nil
}

// readFigures adds mode's P1 figures: the median and p99 latency, and the
// CPU per call, each against (a) + (b).
func (b *run) readFigures(m *readMeasures, mode string) {
	label := "with sessions (" + mode + ")"
	if mode == StatelessProtocol {
		label = "without sessions (" + mode + ")"
	}
	p, n := "pdmcp "+mode, "bare "+mode
	for _, q := range []struct {
		name string
		q    float64
	}{{"median", 0.5}, {"p99", 0.99}} {
		pq, aq, nq := m.lat[p].Quantile(q.q), m.lat["direct"].Quantile(q.q), m.lat[n].Quantile(q.q)
		f := Figure{ID: FigureRead, Name: "read_protected_document 4 KiB, " + q.name + ", " + label, Unit: "ms", PDMCP: pq,
			Baselines: map[string]float64{"direct decrypt (a)": aq, "bare no-op (b)": nq}, Baseline: aq + nq, Ratio: pq / (aq + nq)}
		if q.name == "median" {
			f.Goal, f.Met = "<= 1.05 x (a+b)", f.Ratio <= 1.05
		} else {
			f.Goal, f.Met = "reported", true
		}
		var per []float64
		for i := range m.roundLat["direct"] {
			per = append(per, m.roundLat[p][i].Quantile(q.q)/
				(m.roundLat["direct"][i].Quantile(q.q)+m.roundLat[n][i].Quantile(q.q)))
		}
		f.spread(per)
		b.r.Figures = append(b.r.Figures, f)
	}
	if !cpuMeasured {
		return
	}
	// CPU per call of the whole process (client, server, Gateway all run
	// here): far less sensitive than latency to a loaded machine.
	calls := float64(b.o.Rounds * b.o.Users * b.o.Calls)
	per := func(name string) float64 { return m.cpu[name].Seconds() * 1000 / calls }
	pc, ac, nc := per(p), per("direct"), per(n)
	f := Figure{ID: FigureRead, Name: "read_protected_document 4 KiB, CPU per call (whole process), " + label,
		Unit: "ms", PDMCP: pc, Baselines: map[string]float64{"direct decrypt (a)": ac, "bare no-op (b)": nc}, Baseline: ac + nc,
		Ratio: pc / (ac + nc), Goal: "<= 1.05 x (a+b)", Met: pc/(ac+nc) <= 1.05}
	var rounds []float64
	for i := range m.roundCPU["direct"] {
		rounds = append(rounds, float64(m.roundCPU[p][i])/float64(m.roundCPU["direct"][i]+m.roundCPU[n][i]))
	}
	f.spread(rounds)
	b.r.Figures = append(b.r.Figures, f)
}

func docBytes(st *Stack, ivB64, rel string) (iv, ct []byte, err error) {
	path, err := st.Manifest.Resolve(rel)
	if err != nil {
		return nil, nil, err
	}
	if ct, err = os.ReadFile(path); err != nil {
		return nil, nil, err
	}
	iv, err = decodeB64(ivB64)
	return iv, ct, err
}

// fileEncrypt (P2) is encrypt_file of the big file against posting its bytes to the
// Gateway directly, and the peak heap of each against the file size.
func (b *run) fileEncrypt(ctx context.Context) error {
	o, st := b.o, b.st
	b.say("P2: encrypt_file of %d bytes, %d rounds", o.FileSize, o.Rounds)
	tok, err := st.Token(ctx, 0)
	if err != nil {
		return err
	}
	cs, err := st.Connect(ctx, st.MCPURL, tok, SessionProtocol)
	if err != nil {
		return err
	}
	defer cs.Close()
	c, err := gateway.New(st.Service.ClientConfig())
	if err != nil {
		return err
	}
	if err := c.SignIn(ctx); err != nil {
		return err
	}
	sess, end, err := b.mint(ctx, c, gateway.MintRequest{ActingAs: st.Reader, TTL: api.MaxScopedTTL})
	if err != nil {
		return err
	}
	defer end()
	data := make([]byte, o.FileSize)
	for i := range data {
		data[i] = byte(i * 7)
	}
	name := filepath.Join(st.FileRoot, BigFile)
	var fileT, baseT time.Duration
	var fileP, baseP uint64
	var timeRounds, memRounds []float64
	for i := range o.Rounds {
		// New content each round, so each call encrypts (no replay).
		binary.BigEndian.PutUint64(data, uint64(time.Now().UnixNano()))
		if err := os.WriteFile(name, data, 0o600); err != nil {
			return err
		}
		_ = os.Remove(name + ".pisoft")
		var cerr error
		t0 := time.Now()
		p := testutil.HeapPeak(func() { cerr = callOK(ctx, cs, "encrypt_file", map[string]any{"path": BigFile}) })
		ft := time.Since(t0)
		fileT += ft
		fileP = max(fileP, p)
		fp := p
		if cerr != nil {
			return cerr
		}
		t0 = time.Now()
		p = testutil.HeapPeak(func() { _, cerr = sess.Encrypt(ctx, gateway.EncryptInput{Plaintext: data}) })
		bt := time.Since(t0)
		baseT += bt
		timeRounds = append(timeRounds, float64(ft)/float64(bt))
		memRounds = append(memRounds, max(float64(fp)-float64(p), 0)/float64(o.FileSize))
		baseP = max(baseP, p)
		if cerr != nil {
			return cerr
		}
		b.say("P2: round %d of %d done", i+1, o.Rounds)
	}
	_ = os.Remove(name)
	_ = os.Remove(name + ".pisoft")
	n := float64(o.Rounds)
	ft, bt := fileT.Seconds()*1000/n, baseT.Seconds()*1000/n
	own := max(float64(fileP)-float64(baseP), 0) / float64(o.FileSize)
	timeF := Figure{ID: FigureFileEncrypt, Name: fmt.Sprintf("encrypt_file %d bytes, time", o.FileSize), Unit: "ms", PDMCP: ft,
		Baselines: map[string]float64{"post to the Gateway": bt}, Baseline: bt, Ratio: ft / bt, Goal: "<= 1.5 x", Met: ft/bt <= 1.5}
	timeF.spread(timeRounds)
	memF := Figure{ID: FigureFileEncrypt, Name: "encrypt_file, peak heap growth / file size, pdmcp's own share", Unit: "x file size",
		PDMCP: own, Baselines: map[string]float64{"whole process, encrypt_file": float64(fileP) / float64(o.FileSize),
			"whole process, post to the Gateway": float64(baseP) / float64(o.FileSize)},
		Baseline: 1, Ratio: own, Goal: "<= 3 x file size", Met: own <= 3,
		Note: "the reference Gateway runs in this process and does the same work in both: pdmcp's share is the difference of the peaks"}
	memF.spread(memRounds)
	b.r.Figures = append(b.r.Figures, timeF, memF)
	return nil
}

// durableSave (P4) is save_protected_result with the durable journal and saved files
// against a second pdmcp whose journal and save pipeline do not fsync, on
// its own stack, one save to each in turn.
func (b *run) durableSave(ctx context.Context) error {
	o, st := b.o, b.st
	b.say("P4: %d saves per round, %d rounds; starting the non-durable stack", o.Saves, o.Rounds)
	nd, err := StartStack(ctx, StackOptions{Dir: filepath.Join(filepath.Dir(st.o.Dir), "nondurable"), Users: 1,
		NonDurableJournal: true, Logger: o.Logger})
	if err != nil {
		return err
	}
	defer nd.Close()
	open := func(s *Stack) (*mcp.ClientSession, error) {
		tok, err := s.Token(ctx, 0)
		if err != nil {
			return nil, err
		}
		return s.Connect(ctx, s.MCPURL, tok, SessionProtocol)
	}
	durable, err := open(st)
	if err != nil {
		return err
	}
	defer durable.Close()
	loose, err := open(nd)
	if err != nil {
		return err
	}
	defer loose.Close()
	var seq atomic.Int64
	save := func(cs *mcp.ClientSession) (time.Duration, error) {
		n := seq.Add(1)
		t0 := time.Now()
		err := callOK(ctx, cs, "save_protected_result", map[string]any{"destinationId": Destination,
			"text": fmt.Sprintf("benchmark result %d", n), "idempotencyKey": fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), n)})
		return time.Since(t0), err
	}
	// One save to each in turn, so a burst of load on the shared machine
	// falls on both alike; the first of each is a warm-up.
	saves := func(count int) (time.Duration, time.Duration, error) {
		var d, l time.Duration
		for range count {
			t, err := save(durable)
			if err != nil {
				return 0, 0, err
			}
			d += t
			if t, err = save(loose); err != nil {
				return 0, 0, err
			}
			l += t
		}
		return d, l, nil
	}
	if _, _, err := saves(1); err != nil {
		return err
	}
	var dT, lT time.Duration
	var perRound []string
	for i := range o.Rounds {
		d, l, err := saves(o.Saves)
		if err != nil {
			return err
		}
		dT, lT = dT+d, lT+l
		perRound = append(perRound, fmt.Sprintf("%.2f", l.Seconds()/d.Seconds()))
		b.say("P4: round %d of %d done", i+1, o.Rounds)
	}
	n := float64(o.Rounds * o.Saves)
	dr, lr := n/dT.Seconds(), n/lT.Seconds()
	b.r.Figures = append(b.r.Figures, Figure{ID: FigureDurableSave, Name: "save_protected_result throughput, durable journal", Unit: "saves/s",
		PDMCP: dr, Baselines: map[string]float64{"journal without fsync": lr}, Baseline: lr, Ratio: dr / lr,
		Goal: ">= 0.7 x", Met: dr/lr >= 0.7, Note: "ratio per round " + strings.Join(perRound, ", ")})
	return nil
}

// saveHistory (P6) is a save's median latency to a destination with History earlier
// versions in the record against one with none, on the same server and
// journal, one save to each in turn; the fresh destination is also timed
// once before the history is written, with the record empty of it.
func (b *run) saveHistory(ctx context.Context) error {
	o, st := b.o, b.st
	tok, err := st.Token(ctx, 0)
	if err != nil {
		return err
	}
	cs, err := st.Connect(ctx, st.MCPURL, tok, SessionProtocol)
	if err != nil {
		return err
	}
	defer cs.Close()
	var seq atomic.Int64
	save := func(dest string) (time.Duration, error) {
		n := seq.Add(1)
		t0 := time.Now()
		err := callOK(ctx, cs, "save_protected_result", map[string]any{"destinationId": dest,
			"text": fmt.Sprintf("p6 result %d", n), "idempotencyKey": fmt.Sprintf("p6-%d-%d", time.Now().UnixNano(), n)})
		return time.Since(t0), err
	}
	// saves times o.Saves saves to each destination, one to each in turn,
	// so a burst of load on the shared machine falls on both alike.
	saves := func(dests ...string) ([]Latencies, error) {
		out := make([]Latencies, len(dests))
		for range o.Saves {
			for i, d := range dests {
				t, err := save(d)
				if err != nil {
					return nil, err
				}
				out[i] = append(out[i], t)
			}
		}
		return out, nil
	}
	// Warm both destinations, then the fresh one before any history.
	if _, err := saves(FreshDestination, HistoryDestination); err != nil {
		return err
	}
	before, err := saves(FreshDestination)
	if err != nil {
		return err
	}
	b.say("P6: writing %d earlier versions of %s into the record", o.History, HistoryDestination)
	j, err := journal.Open(ctx, journal.DefaultPath(st.Manifest.File()))
	if err != nil {
		return err
	}
	err = j.AddHistoryForBenchmarks(ctx, HistoryDestination, o.History, time.Now())
	j.Close()
	if err != nil {
		return err
	}
	var fresh, long Latencies
	var perRound []string
	for i := range o.Rounds {
		l, err := saves(FreshDestination, HistoryDestination)
		if err != nil {
			return err
		}
		fresh, long = append(fresh, l[0]...), append(long, l[1]...)
		perRound = append(perRound, fmt.Sprintf("%.2f", l[1].Quantile(0.5)/l[0].Quantile(0.5)))
		b.say("P6: round %d of %d done", i+1, o.Rounds)
	}
	none, with := fresh.Quantile(0.5), long.Quantile(0.5)
	b.r.Figures = append(b.r.Figures, Figure{ID: FigureSaveHistory, Name: fmt.Sprintf("save_protected_result median latency, %d earlier versions in the record", o.History),
		Unit: "ms", PDMCP: with, Baselines: map[string]float64{"no earlier versions": none, "no earlier versions, before the history was written": before[0].Quantile(0.5)},
		Baseline: none, Ratio: with / none, Goal: "<= 1.1 x", Met: with/none <= 1.1,
		Note: "ratio per round " + strings.Join(perRound, ", ")})
	return nil
}

// firstRead (P5) is a new user's first call against the same exchange, mint and
// decrypt made directly, each side with users it has never seen.
func (b *run) firstRead(ctx context.Context) error {
	o, st := b.o, b.st
	b.say("P5: %d new users per side", o.NewUsers)
	c, err := gateway.New(st.Service.ClientConfig())
	if err != nil {
		return err
	}
	if err := c.SignIn(ctx); err != nil {
		return err
	}
	doc := st.Manifest.Documents[DocumentID]
	iv, ct, err := docBytes(st, doc.IV, doc.Path)
	if err != nil {
		return err
	}
	var pT, dT time.Duration
	// The new users in o.Rounds groups, for the ratio's spread.
	group := max(1, o.NewUsers/o.Rounds)
	var gP, gD time.Duration
	var groups []float64
	base := o.Users
	for i := range o.NewUsers {
		pu, du := base+2*i, base+2*i+1
		ptok, err := st.Token(ctx, pu)
		if err != nil {
			return err
		}
		dtok, err := st.Token(ctx, du)
		if err != nil {
			return err
		}
		cs, err := st.Connect(ctx, st.MCPURL, ptok, StatelessProtocol)
		if err != nil {
			return err
		}
		t0 := time.Now()
		err = callOK(ctx, cs, "read_protected_document", readArgs())
		pd := time.Since(t0)
		pT += pd
		cs.Close()
		if err != nil {
			return err
		}
		t0 = time.Now()
		x, err := exchange(ctx, st, dtok)
		if err != nil {
			return err
		}
		s, end, err := b.mint(ctx, c, gateway.MintRequest{SubjectToken: x, Objects: []string{doc.TTag}, TTL: api.MaxScopedTTL})
		if err != nil {
			return fmt.Errorf("mint with a subject token: %w", err)
		}
		_, err = s.Decrypt(ctx, doc.TTag, iv, ct)
		dd := time.Since(t0)
		dT += dd
		end()
		if err != nil {
			return err
		}
		gP, gD = gP+pd, gD+dd
		if (i+1)%group == 0 || i == o.NewUsers-1 {
			groups = append(groups, float64(gP)/float64(gD))
			gP, gD = 0, 0
		}
	}
	n := float64(o.NewUsers)
	p, d := pT.Seconds()*1000/n, dT.Seconds()*1000/n
	f := Figure{ID: FigureFirstRead, Name: "a new user's first read (token check, exchange, mint, decrypt)",
		Unit: "ms", PDMCP: p, Baselines: map[string]float64{"exchange + mint + decrypt, direct": d}, Baseline: d, Ratio: p / d,
		Goal: "<= 1.1 x", Met: p/d <= 1.1, Note: fmt.Sprintf("spread over groups of %d new users", group)}
	f.spread(groups)
	b.r.Figures = append(b.r.Figures, f)
	return nil
}

// exchange trades a user's access token for a Gateway token at the
// provider, as the confidential adapter client.
func exchange(ctx context.Context, st *Stack, subject string) (string, error) {
	form := url.Values{"grant_type": {"urn:ietf:params:oauth:grant-type:token-exchange"}, "subject_token": {subject},
		"subject_token_type":   {"urn:ietf:params:oauth:token-type:access_token"},
		"requested_token_type": {"urn:ietf:params:oauth:token-type:access_token"},
		"audience":             {devidp.DefaultGatewayAudience}, "scope": {devidp.DefaultGatewayAudience}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, st.Issuer+"/oauth/token", strings.NewReader(form.Encode()))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(st.stack.Provider.ClientID, st.stack.Provider.ClientSecret)
	resp, err := st.HC.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var out struct {
		AccessToken string `json:"access_token"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&out); err != nil || resp.StatusCode != 200 || out.AccessToken == "" {
		return "", fmt.Errorf("token exchange: status %d (%v)", resp.StatusCode, err)
	}
	return out.AccessToken, nil
}

// sessionMemory (P3) cycles distinct users through maxCallers 8: the server's heap after
// warm-up against at the end, what each live session holds, and the most
// live Gateway sessions seen.
func (b *run) sessionMemory(ctx context.Context) error {
	o, st := b.o, b.st
	first := o.Users + 2*o.NewUsers
	b.say("P3: signing in %d users", o.Churn)
	tokens := make([]string, o.Churn)
	for i := range tokens {
		t, err := st.Token(ctx, first+i)
		if err != nil {
			return err
		}
		tokens[i] = t
		if (i+1)%200 == 0 {
			b.say("P3: %d signed in", i+1)
		}
	}
	prevRate := runtime.MemProfileRate
	runtime.MemProfileRate = 512
	defer func() { runtime.MemProfileRate = prevRate }()
	call := func(i int) error {
		cs, err := st.Connect(ctx, st.MCPURL, tokens[i], StatelessProtocol)
		if err != nil {
			return err
		}
		defer cs.Close()
		return callOK(ctx, cs, "read_protected_document", readArgs())
	}
	// Warm-up: the pool fills with 8 callers, then 8 more replace them.
	warm := min(16, o.Churn)
	for i := range warm {
		if err := call(i); err != nil {
			return err
		}
	}
	ownW, totW := serverHeap()
	b.heapProfile("p3-warm.heap")
	for i := warm; i < o.Churn; i++ {
		if err := call(i); err != nil {
			return err
		}
		if (i+1)%200 == 0 {
			b.say("P3: %d users served", i+1)
		}
	}
	ownE, totE := serverHeap()
	b.heapProfile("p3-end.heap")
	live := b.st.LiveScopedSessions() - int(b.own.Load())
	b.say("P3: server heap %d -> %d bytes (process %d -> %d), %d live Gateway sessions", ownW, ownE, totW, totE, live)
	b.mu.Lock()
	maxLive := b.r.MaxLive
	b.mu.Unlock()
	b.r.Figures = append(b.r.Figures,
		Figure{ID: FigureSessionMemory, Name: fmt.Sprintf("%d users through maxCallers 8: server heap at end / after warm-up", o.Churn), Unit: "bytes",
			PDMCP: float64(ownE), Baselines: map[string]float64{"after warm-up": float64(ownW)}, Baseline: float64(ownW),
			Ratio: float64(ownE) / float64(ownW), Goal: "<= 1.10 x", Met: float64(ownE) <= 1.1*float64(ownW),
			Note: fmt.Sprintf("heap allocated outside the in-process Gateway, provider and bench clients (heap profile); whole process %d -> %d", totW, totE)},
		Figure{ID: FigureSessionMemory, Name: "most live Gateway sessions during the run (reference counters)", Unit: "sessions",
			PDMCP: float64(maxLive), Baseline: 8, Ratio: float64(maxLive) / 8, Goal: "<= 8", Met: maxLive <= 8})
	if b.perSession > 0 {
		b.r.Figures = append(b.r.Figures, Figure{ID: FigureSessionMemory, Name: "server heap per live caller session (8 new callers from an empty pool)",
			Unit: "bytes", PDMCP: b.perSession, Baseline: 64 << 10, Ratio: b.perSession / (64 << 10), Goal: "<= 64 KiB",
			Met: b.perSession <= 64<<10, Note: "the pool entry with its Gateway session, exchanged token and caches"})
	}
	return nil
}

func (b *run) heapProfile(name string) {
	if b.o.HeapProfiles == "" {
		return
	}
	f, err := os.Create(filepath.Join(b.o.HeapProfiles, name))
	if err != nil {
		b.say("heap profile: %v", err)
		return
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		b.say("heap profile: %v", err)
	}
}

// sessionMemoryPerCaller measures, before anything else has called, what 8 callers
// hold once served: the server's heap after one read each, less before.
func (b *run) sessionMemoryPerCaller(ctx context.Context) error {
	st := b.st
	prevRate := runtime.MemProfileRate
	runtime.MemProfileRate = 512
	defer func() { runtime.MemProfileRate = prevRate }()
	first := b.o.Users + 2*b.o.NewUsers
	var sessions []*mcp.ClientSession
	defer func() {
		for _, cs := range sessions {
			cs.Close()
		}
	}()
	for i := range 8 {
		tok, err := st.Token(ctx, first+b.o.Churn-1-i)
		if err != nil {
			return err
		}
		cs, err := st.Connect(ctx, st.MCPURL, tok, StatelessProtocol)
		if err != nil {
			return err
		}
		sessions = append(sessions, cs)
	}
	before, _ := serverHeap()
	for _, cs := range sessions {
		if err := callOK(ctx, cs, "read_protected_document", readArgs()); err != nil {
			return err
		}
	}
	after, _ := serverHeap()
	b.perSession = (float64(after) - float64(before)) / 8
	b.say("P3: %.0f bytes per live caller session", b.perSession)
	return nil
}
