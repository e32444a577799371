package bench

// The write figures: P2 (FigureFileEncrypt), encrypt_file against posting
// the file to the Gateway; P4 (FigureDurableSave), a durable save against
// one without fsync; P6 (FigureSaveHistory), a save next to a long history.

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/internal/testutil"
	"github.com/pdmcp/pdmcp/server/journal"
)

// fileEncrypt (P2) is encrypt_file of the big file against posting its bytes to the
// Gateway directly, and the peak heap of each against the file size.
func (b *run) fileEncrypt(ctx context.Context) error {
	o, st := b.o, b.st
	b.say("P2: encrypt_file of %d bytes, %d rounds", o.FileSize, o.Rounds)
	cs, err := st.ConnectUser(ctx, 0, SessionProtocol)
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
	durable, err := st.ConnectUser(ctx, 0, SessionProtocol)
	if err != nil {
		return err
	}
	defer durable.Close()
	loose, err := nd.ConnectUser(ctx, 0, SessionProtocol)
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
	cs, err := st.ConnectUser(ctx, 0, SessionProtocol)
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
