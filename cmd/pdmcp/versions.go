package main

import (
	"encoding/json"
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
			return err
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
	cmd := command("export-manifest", "Write the manifest with the record's versions merged in, in manifest.json's format, to a file you name", func(cmd *cobra.Command) error {
		if _, err := record.Export(cmd.Context(), manifestPath, journalPath, outPath); err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "merged manifest: %s\nEXPORT-MANIFEST: OK\n", outPath)
		return nil
	})
	f := cmd.Flags()
	f.StringVar(&manifestPath, "manifest", "", "the operator's manifest.json")
	f.StringVar(&journalPath, "journal", "", "the server's journal, which holds the record (default <manifest>.journal.sqlite)")
	f.StringVar(&outPath, "out", "", "the file to write (never the manifest itself)")
	return requireFlags(cmd, "manifest", "out")
}
