//go:build unix

package operator

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// ExecClean replaces this process with argv[0], looked up on the clean
// environment's PATH, running with only the clean environment.
func ExecClean(keep []string, argv []string) error {
	path, env, err := cleanCommand(keep, argv, lookPath)
	if err != nil {
		return err
	}
	return syscall.Exec(path, argv, env)
}

// lookPath resolves name the way a shell would with env's PATH, not this
// process's.
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, dir := range filepath.SplitList(envValue(env, "PATH", false)) {
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
