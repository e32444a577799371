package main

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/operator"
	"github.com/pdmcp/pdmcp/server/handoff"
	"github.com/pdmcp/pdmcp/server/journal"
	"github.com/pdmcp/pdmcp/server/record"
)

// closeStepJSON is `pdmcp close-step --json`: stable, members only ever
// added.
type closeStepJSON struct {
	Step    string               `json:"step"`
	Entries []closeStepEntryJSON `json:"entries"`
	// Done: every open hand-off of the step is closed (none left in the
	// journal).
	Done bool `json:"done"`
}

// closeStepEntryJSON is one open hand-off close-step worked on.
type closeStepEntryJSON struct {
	ID         int64  `json:"id"`
	DocumentID string `json:"documentId"`
	KeyDigest  string `json:"keyDigest"`
	// Outcome is "revoked" (read back absent), "absent" or "not-granted"
	// (the recipient held no entry: nothing to revoke), "left-alone" (the
	// recipient's entry is not the one this server granted), or
	// "not-revoked" (Error says why; it stays in the journal).
	Outcome string `json:"outcome"`
	Error   string `json:"error,omitempty"`
}

const closeStepLong = `close-step revokes the open hand-offs of one step that the journal holds, as the user who handed each
(the registered service acting as them), reading each recipient's entry back absent: for when the step's user
is away and the server that handed it is gone. An entry the recipient holds that is not the one this server
granted is left alone and named. --step must be a step of the manifest, or one the journal holds open
hand-offs of (exit status 2 otherwise, nothing sent).

--json prints one object (members are only ever added):
  {"step", "entries": [{"id": N, "documentId", "keyDigest", "outcome": "revoked"|"absent"|"not-granted"|
   "left-alone"|"not-revoked", "error"}, ...], "done": bool}`

func newCloseStepCmd() *cobra.Command {
	var configPath, manifestPath, journalPath, step string
	var asJSON bool
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
		if recordRefused(err) {
			return refusedError(err)
		}
		if err != nil {
			return err
		}
		if j == nil {
			return usageError("no journal at %s: it holds the hand-offs to close; name it with --journal", journalPath)
		}
		defer j.Close()
		// Another task's journal holds another task's hand-offs.
		if err := j.CheckTask(ctx, m.Task); err != nil {
			if recordRefused(err) {
				return refusedError(err)
			}
			return err
		}
		// A step neither the manifest nor the journal knows is a mistyped
		// --step: refused before anything is sent.
		if _, ok := m.Steps[step]; !ok {
			open, err := j.OpenHandOffs(ctx, step)
			if err != nil {
				return err
			}
			if len(open) == 0 {
				return unknownStep(step, manifestPath, m)
			}
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
			return operator.GatewayWords(sc.GatewayURL, fmt.Errorf("service sign-in: %w", err), "nothing was revoked")
		}
		defer func() { _ = c.SignOut(ctx) }()
		res, err := handoff.CloseStep(ctx, handoff.CloseStepOptions{Minter: c, Manifest: m, Journal: j, Step: step})
		if errors.Is(err, grant.ErrUnknownStep) {
			return unknownStep(step, manifestPath, m)
		}
		out := cmd.OutOrStdout()
		if asJSON {
			rep := closeStepJSON{Step: step, Entries: []closeStepEntryJSON{}, Done: err == nil}
			for _, r := range res {
				e := closeStepEntryJSON{ID: r.ID, DocumentID: r.DocumentID, KeyDigest: r.KeyDigest, Outcome: r.Outcome}
				if r.Err != nil {
					e.Outcome, e.Error = "not-revoked", r.Err.Error()
				}
				rep.Entries = append(rep.Entries, e)
			}
			if werr := writeJSON(out, rep); werr != nil {
				return werr
			}
		} else {
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
		}
		if err != nil {
			return operator.GatewayWords(sc.GatewayURL,
				fmt.Errorf("step %q: not every entry was revoked; they stay in the journal, run this again: %w", step, err), "")
		}
		if asJSON {
			return nil
		}
		if len(res) == 0 {
			fmt.Fprintf(out, "step %q has no open hand-off in the journal\n", step)
		}
		fmt.Fprintln(out, "CLOSE-STEP: DONE")
		return nil
	})
	cmd.Long = closeStepLong
	cmd.Example = "  pdmcp close-step --config config.json --manifest task-data/manifest.json --step referral-history\n" +
		"  pdmcp close-step --config config.json --manifest task-data/manifest.json --step referral-history \\\n" +
		"      --journal task-data/manifest.json.journal.sqlite --json"
	f := cmd.Flags()
	f.StringVar(&configPath, "config", "", "the service's config.json, from pdmcp bootstrap")
	f.StringVar(&manifestPath, "manifest", "", "the operator's manifest.json")
	f.StringVar(&journalPath, "journal", "", "the server's journal (default <manifest>.journal.sqlite)")
	f.StringVar(&step, "step", "", "the step whose open hand-offs to revoke: a step of the manifest")
	f.BoolVar(&asJSON, "json", false, "print one JSON object (shape in --help) instead of prose")
	_ = cmd.RegisterFlagCompletionFunc("step", completeFromManifest(false, func(m *grant.Manifest) []string {
		return slices.Sorted(maps.Keys(m.Steps))
	}))
	return requireFlags(cmd, "config", "manifest", "step")
}

// unknownStep refuses a --step that neither the manifest nor the journal
// knows, naming the steps the manifest has.
func unknownStep(step, manifestPath string, m *grant.Manifest) error {
	steps := "it has none"
	if len(m.Steps) > 0 {
		steps = "its steps: " + strings.Join(slices.Sorted(maps.Keys(m.Steps)), ", ")
	}
	return usageError("--step %q: not a step of %s (%s), and the journal holds no open hand-off of it; nothing was sent",
		step, manifestPath, steps)
}
