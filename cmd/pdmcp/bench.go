package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/pdmcp/pdmcp/internal/bench"
)

// benchFigures are the figures bench measures, as --only names them.
func benchFigures() []string { return []string{"P1", "P2", "P3", "P4", "P5", "P6", "P7"} }

func newBenchCmd() *cobra.Command {
	var (
		asJSON, quick bool
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
      result (b'), which leaves only pdmcp's own work over the floor
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
machine. --tracing runs pdmcp with its OpenTelemetry tracing on (every span
exported to a loopback sink): compare P1 with a run without. --trace FILE breaks a P1 read's time, and a P5 new user's first read,
down from a runtime/trace. Progress goes to stderr; --json prints the report
for machines.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
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
					return err
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return err
				}
				defer pprof.StopCPUProfile()
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			r, err := bench.Run(ctx, o)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(r)
			}
			r.WriteText(cmd.OutOrStdout())
			if len(r.Figures) == 0 {
				return errors.New("no figure was measured; --only takes P1 to P7")
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	f.BoolVar(&opts.Tracing, "tracing", false, "run pdmcp with OpenTelemetry tracing on, every span exported over OTLP/HTTP "+
		"to a loopback sink that drops it (compare P1 with a run without)")
	f.BoolVar(&quick, "quick", false, "small counts (seconds): checks that every figure runs, measures little")
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
	return cmd
}
