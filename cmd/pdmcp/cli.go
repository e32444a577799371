package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/pdmcp/pdmcp/auth"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/fileerr"
	"github.com/pdmcp/pdmcp/internal/safefile"
	"github.com/pdmcp/pdmcp/internal/strictjson"
	"github.com/pdmcp/pdmcp/internal/suggest"
)

// Exit statuses, the same for every command (listed in `pdmcp --help` and
// docs/operating.md).
const (
	exitOK = 0
	// exitFailure: the command went wrong while working (a file it could
	// not write, an answer it did not expect).
	exitFailure = 1
	// exitUsage: the command line is wrong (an unknown command or flag, a
	// missing required flag, a value of the wrong kind), or a file named on
	// it is not there. Nothing was done.
	exitUsage = 2
	// exitRefused: the inputs were read and a check refused them (check's
	// findings, a broken audit chain, a grant or manifest that does not
	// hold, a missed bench goal).
	exitRefused = 3
	// exitUnreachable: the Gateway, the key server or the OpenID provider
	// did not answer.
	exitUnreachable = 4
)

// exitCodesHelp is the table `pdmcp --help` ends with.
const exitCodesHelp = `Exit status (every command):
  0  done
  1  failed while working
  2  wrong command line (unknown command or flag, a required flag missing, a bad value, a named file missing)
  3  refused by a check (check's findings, a broken audit chain, inputs that do not hold, a missed bench goal)
  4  the Gateway, key server or OpenID provider did not answer
`

// exitError ends pdmcp with code; a silent one prints nothing more (the
// command said it all).
type exitError struct {
	code   int
	err    error
	silent bool
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageError is a wrong invocation: exit code 2.
func usageError(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

// refusedError is err as a check's refusal: exit code 3.
func refusedError(err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: exitRefused, err: err}
}

// exitCode is the status err ends the process with. ran is false when the
// error came before the command's own work began (flag parsing, argument
// and required-flag checks): cobra's errors for those are usage errors.
func exitCode(err error, ran bool) int {
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	if !ran {
		return exitUsage
	}
	if unreachable(err) {
		return exitUnreachable
	}
	// A file the command line named is not there (a wrong path): as the
	// usage errors, nothing was done.
	if errors.Is(err, fs.ErrNotExist) {
		return exitUsage
	}
	if refusedFile(err) {
		return exitRefused
	}
	return exitFailure
}

// unreachable reports whether err says a peer did not answer: the
// Gateway (no answer, or not one of its own) or the OpenID provider.
func unreachable(err error) bool {
	if errors.Is(err, &api.Error{Code: api.CodeUnreachable}) || errors.Is(err, &api.Error{Code: api.CodeBadResponse}) {
		return true
	}
	var te *auth.TokenError
	if errors.As(err, &te) && te.Class == auth.ClassProviderUnavailable {
		return true
	}
	// Nothing answered the connection (refused, no route, timed out):
	// the peer is down or the address is wrong.
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial"
}

// dialReason is why a peer did not answer, in its own words: the dial
// error inside err ("connect: connection refused"), else the cause a
// Gateway client's GATEWAY_UNREACHABLE carries (a timeout), else err.
func dialReason(err error) string {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		return oe.Err.Error()
	}
	var ae *api.Error
	if errors.As(err, &ae) && ae.Cause != nil {
		return ae.Cause.Error()
	}
	return err.Error()
}

// refusedFile reports whether err refuses an operator's file as read: it
// is empty, not valid JSON or not of its format (a member unknown, given
// twice or of the wrong type), or its mode lets others in. The file is
// there and was read; a check said no, so the status is 3, as for the
// other checks.
func refusedFile(err error) bool {
	var je *strictjson.Error
	var me *safefile.ModeError
	return errors.Is(err, fileerr.ErrEmpty) || errors.As(err, &me) || errors.As(err, &je) && je.File != ""
}

// runState records whether a command's own work (its RunE) began.
type runState struct{ ran bool }

// guardRuns wraps every RunE under c so that st.ran is set when one starts.
func guardRuns(c *cobra.Command, st *runState) {
	if run := c.RunE; run != nil {
		c.RunE = func(cmd *cobra.Command, args []string) error {
			st.ran = true
			return run(cmd, args)
		}
	}
	for _, sub := range c.Commands() {
		guardRuns(sub, st)
	}
}

// runMain executes pdmcp with args, writing to stdout and stderr, and returns
// its exit status: main's body, callable from tests.
func runMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root, st := newRoot()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	warnTo(root, stderr)
	cmd, err := root.ExecuteContextC(ctx)
	code := exitCode(err, st.ran)
	if err != nil {
		var ee *exitError
		if !errors.As(err, &ee) || !ee.silent {
			fmt.Fprintln(stderr, errorLine(nameMissingFlag(cmd, err)))
		}
	}
	return code
}

// nameMissingFlag is err with a missing file named by the flag that gave
// it: "open x.json: no such file or directory" becomes "--config x.json:
// no such file or directory", so the operator sees which flag to correct.
// Any other error, or a path no flag of cmd holds, is err as it is.
func nameMissingFlag(cmd *cobra.Command, err error) error {
	var pe *fs.PathError
	if cmd == nil || !errors.As(err, &pe) || !errors.Is(pe, fs.ErrNotExist) {
		return err
	}
	name, given := "", ""
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if name != "" || !f.Changed || f.Hidden || f.Value.Type() != "string" {
			return
		}
		// Some commands resolve a path before opening it.
		v := f.Value.String()
		if abs, aerr := filepath.Abs(v); v == pe.Path || aerr == nil && abs == pe.Path {
			name, given = f.Name, v
		}
	})
	if name == "" {
		return err
	}
	return &flagPathError{err: err, old: pe.Error(), new: fmt.Sprintf("--%s %s: no such file or directory", name, given)}
}

// flagPathError is an error whose text names the flag of a missing file;
// it unwraps to the original, so exit statuses are unchanged.
type flagPathError struct {
	err      error
	old, new string
}

func (e *flagPathError) Error() string { return strings.Replace(e.err.Error(), e.old, e.new, 1) }
func (e *flagPathError) Unwrap() error { return e.err }

// warnTo sends the flags' warnings (an old spelling's "Flag --x has been
// deprecated, use --y instead") of every command under c to w. Cobra
// would print them to the command's standard output (it prints with
// OutOrStderr, which is the output once one is set), into a --json
// object or an output written to "-".
func warnTo(c *cobra.Command, w io.Writer) {
	c.Flags().SetOutput(w)
	c.PersistentFlags().SetOutput(w)
	for _, sub := range c.Commands() {
		warnTo(sub, w)
	}
}

// errorLine is err as pdmcp prints it: one line (cobra's own messages
// spread a suggestion over three), prefixed with the program's name
// unless it already names the command.
func errorLine(err error) string {
	msg := err.Error()
	if m, ok := strings.CutPrefix(msg, "unknown command "); ok {
		// Cobra's, for an unknown subcommand of a command that has none of
		// its own Args (not ours, kept as a fallback): `unknown command
		// "x" for "pdmcp"\n\nDid you mean this?\n\ty\n`.
		name, rest, _ := strings.Cut(m, " for ")
		line := "unknown command " + name
		if path, _, _ := strings.Cut(rest, "\n"); strings.HasPrefix(path, `"pdmcp`) {
			line = strings.Trim(path, `"`) + ": " + line
		}
		if _, sugg, ok := strings.Cut(rest, "Did you mean this?"); ok {
			if f := strings.Fields(sugg); len(f) > 0 {
				line += fmt.Sprintf("; did you mean %q?", f[0])
			}
		}
		msg = line
	}
	msg = strings.TrimSpace(msg)
	if strings.HasPrefix(msg, "pdmcp ") || strings.HasPrefix(msg, "pdmcp:") {
		return msg
	}
	return "pdmcp: " + msg
}

// groupArgs is the Args of a command whose work is in its subcommands (the
// root, audit): an argument that names none of them is an unknown command,
// with the nearest names suggested.
func groupArgs(c *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	return unknownCommand(c, args[0])
}

// unknownCommand is the usage error for a word c does not know as a
// subcommand.
func unknownCommand(c *cobra.Command, name string) error {
	if c.SuggestionsMinimumDistance <= 0 {
		c.SuggestionsMinimumDistance = 2 // cobra's own default, set only where it suggests
	}
	if s := c.SuggestionsFor(name); len(s) > 0 {
		return usageError("%s: unknown command %q; did you mean %q? (%s --help lists the commands)", c.CommandPath(), name, s[0], c.CommandPath())
	}
	return usageError("%s: unknown command %q (%s --help lists the commands)", c.CommandPath(), name, c.CommandPath())
}

// newHelpCmd is `pdmcp help [command]`: cobra's, except that a command it
// does not know is a usage error with a suggestion (cobra's prints the
// root's help and exits 0).
func newHelpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		Example: "  pdmcp help serve\n" +
			"  pdmcp help dev token",
		RunE: func(c *cobra.Command, args []string) error {
			target, rest, err := c.Root().Find(args)
			if err != nil {
				return &exitError{code: exitUsage, err: err}
			}
			if len(rest) > 0 {
				return unknownCommand(target, rest[0])
			}
			return target.Help()
		},
		ValidArgsFunction: func(c *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			target, _, err := c.Root().Find(args)
			if err != nil {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			var out []cobra.Completion
			for _, sub := range target.Commands() {
				if sub.IsAvailableCommand() && strings.HasPrefix(sub.Name(), toComplete) {
					out = append(out, cobra.CompletionWithDesc(sub.Name(), sub.Short))
				}
			}
			return out, cobra.ShellCompDirectiveNoFileComp
		},
	}
}

// groupRun is the RunE of such a command: alone, it prints its help.
func groupRun(c *cobra.Command, _ []string) error { return c.Help() }

// noArgs is the Args of a command that takes none: a word after it is
// named (a subcommand mistyped, when it has subcommands).
func noArgs(c *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	if c.HasSubCommands() {
		return unknownCommand(c, args[0])
	}
	return usageError("%s takes no arguments, and was given %q (flags start with --)", c.CommandPath(), args[0])
}

// requiredSuffix ends the usage of every required flag in help.
const requiredSuffix = " (required)"

// isRequired reports whether f was marked required (cobra's annotation).
func isRequired(f *pflag.Flag) bool {
	v, ok := f.Annotations[cobra.BashCompOneRequiredFlag]
	return ok && len(v) > 0 && v[0] == "true"
}

// markRequiredInHelp ends the usage text of every required flag under c
// with "(required)", so help says which flags must be given.
func markRequiredInHelp(c *cobra.Command) {
	mark := func(f *pflag.Flag) {
		if isRequired(f) && !strings.HasSuffix(f.Usage, requiredSuffix) {
			f.Usage += requiredSuffix
		}
	}
	c.LocalNonPersistentFlags().VisitAll(mark)
	c.PersistentFlags().VisitAll(mark)
	for _, sub := range c.Commands() {
		markRequiredInHelp(sub)
	}
}

// checkRequired is cobra's required-flag check in words: the command, each
// flag missing and what it is (its usage). The root runs it before any
// command's work, so cobra's own (`required flag(s) "config" not set`)
// never shows.
func checkRequired(c *cobra.Command) error {
	var missing []*pflag.Flag
	c.Flags().VisitAll(func(f *pflag.Flag) {
		if isRequired(f) && !f.Changed {
			missing = append(missing, f)
		}
	})
	switch len(missing) {
	case 0:
		return nil
	case 1:
		f := missing[0]
		return usageError("%s: --%s is required (%s)", c.CommandPath(), f.Name, strings.TrimSuffix(f.Usage, requiredSuffix))
	}
	var sb strings.Builder
	for i, f := range missing {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString("--" + f.Name)
	}
	var lines strings.Builder
	for _, f := range missing {
		fmt.Fprintf(&lines, "\n  --%s: %s", f.Name, strings.TrimSuffix(f.Usage, requiredSuffix))
	}
	return usageError("%s: %s are required:%s", c.CommandPath(), sb.String(), lines.String())
}

// completeFiles has the shell complete the named flags of cmd with file
// names: those ending in .ext, or any file for "".
func completeFiles(cmd *cobra.Command, ext string, names ...string) {
	var exts []string
	if ext != "" {
		exts = []string{ext}
	}
	for _, n := range names {
		if err := cmd.MarkFlagFilename(n, exts...); err != nil {
			panic("completeFiles: " + err.Error()) // a wiring mistake, found by every test
		}
	}
}

// completeWords completes a flag or argument from a fixed set of words
// (no file names).
func completeWords(words ...string) cobra.CompletionFunc {
	return cobra.FixedCompletions(words, cobra.ShellCompDirectiveNoFileComp)
}

// completeList completes a comma-separated list of words (StringSlice
// flags): the word being typed after the last comma, from those not yet in
// the list, with the list so far kept in front.
func completeList(words ...string) cobra.CompletionFunc {
	return func(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		done, typed := "", toComplete
		if i := strings.LastIndexByte(toComplete, ','); i >= 0 {
			done, typed = toComplete[:i+1], toComplete[i+1:]
		}
		given := strings.Split(strings.TrimSuffix(done, ","), ",")
		var out []cobra.Completion
		for _, w := range words {
			if strings.HasPrefix(w, typed) && !slices.Contains(given, w) {
				out = append(out, done+w)
			}
		}
		// No space after a word: another may follow a comma.
		return out, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
	}
}

// completeTools completes a comma-separated list of the server's tool
// names (grant --tools), in the order the server lists them.
func completeTools(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	return completeList(grant.AllTools()...)(cmd, args, toComplete)
}

// shellQuote is s as one word for a POSIX shell: as it is when it holds
// only characters no shell treats specially, else in single quotes (a
// single quote in it ends the quoting, is escaped, and quoting resumes).
func shellQuote(s string) string {
	if s == "" {
		return "''"
	}
	safe := true
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("@%_-+=:,./", r)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// flagError turns pflag's errors into a usage error that names the flag as
// typed, says what is wrong with the value in words, and suggests the
// nearest flag for one it does not know.
func flagError(c *cobra.Command, err error) error {
	var notExist *pflag.NotExistError
	var invalid *pflag.InvalidValueError
	var needsValue *pflag.ValueRequiredError
	switch {
	case errors.As(err, &notExist):
		name := notExist.GetSpecifiedName()
		if name == "" {
			return usageError("%s: unknown flag -%s (%s --help lists its flags)", c.CommandPath(), notExist.GetSpecifiedShortnames(), c.CommandPath())
		}
		if s := suggestFlag(c, name); s != "" {
			return usageError("%s: unknown flag --%s; did you mean --%s?", c.CommandPath(), name, s)
		}
		return usageError("%s: unknown flag --%s (%s --help lists its flags)", c.CommandPath(), name, c.CommandPath())
	case errors.As(err, &invalid):
		f := invalid.GetFlag()
		return usageError("%s: --%s %q: %s", c.CommandPath(), f.Name, invalid.GetValue(), valueKind(f))
	case errors.As(err, &needsValue):
		f := needsValue.GetFlag()
		return usageError("%s: --%s needs a value: %s", c.CommandPath(), f.Name, strings.TrimSuffix(f.Usage, requiredSuffix))
	}
	return &exitError{code: exitUsage, err: err}
}

// valueKind says in words what a flag's value must be.
func valueKind(f *pflag.Flag) string {
	switch f.Value.Type() {
	case "duration":
		return "not a duration (write it as 90s, 15m, 12h or 720h)"
	case "int", "int64", "int32", "uint", "uint64":
		return "not a whole number"
	case "float64", "float32":
		return "not a number"
	case "bool":
		return "not true or false"
	}
	return fmt.Sprintf("not a valid value (%s)", strings.TrimSuffix(f.Usage, requiredSuffix))
}

// suggestFlag is the flag of c nearest to name (a prefix of it, or at
// most two edits away), or "".
func suggestFlag(c *cobra.Command, name string) string {
	var names []string
	c.Flags().VisitAll(func(f *pflag.Flag) {
		if !f.Hidden {
			names = append(names, f.Name)
		}
	})
	c.InheritedFlags().VisitAll(func(f *pflag.Flag) {
		if !f.Hidden {
			names = append(names, f.Name)
		}
	})
	sort.Strings(names)
	best, bestD := "", 3
	for _, n := range names {
		if strings.HasPrefix(n, name) && len(name) >= 3 {
			return n
		}
		if d := suggest.Distance(name, n); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

// aliasValue is an old spelling of a flag: setting it sets the new flag
// (marking it given, so its required check and Changed see it), through
// convert when the old one took another form (seconds for a duration).
type aliasValue struct {
	fs      *pflag.FlagSet
	target  string
	convert func(string) (string, error)
	typ     string
}

func (a *aliasValue) String() string { return "" }
func (a *aliasValue) Type() string   { return a.typ }
func (a *aliasValue) Set(s string) error {
	if a.convert != nil {
		v, err := a.convert(s)
		if err != nil {
			return err
		}
		s = v
	}
	return a.fs.Set(a.target, s)
}

// aliasFlag adds old to fs as a hidden spelling of the flag named target
// that warns when used (on standard error: see warnTo). convert, when not
// nil, turns the old flag's value into the new one's; oldType, when not
// "", is the type the old flag's value had, so its value errors are
// worded for it ("int" for seconds).
func aliasFlag(fs *pflag.FlagSet, old, target string, convert func(string) (string, error), oldType string) {
	t := fs.Lookup(target)
	if t == nil {
		panic("aliasFlag: no flag --" + target) // a wiring mistake, found by every test
	}
	typ := t.Value.Type()
	if oldType != "" {
		typ = oldType
	}
	f := fs.VarPF(&aliasValue{fs: fs, target: target, convert: convert, typ: typ}, old, "", "old spelling of --"+target)
	if typ == "bool" {
		f.NoOptDefVal = "true"
	}
	_ = fs.MarkDeprecated(old, "use --"+target+" instead")
}

// secondsToDuration converts an old --…-seconds value to a duration.
func secondsToDuration(s string) (string, error) {
	var n int64
	if _, err := fmt.Sscanf(s, "%d", &n); err != nil || fmt.Sprint(n) != s {
		return "", fmt.Errorf("not a whole number of seconds")
	}
	return s + "s", nil
}

// writeJSON writes v to w as indented JSON: the --json output of every
// command.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// isStdout reports whether an output path names standard output.
func isStdout(path string) bool { return path == "-" }

// writeOutput writes b to path, or to cmd's standard output for "-": in
// full or not at all (a temporary file beside it, synced, then renamed),
// with mode, and nothing else left beside it.
func writeOutput(cmd *cobra.Command, path string, b []byte, mode os.FileMode) error {
	if isStdout(path) {
		_, err := cmd.OutOrStdout().Write(b)
		return err
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// orList is words as a person lists them: "a, b or c".
func orList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}
