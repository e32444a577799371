package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/pdmcp/pdmcp/audit"
)

// Exit statuses of `pdmcp audit verify`, within pdmcp's table: 0 the chain
// is whole, 3 it is broken (a check refused it), 2 it could not be checked
// (a file or the key unreadable, as a wrong command line: nothing was
// judged).
const (
	exitBroken    = exitRefused
	exitUnchecked = exitUsage
)

func newAuditCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "audit",
		Short:   "Check the audit file",
		Example: "  pdmcp audit verify audit.jsonl.1 audit.jsonl",
	}
	cmd.AddCommand(newAuditVerifyCmd())
	return cmd
}

func newAuditVerifyCmd() *cobra.Command {
	var keyPath string
	var heads []string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "verify FILE...",
		Short: "Check the audit files' hash chain (and signed heads) and name the first line that breaks",
		Long: "verify reads audit files, given oldest first as they were rotated (audit.jsonl.1, then audit.jsonl),\n" +
			"and checks that each line names the hash of the line before it, so that an edited, inserted, removed\n" +
			"or reordered line, a file left out or out of order, and a cut end are found. With --key it also checks\n" +
			"the heads the server signed (serve --audit-key): only the private key's holder can write those. With\n" +
			"--head, a head an earlier verify printed, kept elsewhere, must still be a line: lines cut off the end\n" +
			"are then found too.\n" +
			"--json prints the report: {\"whole\",\"files\":[{\"path\",\"lines\",\"fragments\",\"head\"}],\"breaks\":[{\"file\",\"line\",\n" +
			"\"kind\",\"detail\"}],\"breakCount\",\"notes\":[…as breaks],\"noteCount\",\"head\",\"signedHeads\"} (members are only ever added).\n" +
			"Exit status: 0 whole, 3 broken (the first break is named), 2 not checked (a file or the key unreadable,\n" +
			"or the command line wrong).",
		Example: "  pdmcp audit verify /var/lib/pdmcp/audit.jsonl.1 /var/lib/pdmcp/audit.jsonl\n" +
			"  pdmcp audit verify --key audit-head.pub --json audit.jsonl\n" +
			"  pdmcp audit verify --head 4995c208971d099978ad097dbb2aeee79ad2fd1bd89326adcfcaef5194891658 audit.jsonl",
		Args: func(_ *cobra.Command, files []string) error {
			if len(files) == 0 {
				return &exitError{code: exitUnchecked, err: errors.New("pdmcp audit verify: name the audit files, oldest first (audit.jsonl.1 audit.jsonl)")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, files []string) error {
			o := audit.VerifyOptions{Heads: heads}
			if keyPath != "" {
				k, err := audit.LoadHeadKey(keyPath)
				if err != nil {
					return &exitError{code: exitUnchecked, err: err}
				}
				o.Key = k
			}
			rep, err := audit.Verify(cmd.Context(), files, o)
			if err != nil {
				return &exitError{code: exitUnchecked, err: err}
			}
			out := cmd.OutOrStdout()
			if asJSON {
				if err := writeJSON(out, rep); err != nil {
					return err
				}
			} else {
				writeVerifyText(out, rep, o.Key != nil)
			}
			if !rep.Whole {
				b := rep.Breaks[0]
				return &exitError{code: exitBroken, err: fmt.Errorf("pdmcp audit verify: the chain breaks at %s", where(b))}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&keyPath, "key", "", "the public key (PEM) whose signed heads to check")
	cmd.Flags().StringArrayVar(&heads, "head", nil, "a head an earlier verify printed, kept elsewhere: it must still be a line of the files (repeatable)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	completeFiles(cmd, "", "key")
	return cmd
}

func where(f audit.Finding) string {
	if f.Line == 0 {
		return f.File
	}
	return fmt.Sprintf("%s:%d", f.File, f.Line)
}

// writeVerifyText prints the report for a person: each file, each break
// and note, and a last line that says WHOLE or BROKEN.
func writeVerifyText(w io.Writer, rep *audit.Report, keyed bool) {
	for _, f := range rep.Files {
		fmt.Fprintf(w, "%s: %d lines, %d fragments\n", f.Path, f.Lines, f.Fragments)
	}
	for _, b := range rep.Breaks {
		fmt.Fprintf(w, "BREAK %s: %s: %s\n", where(b), b.Kind, b.Detail)
	}
	if n := rep.BreakCount - len(rep.Breaks); n > 0 {
		fmt.Fprintf(w, "BREAK and %d more\n", n)
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(w, "NOTE %s: %s: %s\n", where(n), n.Kind, n.Detail)
	}
	if n := rep.NoteCount - len(rep.Notes); n > 0 {
		fmt.Fprintf(w, "NOTE and %d more\n", n)
	}
	if rep.Head != "" {
		fmt.Fprintf(w, "head: %s\n", rep.Head)
	}
	lines := 0
	for _, f := range rep.Files {
		lines += f.Lines
	}
	signed := ""
	if keyed {
		signed = fmt.Sprintf(", signed heads: %d", rep.SignedHeads)
	}
	if rep.Whole {
		fmt.Fprintf(w, "AUDIT-VERIFY: WHOLE (lines: %d, files: %d%s)\n", lines, len(rep.Files), signed)
		return
	}
	fmt.Fprintf(w, "AUDIT-VERIFY: BROKEN at %s (breaks: %d)\n", where(rep.Breaks[0]), rep.BreakCount)
}
