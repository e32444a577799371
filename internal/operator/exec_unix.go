//go:build unix

package operator

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// ExecClean replaces this process with argv[0], looked up on the clean
// environment's PATH, running with only the clean environment.
func ExecClean(keep []string, argv []string) error {
	if len(argv) == 0 {
		return errors.New("clean-env: no command given after --")
	}
	env := CurrentCleanEnv(keep)
	path, err := lookPath(argv[0], env)
	if err != nil {
		return fmt.Errorf("clean-env: %w", err)
	}
	return syscall.Exec(path, argv, env)
}

// lookPath resolves name the way a shell would with env's PATH, not this
// process's.
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	var pathVar string
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathVar = v
		}
	}
	for _, dir := range filepath.SplitList(pathVar) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%q not found on PATH", name)
}
