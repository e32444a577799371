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

// CleanEnv returns the subset of environ that a clean start keeps: the base
// variables and those named in keep. Order is stable.
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
		if want[name] || (runtime.GOOS == "windows" && want[strings.ToUpper(name)]) {
			out = append(out, kv)
		}
	}
	sort.Strings(out)
	return out
}

// CurrentCleanEnv is CleanEnv of this process's environment.
func CurrentCleanEnv(keep []string) []string { return CleanEnv(os.Environ(), keep) }
