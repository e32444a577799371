package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/server/handoff"
	"github.com/pdmcp/pdmcp/server/journal"
	"github.com/pdmcp/pdmcp/server/record"
)

func newCloseStepCmd() *cobra.Command {
	var configPath, manifestPath, journalPath, step string
	cmd := command("close-step", "Revoke a step's open hand-offs from the journal, as the step's user (when that user is away)", func(cmd *cobra.Command) error {
		ctx := cmd.Context()
		sc, err := gateway.LoadServiceConfig(configPath)
		if err != nil {
			return err
		}
		m, err := grant.LoadManifest(manifestPath)
		if err != nil {
			return err
		}
		if journalPath == "" {
			journalPath = journal.DefaultPath(manifestPath)
		}
		// Never created here: a journal that is not there holds no
		// hand-off to close.
		j, err := record.OpenJournal(ctx, manifestPath, m, journalPath)
		if err != nil {
			return err
		}
		if j == nil {
			return fmt.Errorf("no journal at %s: it holds the hand-offs to close; name it with --journal", journalPath)
		}
		defer j.Close()
		// Another task's journal holds another task's hand-offs.
		if err := j.CheckTask(ctx, m.Task); err != nil {
			return err
		}
		// The manifest as the server serves it: its sections at the
		// record's newest versions.
		vs, err := j.Versions(ctx)
		if err != nil {
			return err
		}
		m = record.Merge(m, vs)
		cc := sc.ClientConfig()
		cc.Logger = loggerFrom(cmd.Context())
		c, err := gateway.New(cc)
		if err != nil {
			return err
		}
		if err := c.SignIn(ctx); err != nil {
			return fmt.Errorf("service sign-in: %w", err)
		}
		defer func() { _ = c.SignOut(ctx) }()
		res, err := handoff.CloseStep(ctx, handoff.CloseStepOptions{Minter: c, Manifest: m, Journal: j, Step: step})
		out := cmd.OutOrStdout()
		for _, r := range res {
			if r.Err != nil {
				fmt.Fprintf(out, "entry %d (document %s, key %s): NOT revoked: %v\n", r.ID, r.DocumentID, r.KeyDigest, r.Err)
				continue
			}
			switch r.Outcome {
			case journal.ClosedLeftAlone:
				fmt.Fprintf(out, "entry %d (document %s, key %s): LEFT ALONE: the recipient's entry is not the one this server granted (someone changed or replaced it); check it yourself\n", r.ID, r.DocumentID, r.KeyDigest)
			case journal.ClosedAbsent, journal.ClosedNotGranted:
				fmt.Fprintf(out, "entry %d (document %s, key %s): nothing to revoke, the recipient holds no entry\n", r.ID, r.DocumentID, r.KeyDigest)
			default:
				fmt.Fprintf(out, "entry %d (document %s, key %s): revoked, read back absent\n", r.ID, r.DocumentID, r.KeyDigest)
			}
		}
		if err != nil {
			return fmt.Errorf("step %q: not every entry was revoked; they stay in the journal, run this again: %w", step, err)
		}
		if len(res) == 0 {
			fmt.Fprintf(out, "step %q has no open hand-off in the journal\n", step)
		}
		fmt.Fprintln(out, "CLOSE-STEP: DONE")
		return nil
	})
	f := cmd.Flags()
	f.StringVar(&configPath, "config", "", "the service's config.json (from pdmcp bootstrap)")
	f.StringVar(&manifestPath, "manifest", "", "the operator's manifest.json")
	f.StringVar(&journalPath, "journal", "", "the server's journal (default <manifest>.journal.sqlite)")
	f.StringVar(&step, "step", "", "the step whose open hand-offs to revoke")
	return requireFlags(cmd, "config", "manifest", "step")
}
