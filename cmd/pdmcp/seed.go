package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/operator"
	"github.com/pdmcp/pdmcp/server/record"
)

// seedJSON is `pdmcp seed --json`: stable, members only ever added.
type seedJSON struct {
	Out        string   `json:"out"`
	Manifest   string   `json:"manifest"`
	SeedRecord string   `json:"seedRecord"`
	AgentUser  string   `json:"agentUser"`
	OwnerUser  string   `json:"ownerUser"`
	Principals []string `json:"principals"`
}

// seedCleanupJSON is `pdmcp seed --cleanup --json`: stable, members only
// ever added.
type seedCleanupJSON struct {
	SeedRecord string        `json:"seedRecord"`
	Removed    cleanupCounts `json:"removed"`
	// SavedVersionsLost are the files of saved versions that were under the
	// removed keys and can no longer be opened.
	SavedVersionsLost []string `json:"savedVersionsLost"`
}

type cleanupCounts struct {
	Keys       int `json:"keys"`
	Principals int `json:"principals"`
}

const seedLong = `seed creates the synthetic document set through the Gateway, as the registered service: an owner and an
agent principal, one key per document, the destination's key, the agent's READ entries, the ciphertexts, the
manifest and seed-record.json, in the empty folder --out names. The seed record lists what was made, so
--cleanup --seed-record FILE removes it (keys read back absent, then principals) and names the saved versions
that were under the removed keys.

--json prints one object (members are only ever added):
  seed:            {"out", "manifest", "seedRecord", "agentUser", "ownerUser", "principals": [...]}
  seed --cleanup:  {"seedRecord", "removed": {"keys": N, "principals": N}, "savedVersionsLost": [paths...]}`

// cleanupFlag is --cleanup: a boolean, that also takes the old form
// --cleanup=FILE (the seed record), kept working with a warning.
type cleanupFlag struct {
	on      bool
	oldPath string
}

func (c *cleanupFlag) String() string { return strconv.FormatBool(c.on) }
func (c *cleanupFlag) Type() string   { return "bool" }
func (c *cleanupFlag) Set(s string) error {
	if b, err := strconv.ParseBool(s); err == nil {
		c.on = b
		return nil
	}
	c.on, c.oldPath = true, s
	return nil
}

func newSeedCmd() *cobra.Command {
	var configPath, outDir, tag, seedRecord string
	var asJSON bool
	var cleanup cleanupFlag
	cmd := command("seed", "Create the synthetic document set and its manifest (or remove it with --cleanup)", func(cmd *cobra.Command) error {
		if cleanup.on {
			if seedRecord == "" && outDir != "" {
				seedRecord = filepath.Join(outDir, "seed-record.json")
			}
			if seedRecord == "" {
				return usageError("--cleanup needs --seed-record FILE: the seed-record.json the seed wrote (or --out, the seed's folder)")
			}
		} else if outDir == "" {
			return usageError("--out is required: the empty folder the seed is written to (or --cleanup --seed-record FILE to remove a seed)")
		}
		sc, err := gateway.LoadServiceConfig(configPath)
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		logger := loggerFrom(cmd.Context())
		if cleanup.on {
			saved, err := savedUnderSeedKeys(cmd, seedRecord)
			if err != nil {
				return err
			}
			res, err := operator.CleanupSeed(cmd.Context(), operator.CleanupOptions{Config: sc, RecordPath: seedRecord, Logger: logger})
			if err != nil {
				return operator.GatewayWords(sc.GatewayURL, err, "")
			}
			if asJSON {
				rep := seedCleanupJSON{SeedRecord: seedRecord, Removed: cleanupCounts{Keys: res.Keys, Principals: res.Principals},
					SavedVersionsLost: []string{}}
				for _, e := range saved {
					rep.SavedVersionsLost = append(rep.SavedVersionsLost, e.Path)
				}
				return writeJSON(out, rep)
			}
			if len(saved) > 0 {
				fmt.Fprintf(out, "%d saved versions were under the removed keys and can no longer be opened:\n", len(saved))
				for _, e := range saved {
					fmt.Fprintf(out, "  %s\n", e.Path)
				}
			}
			fmt.Fprintln(out, "SEED CLEANUP: OK")
			return nil
		}
		rec, err := operator.Seed(cmd.Context(), operator.SeedOptions{Config: sc, OutDir: outDir, Tag: tag, Logger: logger})
		if errors.Is(err, operator.ErrSeedExists) || errors.Is(err, operator.ErrSavedVersions) {
			return refusedError(err)
		}
		if err != nil {
			return operator.GatewayWords(sc.GatewayURL, err, "")
		}
		if asJSON {
			return writeJSON(out, seedJSON{Out: outDir, Manifest: rec.Manifest, SeedRecord: filepath.Join(filepath.Dir(rec.Manifest), "seed-record.json"),
				AgentUser: rec.AgentUser, OwnerUser: rec.OwnerUser, Principals: nonNil(rec.Principals)})
		}
		fmt.Fprintf(out, "manifest: %s\n", rec.Manifest)
		fmt.Fprintf(out, "agent user: %s\n", rec.AgentUser)
		fmt.Fprintln(out, "SEED: OK")
		return nil
	})
	cmd.Long = seedLong
	cmd.Example = "  pdmcp seed --config config.json --out task-data\n" +
		"  pdmcp seed --config config.json --out task-data --json\n" +
		"  pdmcp seed --config config.json --cleanup --seed-record task-data/seed-record.json"
	// The old form --cleanup FILE: FILE arrives as the one argument.
	cmd.Args = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			if cleanup.oldPath != "" {
				oldCleanupForm(cmd, &seedRecord, cleanup.oldPath)
			}
			return nil
		}
		if len(args) == 1 && cleanup.on && cleanup.oldPath == "" && seedRecord == "" {
			oldCleanupForm(cmd, &seedRecord, args[0])
			return nil
		}
		return noArgs(cmd, args)
	}
	f := cmd.Flags()
	f.StringVar(&configPath, "config", "", "config.json from pdmcp bootstrap")
	f.StringVar(&outDir, "out", "", "an empty folder for the manifest, the ciphertexts and seed-record.json (required without --cleanup)")
	aliasFlag(f, "out-dir", "out", nil, "")
	f.StringVar(&tag, "tag", "", "names this seed's principals (random when omitted)")
	f.VarPF(&cleanup, "cleanup", "", "remove the keys and principals --seed-record lists instead").NoOptDefVal = "true"
	f.StringVar(&seedRecord, "seed-record", "", "with --cleanup: the seed's seed-record.json (default: the one in --out)")
	f.BoolVar(&asJSON, "json", false, "print one JSON object (shape in --help) instead of prose")
	return requireFlags(cmd, "config")
}

// oldCleanupForm takes path, given the old way (--cleanup FILE), as
// --seed-record, with a warning.
func oldCleanupForm(cmd *cobra.Command, seedRecord *string, path string) {
	fmt.Fprintf(cmd.ErrOrStderr(), "Flag --cleanup FILE has been deprecated, use --cleanup --seed-record %s instead\n", path)
	if *seedRecord == "" {
		*seedRecord = path
	}
}

// savedUnderSeedKeys reads, before cleanup removes them, which saved
// versions (the manifest's history and the journal's record) are under the
// seed's keys. What cannot be read is reported on stderr and is no reason
// to keep the keys, except a lost record (record.ErrRecordLost): saved
// versions whose journal is missing or empty are refused, as removing
// their keys would leave nothing to repair the record for.
func savedUnderSeedKeys(cmd *cobra.Command, recordPath string) ([]record.Entry, error) {
	rec, err := grant.LoadSeedRecord(recordPath)
	if err != nil || rec.Manifest == "" {
		return nil, nil
	}
	m, vs, err := record.Load(cmd.Context(), rec.Manifest, "")
	if errors.Is(err, record.ErrRecordLost) {
		return nil, refusedError(fmt.Errorf("seed --cleanup removed nothing: %w", err))
	}
	if err != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "pdmcp: the saved versions of %s were not read: %v\n", rec.Manifest, err)
		return nil, nil
	}
	return record.UnderKeys(m, vs, rec.Keys), nil
}
