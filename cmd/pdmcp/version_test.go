package main

import (
	"encoding/json"
	"os/exec"
	"runtime/debug"
	"strings"
	"testing"
)

func TestReadBuildInfo(t *testing.T) {
	const rev = "0123456789abcdef0123456789abcdef01234567"
	vcs := func(modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "-buildmode", Value: "exe"}, {Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: rev}, {Key: "vcs.time", Value: "2026-12-01T10:20:30Z"},
			{Key: "vcs.modified", Value: modified}}
	}
	tests := []struct {
		name     string
		bi       *debug.BuildInfo
		ok       bool
		linked   string
		want     buildInfo
		wantText []string
	}{
		{"plain go build in a clone", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: vcs("false")}, true, "",
			buildInfo{Version: "devel-0123456789ab", Commit: rev, CommitTime: "2026-12-01T10:20:30Z", GoVersion: "go1.26.8"},
			[]string{"pdmcp devel-0123456789ab\n", "commit: " + rev + "\n", "commit date: 2026-12-01T10:20:30Z\n", "go: go1.26.8\n"}},
		{"tree with changes", &debug.BuildInfo{GoVersion: "go1.26.8", Settings: vcs("true")}, true, "",
			buildInfo{Version: "devel-0123456789ab", Commit: rev, CommitTime: "2026-12-01T10:20:30Z", Modified: true, GoVersion: "go1.26.8"},
			[]string{"commit: " + rev + " (with uncommitted changes)\n"}},
		{"module version from go install", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.4.0"}}, true, "",
			buildInfo{Version: "v1.4.0", GoVersion: "go1.26.8"},
			[]string{"pdmcp v1.4.0\n", "commit: unknown (built without version control information)\n"}},
		{"link-time version wins", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.4.0"}, Settings: vcs("false")}, true, "v2.0.0",
			buildInfo{Version: "v2.0.0", Commit: rev, CommitTime: "2026-12-01T10:20:30Z", GoVersion: "go1.26.8"},
			[]string{"pdmcp v2.0.0\n"}},
		{"no build info", nil, false, "", buildInfo{Version: "devel"}, []string{"pdmcp devel\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := readBuildInfo(tt.bi, tt.ok, tt.linked)
			if got != tt.want {
				t.Errorf("readBuildInfo = %+v, want %+v", got, tt.want)
			}
			text := got.text()
			for _, w := range tt.wantText {
				if !strings.Contains(text, w) {
					t.Errorf("text %q does not hold %q", text, w)
				}
			}
		})
	}
}

// TestVersionE2E: `pdmcp --version` and `pdmcp version --json` report the
// build info the Go tool stamped into the binary (read back with
// `go version -m`).
func TestVersionE2E(t *testing.T) {
	bin := binary(t)
	out, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatalf("go version -m: %v", err)
	}
	stamped := map[string]string{}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) == 2 && strings.HasSuffix(f[0], ":") {
			stamped["go"] = f[1]
		}
		if len(f) == 2 && f[0] == "build" {
			if k, v, ok := strings.Cut(f[1], "="); ok {
				stamped[k] = v
			}
		}
	}
	text, err := pdmcpCmd(t, "--version").Output()
	if err != nil {
		t.Fatalf("pdmcp --version: %v", err)
	}
	wantCommit := "commit: unknown"
	if rev := stamped["vcs.revision"]; rev != "" {
		wantCommit = "commit: " + rev
	}
	for _, w := range []string{"pdmcp ", wantCommit, "go: " + stamped["go"] + "\n"} {
		if !strings.Contains(string(text), w) {
			t.Errorf("pdmcp --version printed %q, no %q", text, w)
		}
	}
	raw, err := pdmcpCmd(t, "version", "--json").Output()
	if err != nil {
		t.Fatalf("pdmcp version --json: %v", err)
	}
	var b buildInfo
	if err := json.Unmarshal(raw, &b); err != nil {
		t.Fatalf("pdmcp version --json printed %q: %v", raw, err)
	}
	if b.GoVersion != stamped["go"] || b.Commit != stamped["vcs.revision"] || b.CommitTime != stamped["vcs.time"] ||
		b.Modified != (stamped["vcs.modified"] == "true") || b.Version == "" {
		t.Errorf("pdmcp version --json = %+v; stamped %v", b, stamped)
	}
	if !strings.HasPrefix(string(text), "pdmcp "+b.Version+"\n") {
		t.Errorf("--version's first line is not pdmcp %s: %q", b.Version, text)
	}
}
