package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/pdmcp/pdmcp/auth"
	"github.com/pdmcp/pdmcp/gateway/api"
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
	return exitFailure
}

// unreachable reports whether err says a peer did not answer: the
// Gateway (no answer, or not one of its own) or the OpenID provider.
func unreachable(err error) bool {
	if errors.Is(err, &api.Error{Code: api.CodeUnreachable}) || errors.Is(err, &api.Error{Code: api.CodeBadResponse}) {
		return true
	}
	var te *auth.TokenError
	return errors.As(err, &te) && te.Class == auth.ClassProviderUnavailable
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
	err := root.ExecuteContext(ctx)
	code := exitCode(err, st.ran)
	if err != nil {
		var ee *exitError
		if !errors.As(err, &ee) || !ee.silent {
			fmt.Fprintln(stderr, "pdmcp:", err)
		}
	}
	return code
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
		return usageError("--%s %q: %s", f.Name, invalid.GetValue(), valueKind(f))
	case errors.As(err, &needsValue):
		f := needsValue.GetFlag()
		return usageError("--%s needs a value: %s", f.Name, f.Usage)
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
	return fmt.Sprintf("not a valid value (%s)", f.Usage)
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
		if d := editDistance(name, n); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
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
// that warns when used. convert, when not nil, turns the old flag's value
// into the new one's.
func aliasFlag(fs *pflag.FlagSet, old, target string, convert func(string) (string, error)) {
	t := fs.Lookup(target)
	if t == nil {
		panic("aliasFlag: no flag --" + target) // a wiring mistake, found by every test
	}
	typ := t.Value.Type()
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
