package main

import (
	"os"

	"github.com/pdmcp/pdmcp/internal/crashpoint"
)

// killAtHook is the crash hook for serve and protect: when crashEnv names a
// point, the process dies there; otherwise nil (no hook). It exists for the
// crash-recovery tests.
func killAtHook() func(crashpoint.Point) {
	at := os.Getenv(crashEnv)
	if at == "" {
		return nil
	}
	return func(point crashpoint.Point) {
		if string(point) == at {
			crashNow()
		}
	}
}

// crashNow ends this process at once, as a power cut or kill -9 would: no
// deferred function runs and nothing is flushed. The crash-point tests use
// it; it works the same on every platform (SIGKILL on Unix,
// TerminateProcess on Windows).
func crashNow() {
	if p, err := os.FindProcess(os.Getpid()); err == nil {
		_ = p.Kill()
	}
	os.Exit(137) // not reached where Kill works
}
