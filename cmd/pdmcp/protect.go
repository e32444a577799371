package main

import (
	"errors"
	"github.com/spf13/cobra"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/internal/operator"
	"github.com/pdmcp/pdmcp/server/compound"
)

// protectJSON is `pdmcp protect --json`: stable, members only ever added.
type protectJSON struct {
	DocumentID string                `json:"documentId"`
	Form       string                `json:"form"` // "ccda" or "hl7v2"
	Fragments  []protectFragmentJSON `json:"fragments"`
	// CreatedKeys is how many keys this run created.
	CreatedKeys int `json:"createdKeys"`
	// AlreadyDone: the document was already protected from this source;
	// nothing was sent.
	AlreadyDone bool `json:"alreadyDone"`
}

// protectFragmentJSON is one row of protect's summary table.
type protectFragmentJSON struct {
	FragmentID string `json:"fragmentId"`
	Label      string `json:"label"`
	DataType   string `json:"dataType"`
	Bytes      int    `json:"bytes"`
	// Key is "created", "reused" or "named" (--key).
	Key string `json:"key"`
}

// abandonJSON is `pdmcp protect --abandon ID --json`: stable, members only
// ever added.
type abandonJSON struct {
	DocumentID   string `json:"documentId"`
	KeysRemoved  int    `json:"keysRemoved"`
	KeysKept     int    `json:"keysKept"`
	FilesRemoved int    `json:"filesRemoved"`
	LostAccepted int    `json:"lostAccepted"`
}

func newProtectCmd() *cobra.Command {
	var (
		o              operator.ProtectOptions
		configPath     string
		keys, sections []string
		segments       []string
		abandon        string
		asJSON         bool
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
			"--abandon ID removes what an unfinished protect of ID made (its keys, files and journal entry).\n\n" +
			"--json prints one object (members are only ever added):\n" +
			"  protect:            {\"documentId\", \"form\": \"ccda\"|\"hl7v2\", \"fragments\": [{\"fragmentId\", \"label\", \"dataType\",\n" +
			"                       \"bytes\": N, \"key\": \"created\"|\"reused\"|\"named\"}, ...], \"createdKeys\": N, \"alreadyDone\": bool}\n" +
			"  protect --abandon:  {\"documentId\", \"keysRemoved\": N, \"keysKept\": N, \"filesRemoved\": N, \"lostAccepted\": N}",
		Example: "  pdmcp protect --config config.json --manifest task-data/manifest.json --source ccd.xml --document-id ccd-0001 \\\n" +
			"      --seed-record task-data/seed-record.json\n" +
			"  pdmcp protect --config config.json --manifest task-data/manifest.json --source adt.hl7 --document-id adt-0001 \\\n" +
			"      --hl7-segment ZPI=demographics --json\n" +
			"  pdmcp protect --config config.json --manifest task-data/manifest.json --abandon ccd-0001",
		Args: noArgs,
		// The command line's mistakes, refused before config.json is read
		// or anything sent (exit status 2).
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			if abandon != "" {
				if o.SourcePath != "" || o.DocumentID != "" {
					return usageError("--abandon names the document itself; it takes no --source or --document-id")
				}
				return nil
			}
			if o.SourcePath == "" || o.DocumentID == "" {
				return usageError("--source and --document-id are required (or --abandon ID)")
			}
			var err error
			if o.Keys, err = operator.ParseKeyFlags(keys); err != nil {
				return &exitError{code: exitUsage, err: err}
			}
			o.Table = compound.DefaultTable()
			for _, s := range sections {
				if err := o.Table.AddSection(s); err != nil {
					return usageError("--ccda-section %s: %w", s, err)
				}
			}
			for _, s := range segments {
				if err := o.Table.AddSegment(s); err != nil {
					return usageError("--hl7-segment %s: %w", s, err)
				}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			sc, err := gateway.LoadServiceConfig(configPath)
			if err != nil {
				return err
			}
			o.Config = sc
			o.Logger = loggerFrom(cmd.Context())
			if abandon != "" {
				sum, err := operator.AbandonProtect(cmd.Context(), operator.AbandonOptions{Config: sc, ManifestPath: o.ManifestPath,
					DocumentID: abandon, RecordPath: o.RecordPath, AbandonLost: o.AbandonLost, Progress: cmd.ErrOrStderr(), Logger: o.Logger})
				if err != nil {
					return protectExit(sc.GatewayURL, err)
				}
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), abandonJSON{DocumentID: sum.DocumentID, KeysRemoved: sum.KeysRemoved,
						KeysKept: sum.KeysKept, FilesRemoved: sum.FilesRemoved, LostAccepted: sum.LostAccepted})
				}
				sum.WriteText(cmd.OutOrStdout())
				return nil
			}
			o.Progress = cmd.ErrOrStderr()
			o.CrashPoint = killAtHook()
			sum, err := operator.Protect(cmd.Context(), o)
			if err != nil {
				return protectExit(sc.GatewayURL, err)
			}
			if asJSON {
				rep := protectJSON{DocumentID: sum.DocumentID, Form: string(sum.Form), Fragments: []protectFragmentJSON{},
					CreatedKeys: sum.CreatedKeys, AlreadyDone: sum.AlreadyDone}
				for _, r := range sum.Rows {
					rep.Fragments = append(rep.Fragments, protectFragmentJSON{FragmentID: r.FragmentID, Label: r.Label,
						DataType: r.DataType, Bytes: r.Bytes, Key: r.Key})
				}
				return writeJSON(cmd.OutOrStdout(), rep)
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
	f.StringVar(&o.Owner, "owner", "", "the keys' owner, as the Gateway names the principal (default: the --seed-record seed's owner)")
	f.StringVar(&o.RecordPath, "seed-record", "", "a seed-record.json: add the keys created here, so pdmcp seed --cleanup removes them")
	aliasFlag(f, "record", "seed-record", nil, "")
	f.StringArrayVar(&keys, "key", nil, "dataType=t-Tag: use this existing key for the data type instead of creating one (repeatable)")
	f.StringArrayVar(&sections, "ccda-section", nil, "LOINC=dataType: protect C-CDA sections of this code too (repeatable)")
	f.StringArrayVar(&segments, "hl7-segment", nil, "ID=dataType or ID=clear: protect, or keep in the clear, this HL7 segment too (repeatable)")
	f.BoolVar(&o.AbandonLost, "abandon-lost", false, "after a key-creating encrypt's answer was lost, create the key anew (the lost one may stay at the key server)")
	f.StringVar(&abandon, "abandon", "", "remove what the unfinished protect of this document id made: its keys, files and journal entry")
	f.BoolVar(&asJSON, "json", false, "print one JSON object (shape in --help) instead of the table")
	return requireFlags(cmd, "config", "manifest")
}

// protectExit gives protect's errors their exit status: what protect
// refuses by its own checks (an id the manifest holds from another source,
// a source or section over a limit, no unfinished run to abandon) is 3; a
// Gateway that did not answer is said so (4).
func protectExit(gatewayURL string, err error) error {
	if errors.Is(err, operator.ErrAlreadyProtected) || errors.Is(err, operator.ErrTooLarge) || errors.Is(err, operator.ErrNoUnfinishedRun) {
		return refusedError(err)
	}
	return operator.GatewayWords(gatewayURL, err, "")
}
