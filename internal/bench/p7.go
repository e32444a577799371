package bench

// P7 (FigureAbuse): a signed-in user's read while the abuse suite runs,
// against the same read with none, and what the server process holds
// meanwhile. The server under test is `pdmcp serve` in its own process,
// so that its resident memory and descriptors are its own and not the
// attackers', the Gateway's or the provider's, which run in this one.

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// p7Server is `pdmcp serve --transport http` on the bench stack's state,
// on its own port, with its own audit file. It shares the stack's journal
// (the manifest's), as two servers on one manifest do: a server refuses
// a new, empty journal beside saved versions, and P7 only reads.
type p7Server struct {
	cmd  *exec.Cmd
	url  string
	log  string // its standard error
	done chan error
}

// startP7Server writes the P7 server's mcp-http.json beside the stack's
// (a copy with its own port and connection cap) and starts pdmcp on it.
func (b *run) startP7Server(ctx context.Context, dir string) (*p7Server, error) {
	if b.o.Binary == "" {
		return nil, errors.New("P7 runs the server as its own process and needs the pdmcp binary (Options.Binary)")
	}
	s := b.st.stack
	raw, err := os.ReadFile(s.HTTPConfigPath)
	if err != nil {
		return nil, err
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", s.HTTPConfigPath, err)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	listen, _ := cfg["listen"].(map[string]any)
	if listen == nil {
		return nil, fmt.Errorf("%s has no listen", s.HTTPConfigPath)
	}
	listen["port"] = port
	// The resource URL, when written, names the stack's port; the default
	// names this one.
	delete(cfg, "resource")
	conns, _ := cfg["connections"].(map[string]any)
	if conns == nil {
		conns = map[string]any{}
	}
	conns["max"] = b.o.AbuseConnections
	cfg["connections"] = conns
	// Relative paths in mcp-http.json are the file's folder's: the copy
	// lives beside the original.
	cfgPath := filepath.Join(filepath.Dir(s.HTTPConfigPath), "mcp-http-p7.json")
	out, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(cfgPath, append(out, '\n'), 0o600); err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "serve.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	cmd := exec.Command(b.o.Binary, "serve", "--transport", "http", "--http-config", cfgPath,
		"--config", s.ServicePath, "--manifest", s.ManifestPath, "--grant", s.GrantPath,
		"--audit", filepath.Join(dir, "audit.jsonl"))
	// What a host passes through pdmcp clean-env.
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "TMPDIR=" + os.TempDir()}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s serve: %w", b.o.Binary, err)
	}
	p := &p7Server{cmd: cmd, url: fmt.Sprintf("https://127.0.0.1:%d/mcp", port), log: logPath, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	if err := p.waitReady(ctx, b.st.HC.Transport.(*http.Transport).TLSClientConfig); err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

// freePort is a port free on 127.0.0.1 a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// waitReady waits until the server answers over TLS, it ends, or a minute
// has passed.
func (p *p7Server) waitReady(ctx context.Context, tc *tls.Config) error {
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 5 * time.Second}
	defer hc.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url, nil)
		if err != nil {
			return err
		}
		if resp, err := hc.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return nil
		}
		select {
		case err := <-p.done:
			p.done <- err
			return fmt.Errorf("pdmcp serve ended before it served (%v): %s", err, p.tail())
		case <-ctx.Done():
			return fmt.Errorf("pdmcp serve did not answer within a minute: %s", p.tail())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// tail is the end of the server's log, for an error.
func (p *p7Server) tail() string {
	b, _ := os.ReadFile(p.log)
	s := strings.TrimSpace(string(b))
	if len(s) > 2000 {
		s = "..." + s[len(s)-2000:]
	}
	return s
}

// stop ends the server as systemd would (SIGTERM, so it revokes its
// Gateway sessions), killing it after 30 s.
func (p *p7Server) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// usage is the most resident memory (bytes) and open descriptors seen
// of a process, the CPU it used (in cores: CPU time over wall time), and
// the last error reading them.
type usage struct {
	rss     int64
	fds     int
	cores   float64
	err     error
	samples int
}

// sampleUsage samples pid every 20 ms until the returned function is
// called, which returns what was seen.
func sampleUsage(pid int) func() usage {
	var (
		mu   sync.Mutex
		u    usage
		wg   sync.WaitGroup
		done = make(chan struct{})
	)
	start := time.Now()
	cpu0, cpuErr := procCPU(pid)
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			rss, fds, err := procUsage(pid)
			mu.Lock()
			if err != nil {
				u.err = err
			} else {
				u.rss, u.fds, u.samples = max(u.rss, rss), max(u.fds, fds), u.samples+1
			}
			mu.Unlock()
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() usage {
		close(done)
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		if cpu1, err := procCPU(pid); err == nil && cpuErr == nil {
			u.cores = (cpu1 - cpu0).Seconds() / time.Since(start).Seconds()
		}
		return u
	}
}

// p7Round is one round's measures: alice's latencies and the server's
// most memory and descriptors, quiet and under the abuse.
type p7Round struct {
	quiet, abused Latencies
	// The control: the same document decrypted at the Gateway directly,
	// from this process, beside alice's reads in each phase.
	directQuiet, directAbused Latencies
	quietUse                  usage
	abusedUse                 usage
	stats                     []*AttackStats
}

// abuseLatency (P7) measures alice's read p99 with the abuse suite
// running against the server and without, in alternating phases.
func (b *run) abuseLatency(ctx context.Context) error {
	o, st := b.o, b.st
	dir := filepath.Join(filepath.Dir(st.stack.HTTPConfigPath), "p7")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	b.say("P7: starting %s serve as its own process (connection cap %d)", o.Binary, o.AbuseConnections)
	srv, err := b.startP7Server(ctx, dir)
	if err != nil {
		return err
	}
	defer srv.stop()
	pid := srv.cmd.Process.Pid
	carol, err := st.NoAccessToken(ctx, srv.url)
	if err != nil {
		return err
	}
	target := AbuseTarget{URL: srv.url, TLS: st.HC.Transport.(*http.Transport).TLSClientConfig, Token: carol}
	// The pool is filled: alice (user 0) and maxCallers-1 others read once.
	var sessions []*mcp.ClientSession
	defer func() {
		for _, cs := range sessions {
			cs.Close()
		}
	}()
	for i := range st.o.MaxCallers {
		tok, err := st.tokenFor(ctx, i, srv.url)
		if err != nil {
			return err
		}
		cs, err := st.Connect(ctx, srv.url, tok, SessionProtocol)
		if err != nil {
			return fmt.Errorf("connect %s to the P7 server: %w", UserName(i), err)
		}
		sessions = append(sessions, cs)
		if err := callOK(ctx, cs, "read_protected_document", readArgs()); err != nil {
			return fmt.Errorf("%s: %w", UserName(i), err)
		}
	}
	alice := sessions[0]
	read := func(ctx context.Context, _ int) error {
		return callOK(ctx, alice, "read_protected_document", readArgs())
	}
	var closers []func()
	defer func() {
		for _, c := range closers {
			c()
		}
	}()
	direct, err := b.directReads(ctx, &closers)
	if err != nil {
		return err
	}
	// phase reads as alice and, beside her on its own schedule, decrypts
	// directly: what the machine alone does to a read's tail.
	phase := func(ctx context.Context) (reads, directs Latencies, err error) {
		var derr error
		done := make(chan struct{})
		go func() {
			defer close(done)
			directs, derr = paced(ctx, 1, b.o.AbuseCalls, b.o.AbuseRate, direct.call)
		}()
		reads, err = paced(ctx, 1, b.o.AbuseCalls, b.o.AbuseRate, read)
		<-done
		return reads, directs, errors.Join(err, derr)
	}
	// Warm-up, unmeasured: alice's connection and session in use.
	if _, err := paced(ctx, 1, min(o.AbuseCalls, 25), o.AbuseRate, read); err != nil {
		return err
	}
	b.say("P7: alice reads %d times at %.0f/s per phase, quiet then under abuse, %d rounds", o.AbuseCalls, o.AbuseRate, o.Rounds)
	var rounds []p7Round
	for round := range o.Rounds {
		var r p7Round
		stopUse := sampleUsage(pid)
		r.quiet, r.directQuiet, err = phase(ctx)
		r.quietUse = stopUse()
		if err != nil {
			return fmt.Errorf("quiet read: %w", err)
		}
		stopUse = sampleUsage(pid)
		suite, err := StartAll(ctx, target, o.Abuse)
		if err != nil {
			stopUse()
			return err
		}
		r.abused, r.directAbused, err = b.underAbuse(ctx, suite, phase)
		r.abusedUse = stopUse()
		r.stats = suite.Stop()
		if err != nil {
			return fmt.Errorf("read under abuse: %w", err)
		}
		for _, s := range r.stats {
			b.say("P7 round %d: %v", round+1, s)
		}
		b.say("P7 round %d: p99 %.2f ms quiet, %.2f ms under abuse; server %d -> %d KiB, %d -> %d descriptors, %.2f -> %.2f cores",
			round+1, r.quiet.Quantile(0.99), r.abused.Quantile(0.99), r.quietUse.rss>>10, r.abusedUse.rss>>10,
			r.quietUse.fds, r.abusedUse.fds, r.quietUse.cores, r.abusedUse.cores)
		rounds = append(rounds, r)
		b.settleAfterAbuse(ctx, pid, r.quietUse.fds)
	}
	b.p7Figures(rounds)
	return nil
}

// underAbuse waits until every attack is under way (each holding attack
// has opened its connections, each flood has sent some requests; at most
// a minute), then measures a phase.
func (b *run) underAbuse(ctx context.Context, all *Suite, phase func(context.Context) (Latencies, Latencies, error)) (Latencies, Latencies, error) {
	if !all.UnderWay(ctx, b.o.Abuse, time.Minute) {
		b.say("P7: the abuse was not fully under way after a minute; measuring anyway")
	}
	return phase(ctx)
}

// settleSlack is how many more descriptors than quiet the server may hold
// once the abuse has stopped: its own keep-alive connections to the
// Gateway and the provider, which a busy phase may have grown.
const settleSlack = 16

// settleAfterAbuse waits, at most 10 s, until the server holds about as
// many descriptors as it did quiet (the attackers' connections closed),
// so the next quiet phase is quiet.
func (b *run) settleAfterAbuse(ctx context.Context, pid, quietFDs int) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if _, fds, err := procUsage(pid); err != nil || fds <= quietFDs+settleSlack {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.say("P7: the server still held over %d descriptors more than quiet 10 s after the abuse stopped", settleSlack)
}

// p7Figures adds P7's figures from its rounds.
func (b *run) p7Figures(rounds []p7Round) {
	o := b.o
	var quiet, abused, dQuiet, dAbused Latencies
	var latR, medR, dirR, rssR, fdR []float64
	// Memory and descriptors are judged against the server before any
	// abuse (the first quiet phase): a later quiet phase holds what the
	// abuse before it left (Go returns freed memory to the system slowly).
	qUse := rounds[0].quietUse
	var aUse usage
	var after int64 // the most memory seen quiet after an abuse phase
	var qCores, aCores float64
	for i, r := range rounds {
		quiet, abused = append(quiet, r.quiet...), append(abused, r.abused...)
		latR = append(latR, r.abused.Quantile(0.99)/r.quiet.Quantile(0.99))
		medR = append(medR, r.abused.Quantile(0.5)/r.quiet.Quantile(0.5))
		dQuiet, dAbused = append(dQuiet, r.directQuiet...), append(dAbused, r.directAbused...)
		dirR = append(dirR, r.directAbused.Quantile(0.99)/r.directQuiet.Quantile(0.99))
		aUse.rss, aUse.fds = max(aUse.rss, r.abusedUse.rss), max(aUse.fds, r.abusedUse.fds)
		qCores, aCores = qCores+r.quietUse.cores/float64(len(rounds)), aCores+r.abusedUse.cores/float64(len(rounds))
		aUse.err = errors.Join(aUse.err, r.quietUse.err, r.abusedUse.err)
		if i > 0 {
			after = max(after, r.quietUse.rss)
		}
		if qUse.rss > 0 && r.abusedUse.rss > 0 {
			rssR = append(rssR, float64(r.abusedUse.rss)/float64(qUse.rss))
			fdR = append(fdR, float64(r.abusedUse.fds)/float64(o.AbuseConnections+qUse.fds))
		}
	}
	var held []string
	for _, s := range rounds[len(rounds)-1].stats {
		if s.Attack == AttackJunk || s.Attack == AttackRefusalFlood {
			held = append(held, fmt.Sprintf("%s %d requests", s.Attack, s.Requests))
			continue
		}
		held = append(held, fmt.Sprintf("%s at most %d held (%d opened, %d closed by the server)", s.Attack, s.MostHeld,
			s.Opened, s.ServerClosed))
	}
	pa, pq := abused.Quantile(0.99), quiet.Quantile(0.99)
	f := Figure{ID: FigureAbuse, Name: "a signed-in user's read_protected_document p99 while the abuse suite runs (a-e), against none",
		Unit: "ms", PDMCP: pa, Baselines: map[string]float64{"no abuse": pq}, Baseline: pq, Ratio: pa / pq,
		Goal: "<= 2 x", Met: pa/pq <= 2,
		Note: fmt.Sprintf("pdmcp serve in its own process, connection cap %d, maxCallers %d full; the server used %.2f cores quiet, "+
			"%.2f under abuse (mean over the rounds; /proc, Linux only); the last round's abuse: %s",
			o.AbuseConnections, b.st.o.MaxCallers, qCores, aCores, strings.Join(held, "; "))}
	f.spread(latR)
	// The median beside it: what the abuse costs every read, where the
	// p99 of a few hundred reads on a shared machine is also the one read
	// that waited behind another process.
	ma, mq := abused.Quantile(0.5), quiet.Quantile(0.5)
	med := Figure{ID: FigureAbuse, Name: "the same reads' median while the abuse suite runs, against none", Unit: "ms",
		PDMCP: ma, Baselines: map[string]float64{"no abuse": mq}, Baseline: mq, Ratio: ma / mq, Goal: "reported", Met: true}
	med.spread(medR)
	// The control: where the direct decrypt's p99 rises as much, the tail
	// is the machine's (the attackers, the Gateway and every other process
	// on its cores), not the server's.
	da, dq := dAbused.Quantile(0.99), dQuiet.Quantile(0.99)
	ctl := Figure{ID: FigureAbuse, Name: "control: a direct Gateway decrypt's p99 beside alice's reads, under the abuse against none",
		Unit: "ms", PDMCP: da, Measured: "direct decrypt (control)", Baselines: map[string]float64{"no abuse": dq}, Baseline: dq,
		Ratio: da / dq, Goal: "reported", Met: true,
		Note: "diagnostic: the same document decrypted at the Gateway by this process, not through pdmcp, at the same pace"}
	ctl.spread(dirR)
	b.r.Figures = append(b.r.Figures, f, med, ctl)
	if !procMeasured || len(rssR) == 0 {
		b.r.Problems = append(b.r.Problems, fmt.Sprintf("P7: the server's memory and descriptors were not measured: %v",
			aUse.err))
		return
	}
	note := "the most seen, sampled every 20 ms from /proc/<pid>/status; quiet is before any abuse"
	if after > 0 {
		note += fmt.Sprintf("; quiet between abuse phases, at most %.1f MiB", float64(after)/(1<<20))
	}
	m := Figure{ID: FigureAbuse, Name: "the server's resident memory (VmRSS) during the abuse, against quiet", Unit: "bytes",
		PDMCP: float64(aUse.rss), Baselines: map[string]float64{"quiet": float64(qUse.rss)}, Baseline: float64(qUse.rss),
		Ratio: float64(aUse.rss) / float64(qUse.rss), Goal: "<= 1.5 x", Met: float64(aUse.rss) <= 1.5*float64(qUse.rss),
		Note: note}
	m.spread(rssR)
	capFDs := float64(o.AbuseConnections + qUse.fds)
	d := Figure{ID: FigureAbuse, Name: "the server's open descriptors during the abuse, against the connection cap plus its quiet count",
		Unit: "descriptors", PDMCP: float64(aUse.fds),
		Baselines: map[string]float64{"connection cap": float64(o.AbuseConnections), "quiet": float64(qUse.fds)},
		Baseline:  capFDs, Ratio: float64(aUse.fds) / capFDs, Goal: "<= 1 x", Met: float64(aUse.fds) <= capFDs,
		Note: "the most seen, counted every 20 ms in /proc/<pid>/fd; quiet is before any abuse"}
	d.spread(fdR)
	b.r.Figures = append(b.r.Figures, m, d)
}
