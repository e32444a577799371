package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/grant"
)

// Why 6: operator mistakes are refused where the operator is. host-config
// refuses, with exit 3 (2 for a file that is not there) and the reason,
// what serve would refuse at its start, as serve does;
// serve refuses a local user outside the service's prefix instead of
// starting and having the model meet ACTING_AS_REFUSED.
func TestHostConfigAndServeRefuseOperatorMistakes(t *testing.T) {
	s := newStack(t)
	sc, err := gateway.LoadServiceConfig(s.config)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, lo grant.LaunchOptions) string {
		t.Helper()
		lo.ManifestPath, lo.Out = s.manifest, filepath.Join(s.dir, name)
		if lo.TTL == 0 {
			lo.TTL = time.Hour
		}
		lo.AllApproved = true
		if _, err := grant.Launch(lo); err != nil {
			t.Fatal(err)
		}
		return lo.Out
	}
	outside := write("outside.json", grant.LaunchOptions{LocalUser: "elsewhere.agent"})
	caller := write("caller.json", grant.LaunchOptions{CallerIdentity: true})
	expired := write("expired.json", grant.LaunchOptions{LocalUser: sc.Prefix + "agent", TTL: time.Minute,
		Now: time.Now().Add(-time.Hour)})
	for _, tc := range []struct {
		name, config, grant, want string
		code                      int
	}{
		{"local user outside the prefix", s.config, outside, `does not start with "` + sc.Prefix + `"`, exitRefused},
		{"caller-identity grant", s.config, caller, "over stdio write the grant with --local-user", exitRefused},
		{"expired grant", s.config, expired, "the grant ended at", exitRefused},
		{"missing config file", filepath.Join(s.dir, "no-config.json"), s.grant, "no-config.json", exitUsage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, args := range [][]string{
				{"host-config", "--config", tc.config, "--manifest", s.manifest, "--grant", tc.grant, "--audit", s.audit},
				{"serve", "--config", tc.config, "--manifest", s.manifest, "--grant", tc.grant, "--audit", s.audit},
			} {
				cmd := pdmcpCmd(t, args...)
				var stderr strings.Builder
				cmd.Stderr = &stderr
				out, err := cmd.Output()
				if err == nil || cmd.ProcessState.ExitCode() != tc.code {
					t.Fatalf("%s: rc %d, want %d\nstdout: %s", args[0], cmd.ProcessState.ExitCode(), tc.code, out)
				}
				if !strings.Contains(stderr.String(), tc.want) {
					t.Fatalf("%s: %q does not say %q", args[0], stderr.String(), tc.want)
				}
				if args[0] == "host-config" && len(out) != 0 {
					t.Fatalf("host-config wrote a configuration: %s", out)
				}
			}
		})
	}
	if _, err := os.Stat(s.audit); err == nil {
		b, _ := os.ReadFile(s.audit)
		if strings.Contains(string(b), `"startup"`) {
			t.Fatal("a refused serve wrote a startup line")
		}
	}
}
