//go:build !unix

package operator

import (
	"fmt"
	"os"
)

// ExecClean starts argv[0], looked up on the clean environment's PATH and
// PATHEXT, with only the clean environment and this process's standard
// streams, and exits with its exit code once it ends. Windows cannot
// replace a process with another, so this process waits for the child; a
// console Ctrl-C reaches both, and the child decides what it means. It
// returns only when the child could not be started.
func ExecClean(keep []string, argv []string) error {
	path, env, err := cleanCommand(keep, argv, lookPathWindows)
	if err != nil {
		return err
	}
	code, err := runClean(path, argv, env, os.Stdin, os.Stdout, os.Stderr)
	if err != nil {
		return fmt.Errorf("clean-env: %w", err)
	}
	os.Exit(code)
	return nil
}
