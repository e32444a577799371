package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/spf13/cobra"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/check"
)

func newCheckCmd() *cobra.Command {
	var o check.Options
	var configPath, owner, recordPath string
	var asJSON bool
	cmd := command("check", "Check that the task folder, its record (the journal) and the manifest agree; --repair does what is safe", func(cmd *cobra.Command) error {
		if configPath == "" && (owner != "" || recordPath != "") {
			given := "--owner"
			if recordPath != "" {
				given = "--seed-record"
			}
			return usageError("pdmcp check: %s names the keys' owner for the key check, which --config turns on; give --config config.json too", given)
		}
		var gatewayURL string
		if configPath != "" {
			keys, url, err := gatewayKeys(configPath, o.ManifestPath, owner, recordPath)
			if err != nil {
				return err
			}
			o.Keys, gatewayURL = keys, url
		}
		rep, err := check.Run(cmd.Context(), o)
		if errors.Is(err, check.ErrNoJournal) {
			return &exitError{code: exitUsage, err: err}
		}
		if errors.Is(err, &api.Error{Code: api.CodeUnreachable}) {
			return &exitError{code: exitUnreachable, err: fmt.Errorf("pdmcp check: the Gateway at %s did not answer: %s "+
				"(asking about the keys needs it; without --config check reads the folder alone)", gatewayURL, dialReason(err))}
		}
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		if asJSON {
			if err := writeJSON(out, rep); err != nil {
				return err
			}
		} else {
			writeCheck(out, rep)
		}
		if !rep.OK {
			return &exitError{code: exitRefused, err: fmt.Errorf("check: %d findings", len(rep.Findings)), silent: true}
		}
		return nil
	})
	cmd.Long = `check reads the task folder beside --manifest, the record in its journal and the manifest, and
reports where they disagree: versions missing, changed or unrecorded, leftovers of stopped writes,
overdue hand-offs. --repair does what is safe (rebuilds the record from the sidecars, removes
leftovers) and reports what it did. With --config (the service's config.json) it also asks the
Gateway, as the keys' owner, whether each recorded key still exists.

--json prints the report (members are only ever added):
  {"manifest","journal","ok","findings":[{"kind","path","detail","repairable"}],
   "repaired":[{"kind","path","detail"}],"notes":[{"kind","path","detail"}]}

Exit status: 0 they agree, 3 findings (printed), 2 the command line is wrong or the journal is
not there, 4 the Gateway did not answer, 1 check failed while working.`
	cmd.Example = `  pdmcp check --manifest task/manifest.json
  pdmcp check --manifest task/manifest.json --repair
  pdmcp check --manifest task/manifest.json --json
  pdmcp check --manifest task/manifest.json --config config.json --seed-record task/seed-record.json`
	f := cmd.Flags()
	f.StringVar(&o.ManifestPath, "manifest", "", "the operator's manifest.json")
	f.StringVar(&o.JournalPath, "journal", "", "the server's journal, which holds the record (default <manifest>.journal.sqlite)")
	f.BoolVar(&o.Repair, "repair", false, "do what is safe: rebuild a missing, damaged or stale record from the sidecars, remove leftovers of stopped writes")
	f.StringVar(&configPath, "config", "", "the service's config.json from pdmcp bootstrap: also ask the Gateway whether each recorded key still exists")
	f.StringVar(&owner, "owner", "", "with --config: the keys' owner, as the Gateway names the principal (default: the seed record's owner)")
	f.StringVar(&recordPath, "seed-record", "", "with --config: a seed-record.json whose owner owns the keys (default: the one beside the manifest)")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	completeFiles(cmd, "json", "manifest", "config", "seed-record")
	completeFiles(cmd, "", "journal")
	aliasFlag(f, "key-server", "config", nil, "")
	aliasFlag(f, "record", "seed-record", nil, "")
	return requireFlags(cmd, "manifest")
}

// gatewayKeys is the key checker for --config: the service's client,
// acting as the keys' owner (--owner, or the seed record's), and the
// Gateway's URL.
func gatewayKeys(configPath, manifestPath, owner, recordPath string) (check.KeyChecker, string, error) {
	cfg, err := gateway.LoadServiceConfig(configPath)
	if err != nil {
		return nil, "", err
	}
	if owner == "" {
		if recordPath == "" {
			recordPath = filepath.Join(filepath.Dir(manifestPath), "seed-record.json")
			if _, err := os.Lstat(recordPath); err != nil {
				return nil, "", usageError("pdmcp check: name the keys' owner with --owner, or --seed-record a seed record whose owner it is (there is no %s)", recordPath)
			}
		}
		rec, err := grant.LoadSeedRecord(recordPath)
		if err != nil {
			return nil, "", err
		}
		if rec.OwnerUser == "" {
			return nil, "", usageError("pdmcp check: the seed record %s names no owner; name it with --owner", recordPath)
		}
		owner = rec.OwnerUser
	}
	c, err := gateway.New(cfg.ClientConfig())
	if err != nil {
		return nil, "", err
	}
	return check.GatewayKeys{Client: c, Owner: owner}, cfg.GatewayURL, nil
}

// groups orders the human output: each finding's kind under one heading.
var groups = []struct {
	title string
	kinds []string
}{
	{"record", []string{check.KindJournalMissing, check.KindJournalEmpty, check.KindJournalDamaged, check.KindOtherTask}},
	{"versions", []string{check.KindVersionMissing, check.KindVersionChanged, check.KindUnrecorded, check.KindRecordDiffers, check.KindUnknownFile}},
	{"leftovers", []string{check.KindTemporary, check.KindSidecarLeftover, check.KindSidecarMismatch, check.KindSidecarUnreadable}},
	{"hand-offs", []string{check.KindHandOffOverdue}},
	{"keys", []string{check.KindKeyGone}},
}

func writeCheck(w io.Writer, rep *check.Report) {
	fmt.Fprintf(w, "manifest: %s\njournal:  %s\n", rep.Manifest, rep.Journal)
	for _, a := range rep.Repaired {
		fmt.Fprintf(w, "repaired: %s %s: %s\n", a.Kind, a.Path, a.Detail)
	}
	shown := map[int]bool{}
	for _, g := range groups {
		title := false
		for i, f := range rep.Findings {
			if !slices.Contains(g.kinds, f.Kind) {
				continue
			}
			if !title {
				fmt.Fprintf(w, "%s:\n", g.title)
				title = true
			}
			writeFinding(w, f)
			shown[i] = true
		}
	}
	for i, f := range rep.Findings { // a kind no group names yet
		if !shown[i] {
			writeFinding(w, f)
		}
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(w, "note: %s %s: %s\n", n.Kind, n.Path, n.Detail)
	}
	if rep.OK {
		fmt.Fprintln(w, "CHECK: OK (folder, record and manifest agree)")
		return
	}
	repairable := 0
	for _, f := range rep.Findings {
		if f.Repairable {
			repairable++
		}
	}
	fmt.Fprintf(w, "CHECK: %d findings (%d repairable with --repair)\n", len(rep.Findings), repairable)
}

func writeFinding(w io.Writer, f check.Finding) {
	mark := ""
	if f.Repairable {
		mark = " [repairable]"
	}
	fmt.Fprintf(w, "  %s %s%s: %s\n", f.Kind, f.Path, mark, f.Detail)
}
