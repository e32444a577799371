package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/pdmcp/pdmcp/server/journal"
	"github.com/pdmcp/pdmcp/server/record"
)

// versionsJSON is `pdmcp versions --json`: stable, members only ever added.
type versionsJSON struct {
	Versions []record.Entry `json:"versions"`
}

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
			return writeJSON(out, versionsJSON{entries})
		}
		if len(entries) == 0 {
			fmt.Fprintln(out, "no saved versions")
			return nil
		}
		return record.WriteText(out, entries)
	})
	cmd.Long = "versions lists every saved version of each destination and section: the manifest's history and the\n" +
		"journal's record of what the server saved since, oldest first.\n\n" +
		"--json prints one object (members are only ever added):\n" +
		"  {\"versions\": [{\"kind\": \"result\"|\"section\", \"destinationId\", \"documentId\", \"fragmentId\",\n" +
		"    \"version\", \"documentVersion\", \"path\", \"iv\", \"ttag\", \"sha256\", \"size\", \"savedAt\", \"actingAs\",\n" +
		"    \"caller\", \"source\": \"manifest\"|\"record\", \"current\"}, ...]}"
	cmd.Example = "  pdmcp versions --manifest task-data/manifest.json\n" +
		"  pdmcp versions --manifest task-data/manifest.json --journal task-data/manifest.json.journal.sqlite --json"
	f := cmd.Flags()
	f.StringVar(&manifestPath, "manifest", "", "the operator's manifest.json")
	f.StringVar(&journalPath, "journal", "", "the server's journal, which holds the record (default <manifest>.journal.sqlite)")
	f.BoolVar(&asJSON, "json", false, "print one JSON object (shape in --help) instead of a table")
	return requireFlags(cmd, "manifest")
}

// exportJSON is `pdmcp export-manifest --json`: stable, members only ever
// added.
type exportJSON struct {
	// Out is the file named by --out (never "-" with --json).
	Out string `json:"out"`
	// Written: the export was written. False when orphans refused it
	// (exit status 3; --allow-orphans writes it without them).
	Written bool `json:"written"`
	// Orphans are the versions left out of the export.
	Orphans []orphanJSON `json:"orphans"`
}

// orphanJSON is a version of a destination or document the manifest no
// longer names.
type orphanJSON struct {
	Kind        string `json:"kind"` // "result" or "section"
	Destination string `json:"destinationId,omitempty"`
	DocumentID  string `json:"documentId,omitempty"`
	FragmentID  string `json:"fragmentId,omitempty"`
	Version     int    `json:"version"`
	Path        string `json:"path"`
}

func newExportManifestCmd() *cobra.Command {
	var manifestPath, journalPath, outPath string
	var allowOrphans, asJSON bool
	cmd := command("export-manifest", "Write the manifest with the record's versions merged in, in manifest.json's format, to a file you name (- for standard output)", func(cmd *cobra.Command) error {
		if asJSON && isStdout(outPath) {
			return usageError("--json and --out - both write to standard output: give --out a file, or leave out --json")
		}
		_, orphans, err := record.Export(cmd.Context(), manifestPath, journalPath, outPath, allowOrphans, func(b []byte) error {
			return writeOutput(cmd, outPath, b, 0o600)
		})
		// The manifest itself is on standard output with --out -: the
		// report goes to standard error.
		out := cmd.OutOrStdout()
		if isStdout(outPath) {
			out = cmd.ErrOrStderr()
		}
		if asJSON {
			if err != nil && !errors.Is(err, record.ErrOrphans) {
				return journalUsage(err)
			}
			rep := exportJSON{Out: outPath, Written: err == nil, Orphans: []orphanJSON{}}
			for _, v := range orphans {
				o := orphanJSON{Kind: record.KindResult, Destination: v.Destination, DocumentID: v.DocumentID, FragmentID: v.FragmentID,
					Version: v.Version, Path: v.Path}
				if v.Destination == "" {
					o.Kind = record.KindSection
				}
				rep.Orphans = append(rep.Orphans, o)
			}
			if werr := writeJSON(out, rep); werr != nil {
				return werr
			}
			return journalUsage(err)
		}
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
		if isStdout(outPath) {
			return nil
		}
		fmt.Fprintf(out, "merged manifest: %s\n", outPath)
		if len(orphans) > 0 {
			fmt.Fprintf(out, "EXPORT-MANIFEST: OK (%d orphaned versions left out)\n", len(orphans))
			return nil
		}
		fmt.Fprintln(out, "EXPORT-MANIFEST: OK")
		return nil
	})
	cmd.Long = "export-manifest writes the manifest with the record's versions merged in, in manifest.json's own format,\n" +
		"for tools that read one. It never writes over the manifest or the journal, leaves nothing else beside the\n" +
		"file it writes, and with --out - writes the manifest to standard output (its report then goes to\n" +
		"standard error). Versions of a destination or document the manifest no longer names (orphans) are\n" +
		"listed and the export refused (exit status 3) unless --allow-orphans.\n\n" +
		"--json prints one object (members are only ever added):\n" +
		"  {\"out\": \"merged.json\", \"written\": bool, \"orphans\": [{\"kind\": \"result\"|\"section\", \"destinationId\",\n" +
		"    \"documentId\", \"fragmentId\", \"version\", \"path\"}, ...]}\n" +
		"(printed also when orphans refuse the export: written false, exit status 3)"
	cmd.Example = "  pdmcp export-manifest --manifest task-data/manifest.json --out merged.json\n" +
		"  pdmcp export-manifest --manifest task-data/manifest.json --out - | jq .destinations\n" +
		"  pdmcp export-manifest --manifest task-data/manifest.json --out merged.json --allow-orphans --json"
	f := cmd.Flags()
	f.StringVar(&manifestPath, "manifest", "", "the operator's manifest.json")
	f.StringVar(&journalPath, "journal", "", "the server's journal, which holds the record (default <manifest>.journal.sqlite)")
	f.StringVar(&outPath, "out", "", "the file to write (never the manifest itself), or - for standard output")
	f.BoolVar(&allowOrphans, "allow-orphans", false, "write the export even though the record holds versions of destinations or documents the manifest no longer names (they are listed, and left out)")
	f.BoolVar(&asJSON, "json", false, "print one JSON object (shape in --help) instead of prose")
	return requireFlags(cmd, "manifest", "out")
}

// journalUsage gives the record's errors their exit status: a --journal
// that names no file is a usage error (2), as `pdmcp check` does; an
// export refused, or a journal that is lost or another task's, is a
// refusal (3).
func journalUsage(err error) error {
	if errors.Is(err, record.ErrNoJournal) {
		return &exitError{code: exitUsage, err: err}
	}
	if errors.Is(err, record.ErrOrphans) || errors.Is(err, record.ErrExportOverManifest) || recordRefused(err) {
		return refusedError(err)
	}
	return err
}

// recordRefused reports whether err is the record refusing its journal:
// lost (saved versions with no journal to account for them) or another
// task's.
func recordRefused(err error) bool {
	return errors.Is(err, record.ErrRecordLost) || errors.Is(err, journal.ErrOtherTask)
}
