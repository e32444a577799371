package main

import (
	"bytes"
	"fmt"
	"go/scanner"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/devstack"
	"github.com/pdmcp/pdmcp/server/refusal"
)

// The docs drift tests: what README.md and docs/*.md claim that can be
// checked against the binary (the commands in their code blocks, tool and
// user counts and names, codes in tables, pdmcp's own file names, the exit
// statuses, the commands with --json) is checked here, so a doc that
// disagrees with the program fails the build instead of misleading the
// operator who pastes it.

// docsRepoRoot is the module's root, seen from this package's folder.
const docsRepoRoot = "../.."

// docPage is one Markdown page: its name as the failures print it, and its
// text.
type docPage struct {
	name string
	text string
}

// readDocs reads README.md and docs/*.md.
func readDocs(t *testing.T) []docPage {
	t.Helper()
	names := []string{"README.md"}
	more, err := filepath.Glob(filepath.Join(docsRepoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range more {
		rel, _ := filepath.Rel(docsRepoRoot, m)
		names = append(names, filepath.ToSlash(rel))
	}
	var out []docPage
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(docsRepoRoot, filepath.FromSlash(n)))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, docPage{name: n, text: string(b)})
	}
	if len(out) < 8 {
		t.Fatalf("found %d pages; has docs/ moved?", len(out))
	}
	return out
}

// codeLine is one line of a code block, its backslash continuations
// joined, with the line it starts on.
type codeLine struct {
	line int
	text string
}

// outputFences are the info strings of fenced blocks that show output or
// a file, never a command to run.
var outputFences = map[string]bool{"text": true, "json": true, "jsonc": true, "toml": true, "yaml": true,
	"ini": true, "output": true, "http": true, "go": true}

// codeLines returns the lines of text's code blocks that a reader may run:
// fenced blocks (except those marked as output or a file) and indented
// blocks (four spaces, after a blank line or another code line).
func codeLines(text string) []codeLine {
	var out []codeLine
	lines := strings.Split(text, "\n")
	inFence, runnable := false, false
	prevBlank, prevCode := true, false
	var pending *codeLine
	for i, l := range lines {
		s := strings.TrimSpace(l)
		if strings.HasPrefix(s, "```") {
			if !inFence {
				info := strings.Fields(strings.TrimPrefix(s, "```"))
				runnable = len(info) == 0 || !outputFences[info[0]]
			}
			inFence = !inFence
			prevCode, prevBlank, pending = false, false, nil
			continue
		}
		code := s != "" && (inFence && runnable || !inFence && strings.HasPrefix(l, "    ") && (prevBlank || prevCode))
		if code {
			if pending != nil {
				pending.text += " " + s
			} else {
				out = append(out, codeLine{line: i + 1, text: s})
				pending = &out[len(out)-1]
			}
			if strings.HasSuffix(pending.text, "\\") {
				pending.text = strings.TrimSuffix(pending.text, "\\")
			} else {
				pending = nil
			}
		} else {
			pending = nil
		}
		if s != "" {
			prevCode = code
		}
		prevBlank = s == ""
	}
	return out
}

// shellWord is one shell word: its text with quotes removed, and whether it
// holds an expansion ($VAR, ${…}, $(…), `…`) or a placeholder (<…>)
// whose value the test cannot know.
type shellWord struct {
	text   string
	opaque bool
}

// shellWords splits one simple command as a POSIX shell would, as far as
// the docs need: quotes, backslashes, expansions kept whole as opaque
// words, <placeholders> kept whole (spaces and all), redirections dropped.
// It stops at a comment or at the end of the simple command (|, &, ;).
func shellWords(line string) ([]shellWord, error) {
	var out []shellWord
	var cur strings.Builder
	inWord, opaque, dropNext := false, false, false
	end := func() {
		if inWord {
			if dropNext {
				dropNext = false
			} else {
				out = append(out, shellWord{text: cur.String(), opaque: opaque})
			}
		}
		cur.Reset()
		inWord, opaque = false, false
	}
	r := []rune(line)
	// expansion consumes the $… starting at r[i] into cur and returns the
	// index of its last rune.
	expansion := func(i int) (int, error) {
		opaque = true
		cur.WriteRune('$')
		if i+1 >= len(r) {
			return i, nil
		}
		switch r[i+1] {
		case '(', '{':
			open, closing := r[i+1], map[rune]rune{'(': ')', '{': '}'}[r[i+1]]
			depth := 0
			for j := i + 1; j < len(r); j++ {
				cur.WriteRune(r[j])
				switch r[j] {
				case open:
					depth++
				case closing:
					depth--
					if depth == 0 {
						return j, nil
					}
				}
			}
			return 0, fmt.Errorf("unclosed $%c", open)
		}
		j := i + 1
		for j < len(r) && (r[j] == '_' || r[j] >= 'a' && r[j] <= 'z' || r[j] >= 'A' && r[j] <= 'Z' || r[j] >= '0' && r[j] <= '9') {
			cur.WriteRune(r[j])
			j++
		}
		return j - 1, nil
	}
	for i := 0; i < len(r); i++ {
		c := r[i]
		switch {
		case c == ' ' || c == '\t':
			end()
		case c == '#' && !inWord:
			end()
			return out, nil
		case c == '|' || c == '&' || c == ';':
			end()
			return out, nil
		case c == '\'':
			inWord = true
			j := strings.IndexRune(string(r[i+1:]), '\'')
			if j < 0 {
				return nil, fmt.Errorf("unclosed '")
			}
			rest := []rune(string(r[i+1:])[:j])
			cur.WriteString(string(rest))
			i += len(rest) + 1
		case c == '"':
			inWord = true
			closed := false
			for i++; i < len(r); i++ {
				if r[i] == '"' {
					closed = true
					break
				}
				if r[i] == '\\' && i+1 < len(r) && strings.ContainsRune("\"\\$`", r[i+1]) {
					i++
					cur.WriteRune(r[i])
					continue
				}
				if r[i] == '$' {
					j, err := expansion(i)
					if err != nil {
						return nil, err
					}
					i = j
					continue
				}
				if r[i] == '`' {
					opaque = true
				}
				cur.WriteRune(r[i])
			}
			if !closed {
				return nil, fmt.Errorf("unclosed \"")
			}
		case c == '\\':
			inWord = true
			if i+1 < len(r) {
				i++
				cur.WriteRune(r[i])
			}
		case c == '$':
			inWord = true
			j, err := expansion(i)
			if err != nil {
				return nil, err
			}
			i = j
		case c == '`':
			inWord, opaque = true, true
			j := strings.IndexRune(string(r[i+1:]), '`')
			if j < 0 {
				return nil, fmt.Errorf("unclosed `")
			}
			rest := []rune(string(r[i+1:])[:j])
			cur.WriteString("`" + string(rest) + "`")
			i += len(rest) + 1
		case c == '<' && i+1 < len(r) && r[i+1] != ' ' && r[i+1] != '<' && strings.ContainsRune(string(r[i+1:]), '>'):
			// A <placeholder>, spaces and all.
			inWord, opaque = true, true
			j := strings.IndexRune(string(r[i:]), '>')
			seg := []rune(string(r[i:])[:j+1])
			cur.WriteString(string(seg))
			i += len(seg) - 1
		case c == '>' || c == '<':
			// A redirection: the operator, a descriptor before it and its
			// target are not the command's.
			if inWord && strings.Trim(cur.String(), "0123456789") == "" {
				cur.Reset()
				inWord = false
			}
			end()
			for i+1 < len(r) && (r[i+1] == '>' || r[i+1] == '&') {
				i++
			}
			dropNext = true
		default:
			inWord = true
			cur.WriteRune(c)
		}
	}
	end()
	return out, nil
}

// substitutions returns the commands inside $(…) in line, for a pdmcp
// invoked there (TOKEN=$(pdmcp dev token alice)).
func substitutions(line string) []string {
	var out []string
	for i := 0; i+1 < len(line); i++ {
		if line[i] != '$' || line[i+1] != '(' {
			continue
		}
		depth := 0
		for j := i + 1; j < len(line); j++ {
			switch line[j] {
			case '(':
				depth++
			case ')':
				depth--
			}
			if depth == 0 {
				inner := line[i+2 : j]
				out = append(out, inner)
				out = append(out, substitutions(inner)...)
				break
			}
		}
	}
	return out
}

var (
	envAssignment = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)
	cronField     = regexp.MustCompile(`^[0-9*/,-]+$`)
)

// pdmcpArgs returns the arguments a command line gives pdmcp, and whether
// it invokes pdmcp at all: `pdmcp …`, `./pdmcp …`, `/path/to/pdmcp …`,
// `go run ./cmd/pdmcp …`, after a `$ ` prompt, environment assignments
// or a crontab line's five time fields.
func pdmcpArgs(ws []shellWord) ([]shellWord, bool) {
	if len(ws) > 0 && ws[0].text == "$" {
		ws = ws[1:]
	}
	if len(ws) > 5 && !slices.ContainsFunc(ws[:5], func(w shellWord) bool { return !cronField.MatchString(w.text) }) {
		ws = ws[5:]
	}
	for len(ws) > 0 && (envAssignment.MatchString(ws[0].text) || ws[0].text == "exec" || ws[0].text == "time") {
		ws = ws[1:]
	}
	switch {
	case len(ws) >= 3 && ws[0].text == "go" && ws[1].text == "run" && strings.TrimSuffix(ws[2].text, "/") == "./cmd/pdmcp":
		return ws[3:], true
	case len(ws) >= 1 && path.Base(ws[0].text) == "pdmcp":
		return ws[1:], true
	}
	return nil, false
}

// isPlaceholder reports whether a word stands for a value the reader fills
// in: an expansion, a <placeholder>, or a name in capitals (PATH, DIR).
func isPlaceholder(w shellWord) bool {
	return w.opaque || strings.Trim(w.text, "ABCDEFGHIJKLMNOPQRSTUVWXYZ_") == ""
}

// sampleValue is a value of a flag's type, standing in for a placeholder.
func sampleValue(f *pflag.Flag) (string, bool) {
	switch f.Value.Type() {
	case "duration":
		return "1m", true
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64", "count":
		return "1", true
	case "float32", "float64":
		return "1", true
	}
	return "", false
}

// lookupFlag finds a flag of c by its long name, its own or inherited.
func lookupFlag(c *cobra.Command, name string) *pflag.Flag {
	if f := c.Flags().Lookup(name); f != nil {
		return f
	}
	for p := c.Parent(); p != nil; p = p.Parent() {
		if f := p.PersistentFlags().Lookup(name); f != nil {
			return f
		}
	}
	return nil
}

// docFacts are what the docs are checked against, read from the code.
type docFacts struct {
	// root is the command tree the docs' command lines are parsed with
	// (newRootCmd when nil).
	root     func() *cobra.Command
	devUsers []string
	// literals are every string literal in the module's non-test Go files.
	literals map[string]bool
}

// checkCommand parses one pdmcp command line from the docs with the real
// command tree, running nothing: every RunE and pre-run hook is replaced
// by a recorder. It returns what is wrong with the line, or "".
func checkCommand(ws []shellWord, f docFacts) string {
	// "…" and "..." elide flags the reader knows: the required-flag check
	// is then not made. [--x V] and [--x V]... are optional forms.
	elided := false
	var args []shellWord
	for _, w := range ws {
		t := w.text
		if t == "..." || t == "…" {
			elided = true
			continue
		}
		if !w.opaque {
			t = strings.TrimPrefix(t, "[")
			for _, s := range []string{"...", "…", "]"} {
				t = strings.TrimSuffix(t, s)
			}
			if t == "" {
				continue
			}
		}
		args = append(args, shellWord{text: t, opaque: w.opaque})
	}
	newRoot := f.root
	if newRoot == nil {
		newRoot = newRootCmd
	}
	root := newRoot()
	var ran *cobra.Command
	var ranArgs []string
	var hook func(c *cobra.Command)
	hook = func(c *cobra.Command) {
		c.PersistentPreRun, c.PersistentPreRunE, c.PreRun, c.PreRunE = nil, nil, nil, nil
		c.PostRun, c.PostRunE, c.PersistentPostRun, c.PersistentPostRunE = nil, nil, nil, nil
		if c.Runnable() {
			c.Run = nil
			c.RunE = func(cmd *cobra.Command, a []string) error {
				ran, ranArgs = cmd, a
				return nil
			}
		}
		for _, sub := range c.Commands() {
			hook(sub)
		}
	}
	hook(root)
	plain := make([]string, len(args))
	for i, a := range args {
		plain[i] = a.text
	}
	target, _, _ := root.Find(plain)
	if target == nil {
		target = root
	}
	// A placeholder where a typed value goes stands for a value of that
	// type.
	for i := 0; i < len(args); i++ {
		name, val, hasVal := strings.Cut(strings.TrimPrefix(args[i].text, "--"), "=")
		if !strings.HasPrefix(args[i].text, "--") || name == "" {
			continue
		}
		fl := lookupFlag(target, name)
		if fl == nil || fl.NoOptDefVal != "" {
			continue
		}
		switch {
		case hasVal && isPlaceholder(shellWord{text: val, opaque: args[i].opaque}):
			if v, ok := sampleValue(fl); ok {
				plain[i] = "--" + name + "=" + v
			}
		case !hasVal && i+1 < len(args) && isPlaceholder(args[i+1]):
			if v, ok := sampleValue(fl); ok {
				plain[i+1] = v
			}
		}
		if fl.Name == "tools" && !hasVal && i+1 < len(args) && !args[i+1].opaque {
			for _, tool := range strings.Split(args[i+1].text, ",") {
				if !grant.KnownTool(tool) {
					return fmt.Sprintf("--tools names %q, which is no tool (the tools are %s)", tool, strings.Join(grant.AllTools(), ", "))
				}
			}
		}
	}
	if elided {
		var relax func(c *cobra.Command)
		relax = func(c *cobra.Command) {
			c.Flags().VisitAll(func(fl *pflag.Flag) {
				delete(fl.Annotations, cobra.BashCompOneRequiredFlag)
				delete(fl.Annotations, "cobra_annotation_one_required")
				delete(fl.Annotations, "cobra_annotation_required_if_others_set")
			})
			for _, sub := range c.Commands() {
				relax(sub)
			}
		}
		relax(root)
	}
	var out bytes.Buffer
	root.SetArgs(plain)
	root.SetOut(&out)
	root.SetErr(&out)
	if err := root.Execute(); err != nil {
		return err.Error()
	}
	if ran == nil {
		for _, a := range plain {
			if a == "-h" || a == "--help" || a == "--version" || a == "help" || a == "completion" {
				return ""
			}
		}
		return "names no command that runs (it only prints help)"
	}
	for c := ran; c != nil; c = c.Parent() {
		if c.Hidden || c.Deprecated != "" {
			return fmt.Sprintf("%s is a hidden or deprecated command", c.CommandPath())
		}
	}
	var bad []string
	ran.Flags().Visit(func(fl *pflag.Flag) {
		if fl.Hidden || fl.Deprecated != "" || fl.ShorthandDeprecated != "" {
			bad = append(bad, "--"+fl.Name)
		}
	})
	if len(bad) > 0 {
		return fmt.Sprintf("%s: %s is an old or hidden spelling; write the flag it stands for (%s --help)",
			ran.CommandPath(), strings.Join(bad, ", "), ran.CommandPath())
	}
	if ran.CommandPath() == "pdmcp dev token" && len(ranArgs) == 1 {
		u := ranArgs[0]
		if !isPlaceholder(shellWord{text: u, opaque: strings.ContainsAny(u, "$<`")}) && !slices.Contains(f.devUsers, u) {
			return fmt.Sprintf("%q is no development user (they are %s)", u, strings.Join(f.devUsers, ", "))
		}
	}
	return ""
}

// checkCommands checks every pdmcp command line in the code blocks of
// docs, each problem as file:line.
func checkCommands(docs []docPage, f docFacts) (problems []string, checked int) {
	for _, d := range docs {
		for _, cl := range codeLines(d.text) {
			candidates := append([]string{strings.TrimPrefix(cl.text, "$ ")}, substitutions(cl.text)...)
			for _, c := range candidates {
				if !strings.Contains(c, "pdmcp") {
					continue
				}
				ws, err := shellWords(c)
				if err != nil {
					var fields []shellWord
					for _, w := range strings.Fields(c) {
						fields = append(fields, shellWord{text: w})
					}
					if _, ok := pdmcpArgs(fields); !ok {
						continue
					}
					problems = append(problems, fmt.Sprintf("%s:%d: %s: cannot split it: %v", d.name, cl.line, c, err))
					continue
				}
				args, ok := pdmcpArgs(ws)
				if !ok {
					continue
				}
				checked++
				if msg := checkCommand(args, f); msg != "" {
					problems = append(problems, fmt.Sprintf("%s:%d: %s: %s", d.name, cl.line, c, msg))
				}
			}
		}
	}
	return problems, checked
}

// inlineCommand is a command named in running text: `pdmcp seed --out`.
var inlineCommand = regexp.MustCompile("`pdmcp ([^`]+)`")

// checkInline checks the commands the docs name in running text: the
// command path exists and every flag named exists under its current
// spelling. Values and required flags are not checked (the text names
// what it speaks of, not a whole command line), nor text that is a string
// of the program's own (`pdmcp audit head v1`).
func checkInline(docs []docPage, f docFacts) []string {
	newRoot := f.root
	if newRoot == nil {
		newRoot = newRootCmd
	}
	root := newRoot()
	var problems []string
	for _, d := range docs {
		for _, m := range inlineCommand.FindAllStringSubmatchIndex(d.text, -1) {
			text := d.text[m[2]:m[3]]
			if f.inLiterals("pdmcp " + text) {
				continue
			}
			where := fmt.Sprintf("%s:%d: `pdmcp %s`", d.name, docLineOf(d.text, m[0]), text)
			words := strings.Fields(text)
			var path []string
			i := 0
			for ; i < len(words) && !strings.HasPrefix(words[i], "-") && !strings.HasPrefix(words[i], "["); i++ {
				path = append(path, words[i])
			}
			if slices.ContainsFunc(path, func(w string) bool { return strings.ContainsAny(w, "<.…$") }) ||
				len(path) > 0 && (path[0] == "help" || path[0] == "completion") {
				continue
			}
			// `pdmcp acl grant|revoke|list` names three commands.
			var cmds []*cobra.Command
			last := []string{""}
			if len(path) > 0 {
				last = strings.Split(path[len(path)-1], "|")
				path = path[:len(path)-1]
			}
			for _, alt := range last {
				p := path
				if alt != "" {
					p = append(slices.Clone(path), alt)
				}
				c, rest, err := root.Find(p)
				switch {
				case err != nil:
					problems = append(problems, fmt.Sprintf("%s: %v", where, err))
				case len(rest) > 0 && c.HasSubCommands():
					problems = append(problems, fmt.Sprintf("%s: %s has no command %q", where, c.CommandPath(), rest[0]))
				default:
					cmds = append(cmds, c)
				}
			}
			for _, w := range words[i:] {
				w = strings.TrimPrefix(w, "[")
				if w == "--" {
					break
				}
				name, _, _ := strings.Cut(strings.TrimPrefix(w, "--"), "=")
				name = strings.TrimRight(name, "].…")
				if !strings.HasPrefix(w, "--") || name == "help" {
					continue
				}
				for _, c := range cmds {
					switch fl := lookupFlag(c, name); {
					case fl == nil:
						problems = append(problems, fmt.Sprintf("%s: %s has no flag --%s", where, c.CommandPath(), name))
					case fl.Hidden || fl.Deprecated != "":
						problems = append(problems, fmt.Sprintf("%s: --%s is an old or hidden spelling", where, name))
					}
				}
			}
		}
	}
	return problems
}

// numberWords are the counts the docs spell out.
var numberWords = map[string]int{"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
	"eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12}

var (
	toolCount = regexp.MustCompile(`(?i)\b(one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|\d+) (document |file |section |hand-off )?tools\b`)
	// toolsOffered is a count of the tools without the word: "this build
	// offers three:".
	toolsOffered = regexp.MustCompile(`(?i)\bbuild offers (one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|\d+)\b`)
	userCount    = regexp.MustCompile(`(?i)\b(?:provider with) (one|two|three|four|five|six|seven|eight|nine|ten|\d+) (?:development )?users\b|\b(one|two|three|four|five|six|seven|eight|nine|ten|\d+) development users\b`)
	// toolLike is a backticked name spelled as the tools are, with a
	// verb the tools begin with.
	toolLike = regexp.MustCompile("`((?:list|read|save|encrypt|decrypt|hand|close|get|write|delete|update)_[a-z_]+)`")
)

// notTools are names spelled like tools that are something else.
var notTools = map[string]bool{"close_reason": true}

// docCount reads a number word or digits.
func docCount(s string) int {
	if n, ok := numberWords[strings.ToLower(s)]; ok {
		return n
	}
	n, _ := strconv.Atoi(s)
	return n
}

// docLineOf is the line number of byte offset i in text.
func docLineOf(text string, i int) int { return strings.Count(text[:i], "\n") + 1 }

// checkCounts checks the tool and user counts and names the docs give.
func checkCounts(docs []docPage, f docFacts) []string {
	var problems []string
	tools := map[string]int{"": len(grant.AllTools()), "document": len(grant.DocumentTools()),
		"file": len(grant.FileTools()), "section": len(grant.FragmentTools()), "hand-off": 2}
	named := map[string]bool{}
	for _, d := range docs {
		for _, m := range toolCount.FindAllStringSubmatchIndex(d.text, -1) {
			n := docCount(d.text[m[2]:m[3]])
			kind := ""
			if m[4] >= 0 {
				kind = strings.TrimSpace(strings.ToLower(d.text[m[4]:m[5]]))
			}
			if n != tools[kind] {
				problems = append(problems, fmt.Sprintf("%s:%d: %q: this build has %d %s tools",
					d.name, docLineOf(d.text, m[0]), d.text[m[0]:m[1]], tools[kind], kind))
			}
		}
		for _, m := range toolsOffered.FindAllStringSubmatchIndex(d.text, -1) {
			if n := docCount(d.text[m[2]:m[3]]); n != tools[""] {
				problems = append(problems, fmt.Sprintf("%s:%d: %q: this build has %d tools",
					d.name, docLineOf(d.text, m[0]), d.text[m[0]:m[1]], tools[""]))
			}
		}
		for _, m := range toolLike.FindAllStringSubmatchIndex(d.text, -1) {
			name := d.text[m[2]:m[3]]
			named[name] = true
			if !grant.KnownTool(name) && !notTools[name] {
				problems = append(problems, fmt.Sprintf("%s:%d: `%s` is no tool (the tools are %s)",
					d.name, docLineOf(d.text, m[0]), name, strings.Join(grant.AllTools(), ", ")))
			}
		}
		for _, m := range userCount.FindAllStringSubmatchIndex(d.text, -1) {
			g := 2
			if m[2] < 0 {
				g = 4
			}
			if n := docCount(d.text[m[g]:m[g+1]]); n != len(f.devUsers) {
				problems = append(problems, fmt.Sprintf("%s:%d: %q: the development stack has %d users (%s)",
					d.name, docLineOf(d.text, m[0]), d.text[m[0]:m[1]], len(f.devUsers), strings.Join(f.devUsers, ", ")))
			}
		}
	}
	return problems
}

// docsDevUsers are the development users' names, as internal/devstack
// makes them.
func docsDevUsers(t *testing.T) []string {
	t.Helper()
	users := devstack.UserNames()
	if len(users) < 3 {
		t.Fatalf("internal/devstack names the users %v; has it changed?", users)
	}
	return users
}

// stringLiterals returns every string literal of the module's non-test Go
// files.
func stringLiterals(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	err := filepath.WalkDir(docsRepoRoot, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() && (e.Name() == ".git" || e.Name() == "testdata" || e.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if e.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		var s scanner.Scanner
		fset := token.NewFileSet()
		s.Init(fset.AddFile(p, -1, len(src)), src, nil, 0)
		for {
			_, tok, lit := s.Scan()
			if tok == token.EOF {
				break
			}
			if tok == token.STRING {
				if v, err := strconv.Unquote(lit); err == nil {
					out[v] = true
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func readFacts(t *testing.T) docFacts {
	t.Helper()
	return docFacts{devUsers: docsDevUsers(t), literals: stringLiterals(t)}
}

// inLiterals reports whether s is, or is part of, a string literal.
func (f docFacts) inLiterals(s string) bool {
	if f.literals[s] {
		return true
	}
	for l := range f.literals {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}

// namesFile reports whether the code names the file name: as (part of) a
// string, as the lock of a file it names (<name>.lock), or by a suffix it
// adds to a name the operator chooses (<manifest>.journal.sqlite,
// <service>-cert.pem).
func (f docFacts) namesFile(name string) bool {
	if f.inLiterals(name) {
		return true
	}
	if stem, ok := strings.CutSuffix(name, ".lock"); ok && stem != "" && f.literals[".lock"] {
		return f.namesFile(stem)
	}
	ext := path.Ext(name)
	for i := 1; i < len(name); i++ {
		if suf := name[i:]; (name[i] == '-' || name[i] == '.') && suf != ext && f.literals[suf] {
			return true
		}
	}
	return false
}

// mdTable is a Markdown table: its header cells and rows, each with the line
// it is on.
type mdTable struct {
	header []string
	rows   [][]string
	lines  []int
	// section is the nearest heading above the table.
	section string
}

func mdCells(line string) []string {
	cs := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
	for i := range cs {
		cs[i] = strings.TrimSpace(cs[i])
	}
	return cs
}

// mdTables returns text's Markdown tables.
func mdTables(text string) []mdTable {
	var out []mdTable
	lines := strings.Split(text, "\n")
	section := ""
	for i := 0; i < len(lines); i++ {
		if strings.HasPrefix(lines[i], "#") {
			section = strings.TrimSpace(strings.TrimLeft(lines[i], "#"))
		}
		if !strings.HasPrefix(lines[i], "|") || i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "| ---") {
			continue
		}
		tb := mdTable{header: mdCells(lines[i]), section: section}
		for i += 2; i < len(lines) && strings.HasPrefix(lines[i], "|"); i++ {
			tb.rows = append(tb.rows, mdCells(lines[i]))
			tb.lines = append(tb.lines, i+1)
		}
		out = append(out, tb)
	}
	return out
}

var tableCodeRE = regexp.MustCompile("`([A-Z][A-Z0-9_]+)`")

// checkCodes checks that every code in a table whose first column is
// "code" is a string the code defines, and that the "Reading a refused
// request" table of operating.md lists every adapter code the catalogue
// sends there.
func checkCodes(docs []docPage, f docFacts) []string {
	var problems []string
	for _, d := range docs {
		for _, tb := range mdTables(d.text) {
			if len(tb.header) == 0 || tb.header[0] != "code" {
				continue
			}
			listed := map[string]bool{}
			for i, row := range tb.rows {
				cell := row[0]
				for _, m := range tableCodeRE.FindAllStringSubmatch(cell, -1) {
					listed[m[1]] = true
					if !f.literals[m[1]] {
						problems = append(problems, fmt.Sprintf("%s:%d: the code %s is defined nowhere in the code", d.name, tb.lines[i], m[1]))
					}
				}
			}
			if d.name == "docs/operating.md" && tb.section == "Reading a refused request" {
				for _, e := range refusal.Catalogue() {
					if e.Doc == "operating.md" && !listed[string(e.Code)] {
						problems = append(problems, fmt.Sprintf("%s:%d: the adapter's code %s (%d) is missing from the table", d.name, tb.lines[0], e.Code, e.Status))
					}
				}
			}
		}
	}
	return problems
}

var (
	backticked = regexp.MustCompile("`([^`\n]+)`")
	fileName   = regexp.MustCompile(`^[A-Za-z0-9_.*<>-]+\.(json|jsonl|sqlite|lock|pisoft|pem)$`)
)

// chosenFiles are file names in the docs that the operator, a host or
// another program chooses: pdmcp neither writes nor looks for them by
// that name.
var chosenFiles = map[string]bool{
	"merged.json": true, "manifest-2026.json": true, "manifest-2026.json.lock": true,
	"manifest-2026.journal.sqlite": true, "gateway-ca.pem": true, "settings.json": true, "opencode.json": true,
	"cas.pem": true, "host-cas.pem": true, "audit-head.pem": true, "report.pisoft": true, "save-ff.lock": true,
	"save-00.lock": true, "pdmcp.json": true, ".mcp.json": true,
}

// checkFileNames checks that the file names the docs give as pdmcp's own
// (a backticked name ending in .json, .jsonl, .sqlite, .lock, .pisoft or
// .pem) are strings in the code: a renamed file fails here until the docs
// follow. <placeholder> and * parts are matched as the suffix after them.
func checkFileNames(docs []docPage, f docFacts) []string {
	var problems []string
	for _, d := range docs {
		for _, m := range backticked.FindAllStringSubmatchIndex(d.text, -1) {
			full := d.text[m[2]:m[3]]
			if strings.ContainsAny(full, " =") {
				continue
			}
			base := path.Base(full)
			if !fileName.MatchString(base) || chosenFiles[base] {
				continue
			}
			want := base
			if i := strings.LastIndexAny(want, ">*"); i >= 0 {
				want = want[i+1:]
			}
			if want == "" || strings.HasPrefix(want, ".") && strings.Count(want, ".") == 1 && len(want) < 6 {
				// .json, .lock: a kind, not a name.
				continue
			}
			if !f.namesFile(want) {
				problems = append(problems, fmt.Sprintf("%s:%d: `%s`: no string in the code names %q",
					d.name, docLineOf(d.text, m[0]), full, want))
			}
		}
	}
	return problems
}

// statusLine is a command's last line as the docs quote it: `SEED: OK`,
// `AUDIT-VERIFY: WHOLE`.
var statusLine = regexp.MustCompile("`([A-Z][A-Z -]*[A-Z]: (?:OK|DONE|WHOLE|BROKEN))")

// printfVerb is a verb of a format string.
var printfVerb = regexp.MustCompile(`%[-+# 0-9.]*[a-zA-Z]`)

// printed reports whether line is a string literal, or what a format
// literal prints ("ACL %s: OK\n" prints "ACL GRANT: OK").
func (f docFacts) printed(line string) bool {
	if f.inLiterals(line) {
		return true
	}
	_, tail, _ := strings.Cut(line, ": ")
	for l := range f.literals {
		// Only a format whose own words (not its verbs) name the status
		// and something before it: "%s: OK" would match any line.
		fixed := printfVerb.ReplaceAllString(strings.TrimSpace(l), "")
		if !strings.Contains(l, "%") || !strings.HasSuffix(fixed, ": "+tail) ||
			strings.Trim(strings.TrimSuffix(fixed, ": "+tail), " -") == "" {
			continue
		}
		parts := printfVerb.Split(strings.TrimSpace(l), -1)
		for i := range parts {
			parts[i] = regexp.QuoteMeta(parts[i])
		}
		if re, err := regexp.Compile(`^(?:.*\s)?` + strings.Join(parts, `\S+`) + `$`); err == nil && re.MatchString(line) {
			return true
		}
	}
	return false
}

// checkStatusLines checks that the status lines the docs quote are
// strings the commands print.
func checkStatusLines(docs []docPage, f docFacts) []string {
	var problems []string
	for _, d := range docs {
		for _, m := range statusLine.FindAllStringSubmatchIndex(d.text, -1) {
			if line := d.text[m[2]:m[3]]; !f.printed(line) {
				problems = append(problems, fmt.Sprintf("%s:%d: `%s`: no command prints it", d.name, docLineOf(d.text, m[0]), line))
			}
		}
	}
	return problems
}

// exitStatuses parses exitCodesHelp: each status and its meaning.
func exitStatuses() map[string]string {
	out := map[string]string{}
	for _, l := range strings.Split(exitCodesHelp, "\n") {
		l = strings.TrimSpace(l)
		n, meaning, ok := strings.Cut(l, "  ")
		if _, err := strconv.Atoi(n); ok && err == nil {
			out[n] = strings.TrimSpace(meaning)
		}
	}
	return out
}

// checkExitTable checks docs/operating.md's exit-status table against
// exitCodesHelp, status by status.
func checkExitTable(docs []docPage) []string {
	want := exitStatuses()
	for _, d := range docs {
		if d.name != "docs/operating.md" {
			continue
		}
		for _, tb := range mdTables(d.text) {
			if len(tb.header) < 2 || tb.header[0] != "status" || tb.header[1] != "meaning" {
				continue
			}
			var problems []string
			got := map[string]bool{}
			for i, row := range tb.rows {
				n := strings.Trim(row[0], "`")
				got[n] = true
				if w, ok := want[n]; !ok || len(row) < 2 || row[1] != w {
					problems = append(problems, fmt.Sprintf("%s:%d: exit status %s: the table says %q, pdmcp --help %q", d.name, tb.lines[i], n, row[1], w))
				}
			}
			for n := range want {
				if !got[n] {
					problems = append(problems, fmt.Sprintf("%s: exit status %s (%s) is missing from the table", d.name, n, want[n]))
				}
			}
			return problems
		}
		return []string{"docs/operating.md has no exit-status table (| status | meaning |)"}
	}
	return []string{"docs/operating.md not found"}
}

// jsonCommands are the commands that have --json, by path. A group whose
// --json is its subcommands' (acl) is not one.
func jsonCommands() []string {
	var out []string
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		group := c.HasSubCommands() && c.PersistentFlags().Lookup("json") != nil
		if !c.Hidden && !group && c.Runnable() && lookupFlag(c, "json") != nil {
			out = append(out, c.CommandPath())
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd())
	sort.Strings(out)
	return out
}

// checkJSONSection checks that docs/operating.md's "Output for scripts"
// table names exactly the commands that have --json.
func checkJSONSection(docs []docPage) []string {
	want := jsonCommands()
	for _, d := range docs {
		if d.name != "docs/operating.md" {
			continue
		}
		for _, tb := range mdTables(d.text) {
			if len(tb.header) < 2 || tb.header[0] != "command" || tb.section != "Output for scripts" {
				continue
			}
			var problems []string
			var got []string
			for i, row := range tb.rows {
				c := strings.Trim(row[0], "`")
				got = append(got, c)
				if !slices.Contains(want, c) {
					problems = append(problems, fmt.Sprintf("%s:%d: %s is listed as printing JSON; it has no --json", d.name, tb.lines[i], c))
				}
			}
			for _, c := range want {
				if !slices.Contains(got, c) {
					problems = append(problems, fmt.Sprintf("%s: %s has --json; the \"Output for scripts\" table does not list it", d.name, c))
				}
			}
			return problems
		}
		return []string{"docs/operating.md has no \"Output for scripts\" table (| command | … |)"}
	}
	return []string{"docs/operating.md not found"}
}

func reportProblems(t *testing.T, what string, problems []string) {
	t.Helper()
	if len(problems) > 0 {
		t.Errorf("%s: %d disagree with the program:\n  %s", what, len(problems), strings.Join(problems, "\n  "))
	}
}

// TestDocsCommands: every pdmcp command line in the docs' code blocks
// parses with the program's own command tree as written.
func TestDocsCommands(t *testing.T) {
	docs := readDocs(t)
	problems, checked := checkCommands(docs, docFacts{devUsers: docsDevUsers(t)})
	if checked < 40 {
		t.Errorf("checked %d command lines; the docs have more: has the code-block reader broken?", checked)
	}
	reportProblems(t, "commands in the docs' code blocks", problems)
}

// TestDocsInlineCommands: the commands and flags the docs name in running
// text exist, under their current spelling.
func TestDocsInlineCommands(t *testing.T) {
	reportProblems(t, "commands in running text", checkInline(readDocs(t), readFacts(t)))
}

// TestDocsCountsAndNames: the tool and development-user counts and names
// the docs give are the program's.
func TestDocsCountsAndNames(t *testing.T) {
	docs := readDocs(t)
	f := docFacts{devUsers: docsDevUsers(t)}
	problems := checkCounts(docs, f)
	// Every tool and every development user is named where a reader
	// meets them first.
	all := ""
	for _, d := range docs {
		all += d.text
	}
	// The tools are the server's: one golden file each under
	// server/testdata/tools.
	golden, err := filepath.Glob(filepath.Join(docsRepoRoot, "server", "testdata", "tools", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	var served []string
	for _, g := range golden {
		served = append(served, strings.TrimSuffix(filepath.Base(g), ".json"))
	}
	if want := slices.Sorted(slices.Values(grant.AllTools())); !slices.Equal(served, want) {
		t.Fatalf("server/testdata/tools holds %v; grant.AllTools() is %v", served, want)
	}
	for _, tool := range grant.AllTools() {
		if !strings.Contains(all, "`"+tool+"`") {
			problems = append(problems, fmt.Sprintf("the tool %s is named in no doc", tool))
		}
	}
	for _, d := range docs {
		if d.name != "README.md" && d.name != "docs/quickstart.md" {
			continue
		}
		for _, u := range f.devUsers {
			if !regexp.MustCompile(`\b` + u + `\b`).MatchString(d.text) {
				problems = append(problems, fmt.Sprintf("%s does not name the development user %s", d.name, u))
			}
		}
	}
	reportProblems(t, "counts and names", problems)
}

// TestDocsCodesAndFiles: the codes in the docs' code tables, the file
// names they give as pdmcp's and the status lines they quote are in the
// code.
func TestDocsCodesAndFiles(t *testing.T) {
	docs := readDocs(t)
	f := readFacts(t)
	reportProblems(t, "codes", checkCodes(docs, f))
	reportProblems(t, "file names", checkFileNames(docs, f))
	reportProblems(t, "status lines", checkStatusLines(docs, f))
}

// TestDocsExitStatusesAndJSON: docs/operating.md's exit-status table is
// pdmcp --help's, and its "Output for scripts" table lists exactly the
// commands with --json.
func TestDocsExitStatusesAndJSON(t *testing.T) {
	docs := readDocs(t)
	if len(exitStatuses()) != 5 {
		t.Fatalf("exitCodesHelp gives %v; has its shape changed?", exitStatuses())
	}
	reportProblems(t, "exit statuses", checkExitTable(docs))
	reportProblems(t, "--json", checkJSONSection(docs))
}

var (
	mdLink  = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading = regexp.MustCompile(`(?m)^#{1,6} (.+)$`)
)

// headingSlug is a heading's anchor as GitHub makes it: lower case, punctuation
// dropped, spaces as hyphens.
func headingSlug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// headingAnchors returns the anchors of a page's headings (a repeated heading's
// second anchor ends -1, and so on).
func headingAnchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	inFence := false
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			inFence = !inFence
		}
		m := heading.FindStringSubmatch(l)
		if inFence || m == nil {
			continue
		}
		a := headingSlug(strings.ReplaceAll(m[1], "`", ""))
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// checkLinks checks the docs' links to files of this repository (they
// exist) and to headings of its pages (the heading is there).
func checkLinks(docs []docPage, exists func(rel string) bool) []string {
	byName := map[string]string{}
	for _, d := range docs {
		byName[d.name] = d.text
	}
	var problems []string
	for _, d := range docs {
		for _, m := range mdLink.FindAllStringSubmatchIndex(d.text, -1) {
			target := d.text[m[2]:m[3]]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, frag, _ := strings.Cut(target, "#")
			rel := d.name
			if file != "" {
				rel = path.Clean(path.Join(path.Dir(d.name), file))
				if !exists(rel) {
					problems = append(problems, fmt.Sprintf("%s:%d: link to %s: no such file", d.name, docLineOf(d.text, m[0]), target))
					continue
				}
			}
			if frag == "" {
				continue
			}
			text, ok := byName[rel]
			if !ok {
				continue
			}
			if !headingAnchors(text)[frag] {
				problems = append(problems, fmt.Sprintf("%s:%d: link to %s: %s has no heading with that anchor", d.name, docLineOf(d.text, m[0]), target, rel))
			}
		}
	}
	return problems
}

// TestDocsLinks: every link from a page to a file of this repository or
// a heading of a page lands.
func TestDocsLinks(t *testing.T) {
	exists := func(rel string) bool {
		_, err := os.Stat(filepath.Join(docsRepoRoot, filepath.FromSlash(rel)))
		return err == nil
	}
	reportProblems(t, "links", checkLinks(readDocs(t), exists))
}

// TestDocsCheckerFindsMistakes runs the checks on a page with known
// mistakes: each must be reported, on its line, so the tests above cannot
// pass by reading nothing.
func TestDocsCheckerFindsMistakes(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "docs", "wrong.md"))
	if err != nil {
		t.Fatal(err)
	}
	d := []docPage{{name: "wrong.md", text: string(b)}}
	// The tree as it will be once a flag is renamed: the old spelling a
	// hidden alias that warns.
	withAlias := func() *cobra.Command {
		root := newRootCmd()
		g, _, err := root.Find([]string{"grant"})
		if err != nil {
			t.Fatal(err)
		}
		aliasFlag(g.Flags(), "old-out", "out", nil, "")
		return root
	}
	f := docFacts{root: withAlias, devUsers: docsDevUsers(t), literals: map[string]bool{"seed-record.json": true, "DOCUMENT_NOT_IN_GRANT": true, "SEED: OK": true, "ACL %s: OK\n": true, "pdmcp audit head v1\n": true}}
	cmds, checked := checkCommands(d, f)
	var got []string
	got = append(got, cmds...)
	got = append(got, checkCounts(d, f)...)
	got = append(got, checkCodes(d, f)...)
	got = append(got, checkFileNames(d, f)...)
	got = append(got, checkStatusLines(d, f)...)
	got = append(got, checkInline(d, f)...)
	got = append(got, checkLinks(d, func(rel string) bool { return rel == "handoff.md" })...)
	for _, want := range []string{
		"wrong.md:7: ",  // an unknown flag
		"wrong.md:9: ",  // a required flag missing
		"wrong.md:11: ", // a value of the wrong kind
		"wrong.md:13: ", // an unknown command
		"wrong.md:15: ", // no such development user
		"wrong.md:17: ", // an unknown tool in --tools
		"wrong.md:19: ", // a continued line, its second part wrong
		"wrong.md:22: ", // inside $(…)
		"wrong.md:26: ", // a wrong tool count
		"wrong.md:28: ", // a wrong user count
		"wrong.md:30: ", // a tool that does not exist
		"wrong.md:36: ", // a code defined nowhere
		"wrong.md:39: ", // a file name that is in no string
		"wrong.md:41: ", // a link to a heading the page does not have
		"wrong.md:43: ", // a link to a file that is not there
		"wrong.md:45: ", // a status line no command prints
		"wrong.md:49: ", // an old spelling of a flag
		"wrong.md:52: ", // a tool count without the word
		"wrong.md:54: ", // a flag in running text that does not exist
		"wrong.md:55: ", // an old spelling in running text
		"wrong.md:56: ", // a command in running text that does not exist
	} {
		n := 0
		for _, p := range got {
			if strings.HasPrefix(p, want) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d problems reported on %s, want 1; all: %q", n, want, got)
		}
	}
	if len(got) != 21 {
		t.Errorf("%d problems, want 21 (the right lines too were flagged?): %q", len(got), got)
	}
	if checked != 17 {
		t.Errorf("%d command lines checked, want 17", checked)
	}
}

// TestDocsShellWords pins the splitter the command check reads lines
// with.
func TestDocsShellWords(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{`pdmcp grant --manifest "a b/m.json" --out 'x y'`, []string{"pdmcp", "grant", "--manifest", "a b/m.json", "--out", "x y"}},
		{`pdmcp dev token $USER # a comment`, []string{"pdmcp", "dev", "token", "$USER"}},
		{`TOKEN=$(pdmcp dev token alice) curl x | jq .`, []string{"TOKEN=$(pdmcp dev token alice)", "curl", "x"}},
		{`pdmcp x --a "${P}b" --c <some value> 2>/dev/null --d`, []string{"pdmcp", "x", "--a", "${P}b", "--c", "<some value>", "--d"}},
		{`a\ b "q\"q" c>out`, []string{"a b", `q"q`, "c"}},
	} {
		ws, err := shellWords(tc.in)
		if err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		var got []string
		for _, w := range ws {
			got = append(got, w.text)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("shellWords(%s) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if _, err := shellWords(`pdmcp "open`); err == nil {
		t.Error("an unclosed quote was split")
	}
}
