package operator

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The test binary doubles as the child clean-env starts: with this variable
// set it prints its environment and its arguments and exits 3.
const childEnv = "PDMCP_CLEANENV_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		for _, kv := range os.Environ() {
			os.Stdout.WriteString("env " + kv + "\n")
		}
		os.Stdout.WriteString("args " + strings.Join(os.Args[1:], " ") + "\n")
		os.Exit(3)
	}
	os.Exit(m.Run())
}

// TestRunCleanPassesOnlyTheCleanEnvironment is clean-env where a process
// cannot replace itself (Windows): the child gets exactly the environment
// given, its arguments, the streams, and its exit code comes back.
func TestRunCleanPassesOnlyTheCleanEnvironment(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("ANTHROPIC_API_KEY", "sk-must-not-pass")
	t.Setenv("KEEP_ME", "kept")
	t.Setenv(childEnv, "1")
	env := CurrentCleanEnv([]string{"KEEP_ME", childEnv})
	var out, errOut bytes.Buffer
	code, err := runClean(self, []string{self, "serve", "--config", "c.json"}, env, strings.NewReader(""), &out, &errOut)
	if err != nil {
		t.Fatal(err)
	}
	if code != 3 {
		t.Fatalf("exit code %d, want the child's 3 (stderr %s)", code, errOut.String())
	}
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if kv, ok := strings.CutPrefix(l, "env "); ok {
			got = append(got, kv)
		}
	}
	if !slices.Contains(got, "KEEP_ME=kept") || !slices.Contains(got, childEnv+"=1") {
		t.Fatalf("the named variables did not reach the child: %v", got)
	}
	for _, kv := range got {
		name, _, _ := strings.Cut(kv, "=")
		if strings.EqualFold(name, "ANTHROPIC_API_KEY") {
			t.Fatalf("a model credential reached the child: %v", got)
		}
		if !slices.ContainsFunc(env, func(e string) bool { return e == kv }) && !strings.EqualFold(name, "SYSTEMROOT") {
			t.Fatalf("the child got %s, which the clean environment does not hold", name)
		}
	}
	if !strings.Contains(out.String(), "args serve --config c.json") {
		t.Fatalf("arguments not passed: %s", out.String())
	}
}

// TestLookPathWindowsRules: PATH and PATHEXT come from the clean
// environment, folders in order, extensions in PATHEXT's order; the
// current folder is not searched.
func TestLookPathWindowsRules(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	for _, f := range []string{filepath.Join(a, "tool.cmd"), filepath.Join(b, "tool.exe"), filepath.Join(b, "tool.cmd"),
		filepath.Join(b, "notes.txt")} {
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(b)
	env := []string{"Path=" + filepath.Join(a, "missing") + ";" + a + ";" + b, "PATHEXT=.EXE;.CMD"}
	tests := []struct {
		name, want string
	}{
		{"tool", filepath.Join(a, "tool.cmd")}, // a comes first on PATH
		{filepath.Join(b, "tool"), filepath.Join(b, "tool.exe")},
		{"notes", ""}, // .txt is not in PATHEXT
		{"absent", ""},
	}
	for _, tc := range tests {
		got, err := lookPathWindows(tc.name, env)
		if tc.want == "" {
			if err == nil {
				t.Errorf("lookPathWindows(%q) = %q, want not found", tc.name, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("lookPathWindows(%q) = %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
	// The current folder (b) holds tool.exe, but a PATH without b does not
	// find it there.
	if got, err := lookPathWindows("tool", []string{"PATH=" + filepath.Join(a, "missing"), "PATHEXT=.EXE"}); err == nil {
		t.Fatalf("found %q outside PATH", got)
	}
}
