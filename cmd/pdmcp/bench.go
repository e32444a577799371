package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/pdmcp/pdmcp/internal/bench"
)

// benchFigures are the figures bench measures, as --only names them.
func benchFigures() []string { return []string{"P1", "P2", "P3", "P4", "P5", "P6", "P7"} }

// notJudgedQuick is what a --quick run says instead of judging a goal.
const notJudgedQuick = "not judged (--quick)"

// benchReport is bench's --json output: the report, and how its goals
// were judged.
type benchReport struct {
	*bench.Report
	// Goals is "judged", or notJudgedQuick.
	Goals string `json:"goals"`
	// Missed are the ids of the figures whose judged goal was missed
	// (none when not judged).
	Missed []string `json:"missed"`
}

// writeBench prints r, as text or JSON; a quick run's goals are not
// judged.
func writeBench(w io.Writer, r *bench.Report, quick, asJSON bool) error {
	if asJSON {
		out := benchReport{Report: r, Goals: "judged", Missed: []string{}}
		if quick {
			out.Goals = notJudgedQuick
		} else {
			for _, f := range r.Missed() {
				out.Missed = append(out.Missed, f.ID)
			}
		}
		return writeJSON(w, out)
	}
	if quick {
		return r.WriteTextNotJudged(w, "--quick")
	}
	r.WriteText(w)
	return nil
}

// benchOutcome is how a run that measured r ends: a judged goal missed is
// a refusal (exit 3) unless allowMissed; a quick run judges none.
func benchOutcome(r *bench.Report, quick, allowMissed bool) error {
	if len(r.Figures) == 0 {
		return errors.New("pdmcp bench: no figure was measured")
	}
	if quick || allowMissed {
		return nil
	}
	if missed := r.Missed(); len(missed) > 0 {
		return refusedError(fmt.Errorf("pdmcp bench: %d goal(s) missed: %s (--allow-missed exits 0 regardless)",
			len(missed), bench.MissedSummary(missed)))
	}
	return nil
}

func newBenchCmd() *cobra.Command {
	var (
		asJSON, quick bool
		allowMissed   bool
		only          []string
		dir, cpuProf  string
		heapDir       string
		traceFile     string
		opts          = bench.Full()
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure pdmcp against the Gateway and a bare MCP server, on a loopback stack it starts itself",
		Long: `bench starts a reference Gateway, the development provider, pdmcp over HTTPS and a
bare go-sdk server (a no-op tool, and one answering a copy of a read's result;
same TLS, a bearer check) on 127.0.0.1, and measures, in alternating rounds in this one process:

  P1  read_protected_document of a 4 KiB document, 8 users, paced, median and p99,
      against a direct Gateway decrypt (a) plus a bare no-op call (b), with
      sessions (2025-11-25) and without (2026-07-28); reported beside it, the
      median against (a) plus a bare call answering a copy of the read's
      result (b'), which leaves only pdmcp's own work over the floor, and
      the same with each user's calls taking turns among the three, judged
      (goal: 1.05 x (a+b'))
  P2  encrypt_file of 16,777,215 bytes against posting them to the Gateway, and
      its peak heap against the file size
  P3  1,000 users through maxCallers 8: heap after warm-up against at the end,
      heap per live caller, most live Gateway sessions
  P4  save_protected_result with the durable journal and saved files against the
      same pipeline without fsync
  P5  a new user's first call against the same exchange, mint and decrypt made
      directly; reported beside it, against those plus a bare first call
      carrying the same result
  P6  a save's median latency to a destination with 50,000 earlier versions in
      the record against one with none
  P7  a signed-in user's read p99 while the abuse suite runs against pdmcp serve
      (its own process, connection cap 256, the session pool full): stalled
      bodies with and without a token past the cap, a subscriptions/listen
      flood, junk requests, an unauthenticated refusal flood; against the same
      reads with none; and the server's resident memory and open descriptors
      during the abuse (Linux: /proc)

Each figure is printed with its baselines and their ratio, and the ratio's
least and greatest over the rounds; only ratios mean anything on a shared
machine. --tracing prices tracing: P1 also reads through a second pdmcp
with its OpenTelemetry tracing on (every span exported to a loopback sink),
in the same rounds, and judges its reads against the untraced ones, their
calls taking turns within one window (goal: 1.05 x). --trace FILE breaks a P1 read's time, and a P5 new user's first
read, down from a runtime/trace. Progress goes to stderr; --json prints the report
for machines: {"started","seconds","go","cpus","os","options","figures":[{"id","name","unit",
"pdmcp","baselines","baseline","ratio","goal","met","note","ratioMin","ratioMax","rounds"}],
"maxLiveGatewaySessions","trace","problems","goals","missed"}, where "goals" is "judged" or
"not judged (--quick)" and "missed" lists the ids of the figures whose judged goal was missed
(members are only ever added).

Exit status: 0 every judged goal met (or --allow-missed, or --quick: its counts are too
small for a ratio to mean anything, so it judges none), 3 a goal missed, 2 the command line
is wrong, 1 a figure could not be measured.`,
		Example: `  pdmcp bench
  pdmcp bench --quick
  pdmcp bench --only P1,P5 --rounds 3 --json > bench.json
  pdmcp bench --only P1 --trace p1.trace
  pdmcp bench --allow-missed --json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, id := range only {
				if !slices.ContainsFunc(benchFigures(), func(f string) bool { return strings.EqualFold(f, id) }) {
					return usageError("pdmcp bench: --only %q: the figures are P1 to P7", id)
				}
			}
			o := opts
			if quick {
				q := bench.Quick()
				q.Only, q.Tracing = o.Only, o.Tracing
				o = q
			}
			o.Only, o.Dir, o.HeapProfiles, o.Trace = only, dir, heapDir, traceFile
			// P7 serves from this binary in its own process.
			bin, err := os.Executable()
			if err != nil {
				return fmt.Errorf("P7 runs this binary as the server: %w", err)
			}
			o.Binary = bin
			o.Progress = cmd.ErrOrStderr()
			o.Logger = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelError}))
			if cpuProf != "" {
				f, err := os.Create(cpuProf)
				if err != nil {
					return fmt.Errorf("pdmcp bench: --cpuprofile %s: %w", cpuProf, err)
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return fmt.Errorf("pdmcp bench: --cpuprofile %s: %w", cpuProf, err)
				}
				defer pprof.StopCPUProfile()
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			r, err := bench.Run(ctx, o)
			if err != nil {
				return err
			}
			if err := writeBench(cmd.OutOrStdout(), r, quick, asJSON); err != nil {
				return err
			}
			return benchOutcome(r, quick, allowMissed)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	f.BoolVar(&allowMissed, "allow-missed", false, "exit 0 when a goal is missed (the report still says MISSED)")
	f.BoolVar(&opts.Tracing, "tracing", false, "price tracing: P1 also reads through a second pdmcp with OpenTelemetry tracing on "+
		"(every span exported over OTLP/HTTP to a loopback sink that drops it), in the same rounds, and judges traced over untraced")
	f.BoolVar(&quick, "quick", false, "small counts (seconds): checks that every figure runs, measures little, judges no goal")
	f.StringSliceVar(&only, "only", nil, "measure only these figures (P1,...,P7)")
	_ = cmd.RegisterFlagCompletionFunc("only", completeList(benchFigures()...))
	f.StringVar(&dir, "dir", "", "state folder (default: a temporary one, removed afterwards)")
	f.StringVar(&cpuProf, "cpuprofile", "", "write a CPU profile of the whole run (every part runs in this process)")
	f.StringVar(&heapDir, "heapprofiles", "", "folder for P3's heap profiles after warm-up and at the end")
	f.StringVar(&traceFile, "trace", "", "write a runtime/trace of one more paced round of P1's reads to this file "+
		"(and of one more group of P5's new users to FILE.p5, or to FILE without P1), and break a read's time down "+
		"from it (go tool trace reads the files too)")
	f.IntVar(&opts.Rounds, "rounds", opts.Rounds, "alternating rounds of P1, P2, P4, P6 and P7")
	f.IntVar(&opts.Calls, "calls", opts.Calls, "P1 calls per user per target per round")
	f.Float64Var(&opts.Rate, "rate", opts.Rate, "P1 total calls per second")
	f.IntVar(&opts.Churn, "users", opts.Churn, "P3 distinct users")
	f.IntVar(&opts.Saves, "saves", opts.Saves, "P4 saves per round, and P6's per round and destination")
	f.IntVar(&opts.History, "history", opts.History, "P6 earlier versions in the record")
	f.IntVar(&opts.AbuseCalls, "abuse-calls", opts.AbuseCalls, "P7 reads per phase (quiet, under abuse) per round")
	_ = cmd.MarkFlagDirname("dir")
	_ = cmd.MarkFlagDirname("heapprofiles")
	completeFiles(cmd, "", "cpuprofile", "trace")
	return cmd
}
