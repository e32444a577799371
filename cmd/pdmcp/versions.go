package main

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/pdmcp/pdmcp/server/record"
)

func newVersionsCmd() *cobra.Command {
	var manifestPath, journalPath string
	var asJSON bool
	cmd := command("versions", "List every destination's and section's saved versions: the manifest's history and the journal's record", func(cmd *cobra.Command) error {
		m, vs, err := record.Load(cmd.Context(), manifestPath, journalPath)
		if err != nil {
			return journalUsage(err)
		}
		entries := record.List(m, vs)
		out := cmd.OutOrStdout()
		if asJSON {
			if entries == nil {
				entries = []record.Entry{}
			}
			enc := json.NewEncoder(out)
			enc.SetIndent("", "  ")
			return enc.Encode(struct {
				Versions []record.Entry `json:"versions"`
			}{entries})
		}
		if len(entries) == 0 {
			fmt.Fprintln(out, "no saved versions")
			return nil
		}
		return record.WriteText(out, entries)
	})
	f := cmd.Flags()
	f.StringVar(&manifestPath, "manifest", "", "the operator's manifest.json")
	f.StringVar(&journalPath, "journal", "", "the server's journal, which holds the record (default <manifest>.journal.sqlite)")
	f.BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	return requireFlags(cmd, "manifest")
}

func newExportManifestCmd() *cobra.Command {
	var manifestPath, journalPath, outPath string
	var allowOrphans bool
	cmd := command("export-manifest", "Write the manifest with the record's versions merged in, in manifest.json's format, to a file you name", func(cmd *cobra.Command) error {
		_, orphans, err := record.Export(cmd.Context(), manifestPath, journalPath, outPath, allowOrphans)
		out := cmd.OutOrStdout()
		if len(orphans) > 0 {
			fmt.Fprintln(out, "orphaned versions (their destination or document is no longer in the manifest; not in the export):")
			for _, v := range orphans {
				id := "result " + v.Destination
				if v.Destination == "" {
					id = "section " + v.DocumentID + "/" + v.FragmentID
				}
				fmt.Fprintf(out, "  %s v%d %s\n", id, v.Version, v.Path)
			}
		}
		if err != nil {
			return journalUsage(err)
		}
		fmt.Fprintf(out, "merged manifest: %s\n", outPath)
		if len(orphans) > 0 {
			fmt.Fprintf(out, "EXPORT-MANIFEST: OK (%d orphaned versions left out)\n", len(orphans))
			return nil
		}
		fmt.Fprintln(out, "EXPORT-MANIFEST: OK")
		return nil
	})
	f := cmd.Flags()
	f.StringVar(&manifestPath, "manifest", "", "the operator's manifest.json")
	f.StringVar(&journalPath, "journal", "", "the server's journal, which holds the record (default <manifest>.journal.sqlite)")
	f.StringVar(&outPath, "out", "", "the file to write (never the manifest itself)")
	f.BoolVar(&allowOrphans, "allow-orphans", false, "write the export even though the record holds versions of destinations or documents the manifest no longer names (they are listed, and left out)")
	return requireFlags(cmd, "manifest", "out")
}

// journalUsage makes a --journal that names no file a usage error (exit
// code 2), as `pdmcp check` does.
func journalUsage(err error) error {
	if errors.Is(err, record.ErrNoJournal) {
		return &exitError{code: 2, err: err}
	}
	return err
}
