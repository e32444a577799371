package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pdmcp/pdmcp/grant"
)

// Grant lives: a task's 15 minutes by default, and a caller-identity (HTTP
// service) grant's 30 days, renewed by writing a new grant over the served
// one (the server follows the file; see docs/operating.md).
const (
	taskTTL           = 15 * time.Minute
	callerIdentityTTL = 30 * 24 * time.Hour
)

// grantJSON is `pdmcp grant --json`: stable, members only ever added.
type grantJSON struct {
	ID             string    `json:"id"`
	Out            string    `json:"out"`
	Manifest       string    `json:"manifest"`
	Tools          []string  `json:"tools"`
	Documents      []string  `json:"documents"`
	Destinations   []string  `json:"destinations"`
	Steps          []string  `json:"steps"`
	FileRoot       string    `json:"fileRoot"`
	LocalUser      string    `json:"localUser"`
	CallerIdentity bool      `json:"callerIdentity"`
	IssuedAt       time.Time `json:"issuedAt"`
	NotAfter       time.Time `json:"notAfter"`
}

const grantLong = `grant writes a task grant: the documents, destinations, tools, steps and file root one task may reach, for
how long, and as whom: --local-user (a stdio task acts as that one user) or --caller-identity (HTTP: each
signed-in caller acts as themselves). --all-approved without either acts as the seed's agent user (from
--seed-record, by default seed-record.json beside the manifest). The grant is checked against the manifest
and written in full or not at all, mode 600; --out - prints it to standard output instead.

--tools names the tools allowed, comma-separated, from:
%s
Default: the three document tools (%s),
or with --file-root the two file tools (%s).

--ttl is a Go duration: 15m by default, 720h (30 days) with --caller-identity.

--json prints one object (members are only ever added):
  {"id", "out", "manifest", "tools": [...], "documents": [...], "destinations": [...], "steps": [...],
   "fileRoot", "localUser", "callerIdentity": bool, "issuedAt", "notAfter"}`

func newGrantCmd() *cobra.Command {
	var o grant.LaunchOptions
	var seedRecord string
	var asJSON bool
	cmd := command("grant", "Write a task grant (the trusted launcher)", func(cmd *cobra.Command) error {
		if asJSON && isStdout(o.Out) {
			return usageError("--json and --out - both write to standard output: give --out a file, or leave out --json")
		}
		if o.CallerIdentity && !cmd.Flags().Changed("ttl") {
			// A service's grant: the 15 minutes of a task would stop the
			// service a quarter of an hour after its start.
			o.TTL = callerIdentityTTL
		}
		if o.FileRoot != "" && len(o.Tools) == 0 && (o.AllApproved || len(o.Documents) > 0 || len(o.Destinations) > 0) {
			fmt.Fprintf(cmd.ErrOrStderr(), "pdmcp grant: warning: with --file-root and no --tools the grant allows only %v; "+
				"the documents and destinations it names are reachable by no tool (add --tools %s,%s)\n",
				grant.FileTools(), strings.Join(grant.FileTools(), ","), strings.Join(grant.DocumentTools(), ","))
		}
		if o.AllApproved && o.LocalUser == "" && !o.CallerIdentity {
			path := seedRecord
			if path == "" {
				path = filepath.Join(filepath.Dir(o.ManifestPath), "seed-record.json")
			}
			rec, err := grant.LoadSeedRecord(path)
			if err != nil {
				return fmt.Errorf("--all-approved without --local-user acts as the seed's agent user, named in the seed record (--seed-record): %w", err)
			}
			o.AgentUser = rec.AgentUser
		}
		var g *grant.Grant
		var err error
		if isStdout(o.Out) {
			g, err = grant.Make(o)
		} else {
			g, err = grant.Launch(o)
		}
		if err != nil {
			return grantExit(err)
		}
		if isStdout(o.Out) {
			b, err := json.MarshalIndent(g, "", "  ")
			if err != nil {
				return err
			}
			return writeOutput(cmd, o.Out, append(b, '\n'), 0o600)
		}
		if asJSON {
			return writeJSON(cmd.OutOrStdout(), grantJSON{ID: g.ID, Out: o.Out, Manifest: g.Manifest, Tools: g.AllowedTools,
				Documents: g.Documents, Destinations: g.Destinations, Steps: nonNil(g.Steps), FileRoot: g.FileRoot,
				LocalUser: g.LocalUser, CallerIdentity: g.CallerIdentity, IssuedAt: g.IssuedAt, NotAfter: g.NotAfter})
		}
		fmt.Fprintf(cmd.OutOrStdout(), "grant %s written to %s: tools %v, %d documents, %d destinations, until %s\n",
			g.ID, o.Out, g.AllowedTools, len(g.Documents), len(g.Destinations), g.NotAfter.UTC().Format(time.RFC3339))
		return nil
	})
	cmd.Long = fmt.Sprintf(grantLong, wrapList(grant.AllTools(), "  ", 110), strings.Join(grant.DocumentTools(), ", "),
		strings.Join(grant.FileTools(), ", "))
	cmd.Example = "  pdmcp grant --manifest task-data/manifest.json --all-approved --out task-data/grant.json\n" +
		"  pdmcp grant --manifest task-data/manifest.json --local-user svc.agent --documents proposal-aurora \\\n" +
		"      --tools list_approved_documents,read_protected_document --ttl 1h --out task-data/grant.json\n" +
		"  pdmcp grant --manifest task-data/manifest.json --all-approved --caller-identity --out task-data/grant.json --json\n" +
		"  pdmcp grant --manifest task-data/manifest.json --all-approved --out - | jq .notAfter"
	f := cmd.Flags()
	f.StringVar(&o.ManifestPath, "manifest", "", "the manifest the grant is for")
	f.BoolVar(&o.AllApproved, "all-approved", false, "every approved document and every destination")
	f.StringVar(&o.LocalUser, "local-user", "", "the principal a stdio task acts as")
	f.BoolVar(&o.CallerIdentity, "caller-identity", false, "HTTP: act as each signed-in caller")
	f.StringSliceVar(&o.Documents, "documents", nil, "document ids (comma-separated)")
	f.StringSliceVar(&o.Destinations, "destinations", nil, "destination ids (comma-separated)")
	f.StringSliceVar(&o.Tools, "tools", nil, "tools to allow, comma-separated (default: "+strings.Join(grant.DocumentTools(), ",")+
		"; with --file-root "+strings.Join(grant.FileTools(), ",")+")")
	f.StringSliceVar(&o.Steps, "steps", nil, "hand-off steps (comma-separated)")
	f.StringVar(&o.FileRoot, "file-root", "", "the one folder the file tools may use")
	f.DurationVar(&o.TTL, "ttl", taskTTL, "how long the grant lasts, as 15m, 12h or 720h (with --caller-identity the default is 720h)")
	aliasFlag(f, "ttl-seconds", "ttl", secondsToDuration, "int")
	f.StringVar(&o.Out, "out", "", "where to write the grant (mode 600), or - for standard output")
	f.StringVar(&seedRecord, "seed-record", "", "the seed record (default: seed-record.json beside the manifest)")
	f.BoolVar(&asJSON, "json", false, "print one JSON object (shape in --help) instead of prose")
	_ = cmd.RegisterFlagCompletionFunc("tools", completeTools)
	// The manifest's names, once --manifest is given.
	_ = cmd.RegisterFlagCompletionFunc("documents", completeFromManifest(true, func(m *grant.Manifest) []string {
		var ids []string
		for _, id := range slices.Sorted(maps.Keys(m.Documents)) {
			if m.Documents[id].Approved {
				ids = append(ids, id)
			}
		}
		return ids
	}))
	_ = cmd.RegisterFlagCompletionFunc("destinations", completeFromManifest(true, func(m *grant.Manifest) []string {
		return slices.Sorted(maps.Keys(m.Destinations))
	}))
	_ = cmd.RegisterFlagCompletionFunc("steps", completeFromManifest(true, func(m *grant.Manifest) []string {
		return slices.Sorted(maps.Keys(m.Steps))
	}))
	return requireFlags(cmd, "manifest", "out")
}

// wrapList is words joined with ", " in lines of at most width
// characters, each starting with indent.
func wrapList(words []string, indent string, width int) string {
	var b strings.Builder
	line := indent
	for i, w := range words {
		if i < len(words)-1 {
			w += ","
		}
		if line != indent && len(line)+1+len(w) > width {
			b.WriteString(line + "\n")
			line = indent
		}
		if line != indent {
			line += " "
		}
		line += w
	}
	b.WriteString(line)
	return b.String()
}

// grantExit gives a refused grant its exit status: an option the command
// line got wrong is a usage error (2); a grant the manifest or the rules
// refuse is a refusal (3).
func grantExit(err error) error {
	var oe *grant.OptionError
	var fe *grant.FieldError
	var re *grant.FileRootError
	switch {
	case errors.As(err, &oe):
		return &exitError{code: exitUsage, err: err}
	case errors.As(err, &fe), errors.As(err, &re), errors.Is(err, grant.ErrNothingGranted), errors.Is(err, grant.ErrNoKeys),
		errors.Is(err, grant.ErrGrantTooWide):
		return refusedError(err)
	}
	return err
}

// nonNil writes an empty list as [] rather than null.
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
