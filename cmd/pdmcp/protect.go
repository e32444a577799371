package main

import (
	"errors"

	"github.com/spf13/cobra"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/internal/operator"
	"github.com/pdmcp/pdmcp/server/compound"
)

func newProtectCmd() *cobra.Command {
	var (
		o              operator.ProtectOptions
		configPath     string
		keys, sections []string
		segments       []string
		abandon        string
	)
	cmd := &cobra.Command{
		Use:   "protect",
		Short: "Split a C-CDA or HL7 v2 source into sections, each under its data type's key, and add it to the manifest",
		Long: "protect splits the source into a plaintext skeleton and sections (see docs/compound.md), proves they\n" +
			"reassemble to the source, encrypts each section as the keys' owner under one key per data type, writes\n" +
			"documents/<id>/, and adds the document to the manifest. It grants nothing. Each encrypt is recorded in\n" +
			"protect-journal.json beside the manifest before it is sent; a rerun continues where a run stopped and never\n" +
			"repeats an encrypt whose answer was lost. A source over 16 MiB or a section over 64 KiB (the read limit) is\n" +
			"refused before anything is sent. Ctrl-C waits for the encrypt in flight, records it and says \"interrupted\".\n" +
			"--abandon ID removes what an unfinished protect of ID made (its keys, files and journal entry).",
		Example: "  pdmcp protect --config config.json --manifest task-data/manifest.json --source ccd.xml --document-id ccd-0001\n" +
			"  pdmcp protect --config config.json --manifest task-data/manifest.json --abandon ccd-0001",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sc, err := gateway.LoadServiceConfig(configPath)
			if err != nil {
				return err
			}
			o.Config = sc
			if abandon != "" {
				if o.SourcePath != "" || o.DocumentID != "" {
					return errors.New("--abandon names the document itself; it takes no --source or --document-id")
				}
				sum, err := operator.AbandonProtect(cmd.Context(), operator.AbandonOptions{Config: sc, ManifestPath: o.ManifestPath,
					DocumentID: abandon, RecordPath: o.RecordPath, AbandonLost: o.AbandonLost, Progress: cmd.ErrOrStderr()})
				if err != nil {
					return err
				}
				sum.WriteText(cmd.OutOrStdout())
				return nil
			}
			if o.SourcePath == "" || o.DocumentID == "" {
				return errors.New("--source and --document-id are required (or --abandon ID)")
			}
			if o.Keys, err = operator.ParseKeyFlags(keys); err != nil {
				return err
			}
			o.Table = compound.DefaultTable()
			for _, s := range sections {
				if err := o.Table.AddSection(s); err != nil {
					return err
				}
			}
			for _, s := range segments {
				if err := o.Table.AddSegment(s); err != nil {
					return err
				}
			}
			o.Progress = cmd.ErrOrStderr()
			o.CrashPoint = killAtHook()
			sum, err := operator.Protect(cmd.Context(), o)
			if err != nil {
				return err
			}
			sum.WriteTable(cmd.OutOrStdout())
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&configPath, "config", "", "config.json from pdmcp bootstrap")
	f.StringVar(&o.ManifestPath, "manifest", "", "the manifest to add the document to")
	f.StringVar(&o.SourcePath, "source", "", "the C-CDA or HL7 v2 source")
	f.StringVar(&o.DocumentID, "document-id", "", "the new document's id")
	f.StringVar(&o.Label, "label", "", "the document's label (default: the source's file name)")
	f.StringVar(&o.Category, "category", "", "the document's category")
	f.StringVar(&o.Owner, "owner", "", "the keys' owner, as the Gateway names the principal (default: the --record seed's owner)")
	f.StringVar(&o.RecordPath, "record", "", "a seed-record.json: add the keys created here, so pdmcp seed --cleanup removes them")
	f.StringArrayVar(&keys, "key", nil, "dataType=t-Tag: use this existing key for the data type instead of creating one (repeatable)")
	f.StringArrayVar(&sections, "ccda-section", nil, "LOINC=dataType: protect C-CDA sections of this code too (repeatable)")
	f.StringArrayVar(&segments, "hl7-segment", nil, "ID=dataType or ID=clear: protect, or keep in the clear, this HL7 segment too (repeatable)")
	f.BoolVar(&o.AbandonLost, "abandon-lost", false, "after a key-creating encrypt's answer was lost, create the key anew (the lost one may stay at the key server)")
	f.StringVar(&abandon, "abandon", "", "remove what the unfinished protect of this document id made: its keys, files and journal entry")
	return requireFlags(cmd, "config", "manifest")
}
