package bench

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	rtrace "runtime/trace"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	xtrace "golang.org/x/exp/trace"

	"github.com/pdmcp/pdmcp/auth"
	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/internal/serve"
	"github.com/pdmcp/pdmcp/server"
)

// Phase is one part of a read's time in the server, over the reads traced:
// its median and mean in milliseconds.
type Phase struct {
	Name   string  `json:"name"`
	Median float64 `json:"medianMs"`
	Mean   float64 `json:"meanMs"`
}

// Breakdown is where a read's time goes in one session mode, from a
// runtime/trace of paced reads (pdmcp bench --trace).
type Breakdown struct {
	Mode string `json:"mode"`
	// Reads is how many tools/call requests were broken down; the client's
	// median is over the same calls, measured by the client.
	Reads        int     `json:"reads"`
	ClientMedian float64 `json:"clientMedianMs"`
	// Phases, in order: they add up to the server's time for the request
	// (handler entry to handler return); the waits overlap them.
	Phases []Phase `json:"phases"`
	Waits  []Phase `json:"waits"`
}

// Phase and wait names.
const (
	phaseServer      = "server, handler entry to return"
	phaseBeforeTool  = "MCP handler before the tool (origin, token check, body check, SDK decode, hand-off to the session)"
	phaseVerify      = "of which the bearer token's check"
	phaseToolToGW    = "tool before the Gateway request (arguments, grant checks, pool, proof)"
	phaseExchange    = "of which the token exchange at the provider"
	phaseToolBlocked = "the tool blocked outside its requests (a place in the pool, a lock, a channel), within the tool's parts"
	phaseGateway     = "Gateway round trip(s)"
	phaseAfterGW     = "tool after the Gateway (result, audit line)"
	phaseAudit       = "of which the audit write"
	phaseEncodeWrite = "result encoding and write, back to the handler"
	waitRunnable     = "runnable, waiting for a core (handler and tool goroutines)"
	waitGCAssist     = "GC mark assist (handler and tool goroutines)"
	waitSTW          = "stop-the-world pauses"
	waitGCMark       = "GC mark phase running meanwhile"
	waitSync         = "blocked on a lock (sync.Mutex, RWMutex, WaitGroup, Cond)"
)

type interval struct{ start, end xtrace.Time }

func (i interval) dur() time.Duration { return i.end.Sub(i.start) }

// overlap is how much of the intervals falls within w.
func overlap(ivs []interval, w interval) time.Duration {
	var d time.Duration
	for _, iv := range ivs {
		s, e := max(iv.start, w.start), min(iv.end, w.end)
		if e > s {
			d += e.Sub(s)
		}
	}
	return d
}

type region struct {
	kind     string
	task     xtrace.TaskID
	route    string // a Gateway request's route, when logged
	interval        // end is 0 while open
}

// phaseRoute names the part of the Gateway round trips spent on one route.
func phaseRoute(route string) string { return "of which " + route }

type request struct {
	id       xtrace.TaskID
	g        xtrace.GoID
	protocol string
	interval
}

// unblock is a goroutine made runnable by another.
type unblock struct {
	t  xtrace.Time
	by xtrace.GoID
}

// traceState gathers what the breakdown needs while the trace is read.
type traceState struct {
	requests map[xtrace.TaskID]*request
	regions  map[xtrace.GoID][]*region
	open     map[xtrace.GoID][]*region
	// Per goroutine: when it was runnable, blocked on sync, assisting GC;
	// and who woke it.
	runnable map[xtrace.GoID][]interval
	sync     map[xtrace.GoID][]interval
	blocked  map[xtrace.GoID][]interval // waiting, for any reason
	assist   map[xtrace.GoID][]interval
	woken    map[xtrace.GoID][]unblock
	since    map[xtrace.GoID]xtrace.Time // start of the current runnable or sync wait
	waitAt   map[xtrace.GoID]xtrace.Time // start of the current wait, any reason
	inSync   map[xtrace.GoID]bool
	assistAt map[xtrace.GoID]xtrace.Time
	stw      []interval
	mark     []interval
	stwAt    xtrace.Time
	markAt   xtrace.Time
}

func syncReason(r string) bool {
	for _, s := range []string{"sync", "Mutex", "Cond", "WaitGroup"} {
		if strings.Contains(r, s) {
			return true
		}
	}
	return false
}

// analyzeTrace reads a runtime/trace and breaks down each tools/call that
// reached a tool: the request task on the handler goroutine, the tool's
// region on the goroutine that ran it (the one that woke the handler with
// the answer), the Gateway and audit regions inside it, and the waits of
// both goroutines within the request.
func analyzeTrace(r io.Reader, client map[string]Latencies) ([]Breakdown, error) {
	rd, err := xtrace.NewReader(r)
	if err != nil {
		return nil, fmt.Errorf("read trace: %w", err)
	}
	st := &traceState{requests: map[xtrace.TaskID]*request{}, regions: map[xtrace.GoID][]*region{},
		open: map[xtrace.GoID][]*region{}, runnable: map[xtrace.GoID][]interval{}, sync: map[xtrace.GoID][]interval{},
		assist: map[xtrace.GoID][]interval{}, woken: map[xtrace.GoID][]unblock{}, since: map[xtrace.GoID]xtrace.Time{},
		blocked: map[xtrace.GoID][]interval{}, waitAt: map[xtrace.GoID]xtrace.Time{},
		inSync: map[xtrace.GoID]bool{}, assistAt: map[xtrace.GoID]xtrace.Time{}}
	for {
		ev, err := rd.ReadEvent()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read trace: %w", err)
		}
		st.event(ev)
	}
	return st.breakdowns(client), nil
}

func (st *traceState) event(ev xtrace.Event) {
	t := ev.Time()
	switch ev.Kind() {
	case xtrace.EventTaskBegin:
		if tk := ev.Task(); tk.Type == serve.TraceRequestTask {
			st.requests[tk.ID] = &request{id: tk.ID, g: ev.Goroutine(), interval: interval{start: t}}
		}
	case xtrace.EventTaskEnd:
		if q := st.requests[ev.Task().ID]; q != nil {
			q.end = t
		}
	case xtrace.EventLog:
		switch l := ev.Log(); l.Category {
		case serve.TraceProtocolLog:
			if q := st.requests[l.Task]; q != nil {
				q.protocol = l.Message
			}
		case gateway.TraceRouteLog:
			open := st.open[ev.Goroutine()]
			for i := len(open) - 1; i >= 0; i-- {
				if open[i].kind == gateway.TraceRequestRegion {
					open[i].route = l.Message
					break
				}
			}
		}
	case xtrace.EventRegionBegin:
		rg := ev.Region()
		switch rg.Type {
		case server.TraceToolRegion, server.TraceAuditRegion, gateway.TraceRequestRegion,
			auth.TraceVerifyRegion, auth.TraceExchangeRegion:
			g := ev.Goroutine()
			x := &region{kind: rg.Type, task: rg.Task, interval: interval{start: t}}
			st.open[g] = append(st.open[g], x)
			st.regions[g] = append(st.regions[g], x)
		}
	case xtrace.EventRegionEnd:
		g := ev.Goroutine()
		stack := st.open[g]
		for i := len(stack) - 1; i >= 0; i-- {
			if stack[i].kind == ev.Region().Type {
				stack[i].end = t
				st.open[g] = slices.Delete(stack, i, i+1)
				break
			}
		}
	case xtrace.EventRangeBegin, xtrace.EventRangeActive:
		rn := ev.Range()
		switch {
		case strings.HasPrefix(rn.Name, "stop-the-world"):
			st.stwAt = t
		case rn.Name == "GC concurrent mark phase":
			st.markAt = t
		case rn.Name == "GC mark assist":
			st.assistAt[ev.Goroutine()] = t
		}
	case xtrace.EventRangeEnd:
		rn := ev.Range()
		switch {
		case strings.HasPrefix(rn.Name, "stop-the-world") && st.stwAt != 0:
			st.stw = append(st.stw, interval{st.stwAt, t})
			st.stwAt = 0
		case rn.Name == "GC concurrent mark phase" && st.markAt != 0:
			st.mark = append(st.mark, interval{st.markAt, t})
			st.markAt = 0
		case rn.Name == "GC mark assist":
			g := ev.Goroutine()
			if at, ok := st.assistAt[g]; ok {
				st.assist[g] = append(st.assist[g], interval{at, t})
				delete(st.assistAt, g)
			}
		}
	case xtrace.EventStateTransition:
		tr := ev.StateTransition()
		if tr.Resource.Kind != xtrace.ResourceGoroutine {
			return
		}
		g := tr.Resource.Goroutine()
		from, to := tr.Goroutine()
		if from == xtrace.GoRunnable {
			if s, ok := st.since[g]; ok {
				st.runnable[g] = append(st.runnable[g], interval{s, t})
			}
		}
		if from == xtrace.GoWaiting && st.inSync[g] {
			if s, ok := st.since[g]; ok {
				st.sync[g] = append(st.sync[g], interval{s, t})
			}
			st.inSync[g] = false
		}
		delete(st.since, g)
		if from == xtrace.GoWaiting {
			if s, ok := st.waitAt[g]; ok {
				st.blocked[g] = append(st.blocked[g], interval{s, t})
				delete(st.waitAt, g)
			}
		}
		if to == xtrace.GoWaiting {
			st.waitAt[g] = t
		}
		switch to {
		case xtrace.GoRunnable:
			st.since[g] = t
			if from == xtrace.GoWaiting {
				if by := ev.Goroutine(); by != xtrace.NoGoroutine && by != g {
					st.woken[g] = append(st.woken[g], unblock{t: t, by: by})
				}
			}
		case xtrace.GoWaiting:
			if syncReason(tr.Reason) {
				st.since[g], st.inSync[g] = t, true
			}
		}
	}
}

// toolOf finds the tool region of request q: on the goroutine that woke
// the handler last within the request, the latest tool region that ended
// by then and began inside the request.
func (st *traceState) toolOf(q *request) (xtrace.GoID, *region) {
	ws := st.woken[q.g]
	for i := len(ws) - 1; i >= 0; i-- {
		w := ws[i]
		if w.t < q.start || w.t > q.end {
			continue
		}
		var best *region
		for _, rg := range st.regions[w.by] {
			if rg.kind == server.TraceToolRegion && rg.end != 0 && rg.start >= q.start && rg.end <= w.t &&
				(best == nil || rg.start > best.start) {
				best = rg
			}
		}
		if best != nil {
			return w.by, best
		}
	}
	return 0, nil
}

func (st *traceState) breakdowns(client map[string]Latencies) []Breakdown {
	type sample map[string]time.Duration
	byMode := map[string][]sample{}
	routes := map[string]bool{}
	for _, q := range st.requests {
		if q.end == 0 {
			continue
		}
		tg, tool := st.toolOf(q)
		if tool == nil {
			continue // not a tools/call (initialize, a notification)
		}
		s := sample{phaseServer: q.dur(), phaseBeforeTool: tool.start.Sub(q.start), phaseEncodeWrite: q.end.Sub(tool.end)}
		for _, rg := range st.regions[q.g] {
			if rg.kind == auth.TraceVerifyRegion && rg.end != 0 && rg.start >= q.start && rg.end <= tool.start {
				s[phaseVerify] += rg.dur()
			}
		}
		var gw []*region
		// The tool's waits outside its requests: a request's own wait for
		// its answer is the request's.
		s[phaseToolBlocked] = overlap(st.blocked[tg], tool.interval)
		for _, rg := range st.regions[tg] {
			if rg.end == 0 || rg.start < tool.start || rg.end > tool.end {
				continue
			}
			switch rg.kind {
			case gateway.TraceRequestRegion:
				gw = append(gw, rg)
				s[phaseGateway] += rg.dur()
				s[phaseRoute(rg.route)] += rg.dur()
				routes[rg.route] = true
				s[phaseToolBlocked] -= overlap(st.blocked[tg], rg.interval)
			case auth.TraceExchangeRegion:
				s[phaseExchange] += rg.dur()
				s[phaseToolBlocked] -= overlap(st.blocked[tg], rg.interval)
			case server.TraceAuditRegion:
				s[phaseAudit] += rg.dur()
			}
		}
		if len(gw) == 0 {
			s[phaseToolToGW] = tool.dur()
		} else {
			s[phaseToolToGW] = gw[0].start.Sub(tool.start)
			s[phaseAfterGW] = tool.end.Sub(gw[len(gw)-1].end)
			// Time between two Gateway requests counts as the tool's own.
			for i := 1; i < len(gw); i++ {
				s[phaseToolToGW] += gw[i].start.Sub(gw[i-1].end)
			}
		}
		w := q.interval
		s[waitRunnable] = overlap(st.runnable[q.g], w) + overlap(st.runnable[tg], w)
		s[waitGCAssist] = overlap(st.assist[q.g], w) + overlap(st.assist[tg], w)
		s[waitSTW] = overlap(st.stw, w)
		s[waitGCMark] = overlap(st.mark, w)
		s[waitSync] = overlap(st.sync[q.g], w) + overlap(st.sync[tg], w)
		byMode[q.protocol] = append(byMode[q.protocol], s)
	}
	var out []Breakdown
	for _, mode := range []string{SessionProtocol, StatelessProtocol} {
		ss := byMode[mode]
		if len(ss) == 0 {
			continue
		}
		stat := func(name string) Phase {
			var l Latencies
			var sum time.Duration
			for _, s := range ss {
				l = append(l, s[name])
				sum += s[name]
			}
			return Phase{Name: name, Median: l.Quantile(0.5), Mean: sum.Seconds() * 1000 / float64(len(ss))}
		}
		b := Breakdown{Mode: mode, Reads: len(ss), ClientMedian: client[mode].Quantile(0.5)}
		names := []string{phaseServer, phaseBeforeTool, phaseVerify, phaseToolToGW, phaseExchange, phaseGateway}
		for _, r := range slices.Sorted(maps.Keys(routes)) {
			names = append(names, phaseRoute(r))
		}
		for _, n := range append(names, phaseAfterGW, phaseAudit, phaseEncodeWrite, phaseToolBlocked) {
			b.Phases = append(b.Phases, stat(n))
		}
		for _, n := range []string{waitRunnable, waitGCAssist, waitSTW, waitGCMark, waitSync} {
			b.Waits = append(b.Waits, stat(n))
		}
		out = append(out, b)
	}
	slices.SortFunc(out, func(a, b Breakdown) int { return cmp.Compare(a.Mode, b.Mode) })
	return out
}

// traceReads records a runtime/trace of one paced round of pdmcp's reads
// in each mode into Options.Trace and breaks it down into the report.
func (b *run) traceReads(ctx context.Context, sessions map[string][]*mcp.ClientSession) error {
	o := b.o
	b.say("P1: tracing one more round of reads into %s", o.Trace)
	bd, err := traceCalls(o.Trace, func() (map[string]Latencies, error) {
		client := map[string]Latencies{}
		for _, mode := range []string{SessionProtocol, StatelessProtocol} {
			cs := sessions[mode]
			l, err := paced(ctx, o.Users, o.Calls, o.Rate, func(ctx context.Context, u int) error {
				return callOK(ctx, cs[u], "read_protected_document", readArgs())
			})
			if err != nil {
				return nil, err
			}
			client[mode] = l
		}
		return client, nil
	})
	if err != nil {
		return err
	}
	b.r.Trace = append(b.r.Trace, bd...)
	return nil
}

// traceCalls records a runtime/trace of what run does into the file and
// breaks down every tools/call in it that reached a tool; run returns the
// client's latencies per protocol revision.
func traceCalls(file string, run func() (map[string]Latencies, error)) ([]Breakdown, error) {
	f, err := os.Create(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := rtrace.Start(f); err != nil {
		return nil, err
	}
	client, err := run()
	rtrace.Stop()
	if err != nil {
		return nil, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	bd, err := analyzeTrace(bufio.NewReader(f), client)
	if err != nil {
		return nil, err
	}
	if len(bd) == 0 {
		return nil, errors.New("the trace holds no tools/call that reached a tool")
	}
	return bd, nil
}
