package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docBenchLine finds a `go test … -bench PATTERN … ./pkg/` command in the
// docs, quoted or not, in a code block or inline.
var docBenchLine = regexp.MustCompile("go test [^`\\n]*?-bench (?:'([^']+)'|([^\\s`]+))[^`\\n]*? (\\./[\\w./-]*)")

// benchFunc finds a benchmark function's name in a test file.
var benchFunc = regexp.MustCompile(`(?m)^func (Benchmark\w*)\(b \*testing\.B\)`)

// TestDocsBenchmarks: every `go test -bench` command the docs give names a
// package that exists and a pattern that selects at least one benchmark
// in it, as go test matches the first level of a name.
func TestDocsBenchmarks(t *testing.T) {
	found := 0
	for _, page := range readDocs(t) {
		for _, m := range docBenchLine.FindAllStringSubmatchIndex(page.text, -1) {
			found++
			line := docLineOf(page.text, m[0])
			group := func(i int) string {
				if m[2*i] < 0 {
					return ""
				}
				return page.text[m[2*i]:m[2*i+1]]
			}
			pattern, pkg := group(1)+group(2), strings.TrimSuffix(group(3), "/")
			// A pipe inside a Markdown table is written \|.
			pattern = strings.ReplaceAll(pattern, `\|`, "|")
			first, _, _ := strings.Cut(pattern, "/")
			re, err := regexp.Compile(first)
			if err != nil {
				t.Errorf("%s:%d: -bench %q is not a pattern: %v", page.name, line, pattern, err)
				continue
			}
			files, _ := filepath.Glob(filepath.Join(docsRepoRoot, filepath.FromSlash(pkg), "*_test.go"))
			if len(files) == 0 {
				t.Errorf("%s:%d: %s has no tests", page.name, line, pkg)
				continue
			}
			var names []string
			for _, f := range files {
				b, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				for _, fm := range benchFunc.FindAllStringSubmatch(string(b), -1) {
					names = append(names, fm[1])
				}
			}
			matched := false
			for _, n := range names {
				matched = matched || re.MatchString(n)
			}
			if !matched {
				t.Errorf("%s:%d: -bench %q selects none of %s's benchmarks %v", page.name, line, pattern, pkg, names)
			}
		}
	}
	if found < 8 {
		t.Errorf("found %d go test -bench commands in the docs; has the checker stopped finding them?", found)
	}
}
