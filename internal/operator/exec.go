package operator

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// runClean starts path with argv and exactly env, on this process's
// standard streams, waits for it and returns its exit code. It is clean-env
// where a process cannot replace itself with another (Windows): this
// process stays only as the waiter that hands the child's exit code on.
func runClean(path string, argv, env []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	cmd := &exec.Cmd{Path: path, Args: argv, Env: env, Stdin: stdin, Stdout: stdout, Stderr: stderr}
	if env == nil {
		// A nil Env would mean "inherit everything".
		cmd.Env = []string{}
	}
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), nil
	}
	if err != nil {
		return 0, err
	}
	return 0, nil
}

// cleanCommand is what ExecClean starts: argv[0] as look finds it on the
// clean environment's path, and that environment.
func cleanCommand(keep, argv []string, look func(name string, env []string) (string, error)) (string, []string, error) {
	if len(argv) == 0 {
		return "", nil, errors.New("clean-env: no command given after --")
	}
	env := CurrentCleanEnv(keep)
	path, err := look(argv[0], env)
	if err != nil {
		return "", nil, fmt.Errorf("clean-env: %w", err)
	}
	return path, env, nil
}

// envValue is the value of name in env; names match without regard to case
// when fold is set (Windows).
func envValue(env []string, name string, fold bool) string {
	var v string
	for _, kv := range env {
		k, val, ok := strings.Cut(kv, "=")
		if ok && (k == name || (fold && strings.EqualFold(k, name))) {
			v = val
		}
	}
	return v
}

// lookPathWindows resolves name the way Windows' command lookup does with
// env's PATH and PATHEXT, not this process's: a name with a folder in it is
// taken as it is, else each PATH folder is tried in order; a name without
// an extension is tried with each PATHEXT extension. The current folder is
// not searched first (it could hold a planted program).
func lookPathWindows(name string, env []string) (string, error) {
	exts := []string{".com", ".exe", ".bat", ".cmd"}
	if pe := envValue(env, "PATHEXT", true); pe != "" {
		exts = nil
		for _, e := range strings.Split(strings.ToLower(pe), ";") {
			if e = strings.TrimSpace(e); e != "" {
				if !strings.HasPrefix(e, ".") {
					e = "." + e
				}
				exts = append(exts, e)
			}
		}
	}
	candidates := func(base string) []string {
		if filepath.Ext(base) != "" {
			return []string{base}
		}
		out := make([]string, 0, len(exts))
		for _, e := range exts {
			out = append(out, base+e)
		}
		return out
	}
	isFile := func(p string) bool {
		fi, err := os.Stat(p)
		return err == nil && fi.Mode().IsRegular()
	}
	if strings.ContainsAny(name, `/\:`) {
		for _, c := range candidates(name) {
			if isFile(c) {
				return c, nil
			}
		}
		return "", fmt.Errorf("%q not found", name)
	}
	for _, dir := range strings.Split(envValue(env, "PATH", true), ";") {
		if dir = strings.Trim(strings.TrimSpace(dir), `"`); dir == "" {
			continue
		}
		for _, c := range candidates(filepath.Join(dir, name)) {
			if isFile(c) {
				return c, nil
			}
		}
	}
	return "", fmt.Errorf("%q not found on PATH", name)
}
