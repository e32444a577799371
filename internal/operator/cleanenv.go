// Package operator holds the operator's steps around the server that are not
// the MCP surface itself: starting a process with a clean environment,
// writing host configurations, registering the service, seeding a
// synthetic data set and protecting documents. It uses server, never the
// reverse; only cmd/pdmcp, the benchmark and tests call it, so it is internal.
package operator

import (
	"os"
	"runtime"
	"sort"
	"strings"
)

// baseEnv are the variables every program needs: where to find programs,
// the home directory and the temporary directory.
var baseEnv = []string{"PATH", "HOME", "TMPDIR", "TMP", "TEMP", "USERPROFILE", "SYSTEMROOT", "LANG"}

// keptPrefixes are the families of variables a clean start keeps whole:
// OTEL_* configures the server's tracing (internal/telemetry) and carries
// no model credential.
var keptPrefixes = []string{"OTEL_"}

// CleanEnv returns the subset of environ that a clean start keeps: the base
// variables, the OTEL_* ones and those named in keep. Order is stable.
func CleanEnv(environ []string, keep []string) []string {
	want := map[string]bool{}
	for _, k := range baseEnv {
		want[k] = true
	}
	for _, k := range keep {
		want[k] = true
	}
	var out []string
	for _, kv := range environ {
		name, _, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		if want[name] || (runtime.GOOS == "windows" && want[strings.ToUpper(name)]) || keptFamily(name) {
			out = append(out, kv)
		}
	}
	sort.Strings(out)
	return out
}

func keptFamily(name string) bool {
	for _, p := range keptPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// CurrentCleanEnv is CleanEnv of this process's environment.
func CurrentCleanEnv(keep []string) []string { return CleanEnv(os.Environ(), keep) }
