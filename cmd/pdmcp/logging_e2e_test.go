package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/internal/testutil"
)

// lockedBuffer collects a child's standard error while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestLogFormatJSON: with --log-format json every line the process writes
// to standard error is one JSON object with time, level and msg, including
// the lines net/http's server logs (a TLS handshake error, caused here by
// a client that does not speak TLS).
func TestLogFormatJSON(t *testing.T) {
	cmd := pdmcpCmd(t, "dev", "gateway", "--state", t.TempDir(), "--log-format", "json", "--log-level", "debug")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var got strings.Builder
	buf := make([]byte, 4096)
	for !strings.Contains(got.String(), "admin password file:") {
		n, err := stdout.Read(buf)
		if err != nil {
			t.Fatalf("dev gateway ended before printing its URL: %v (stderr %s)", err, stderr.String())
		}
		got.Write(buf[:n])
	}
	var gwURL string
	for line := range strings.Lines(got.String()) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "gateway: "); ok {
			gwURL = v
		}
	}
	u, err := url.Parse(gwURL)
	if err != nil || u.Host == "" {
		t.Fatalf("gateway URL %q: %v", gwURL, err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = conn.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	_ = conn.Close()
	testutil.WaitFor(t, "the TLS handshake error line", func() bool { return strings.Contains(stderr.String(), "TLS handshake error") })
	_ = cmd.Process.Signal(os.Interrupt)
	_ = cmd.Wait()

	lines := strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n")
	if len(lines) < 2 {
		t.Fatalf("stderr has %d lines: %q", len(lines), stderr.String())
	}
	for _, line := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("a stderr line is not JSON: %q: %v", line, err)
			continue
		}
		for _, k := range []string{"time", "level", "msg"} {
			if _, ok := rec[k]; !ok {
				t.Errorf("a stderr line has no %q: %q", k, line)
			}
		}
	}
}

// TestOperatorCommandsQuiet: an operator command prints no INFO lines
// (the Gateway sign-in and the like) unless asked with -v or --log-level;
// close-step printed its sign-in lines at INFO. acl list signs in to the
// Gateway as the service, which logs at INFO, and its Gateway requests at
// DEBUG.
func TestOperatorCommandsQuiet(t *testing.T) {
	s := newStack(t)
	for _, tc := range []struct {
		name      string
		flags     []string
		wantInfo  bool
		wantDebug bool
	}{
		{"default", nil, false, false},
		{"-v", []string{"-v"}, true, false},
		{"--log-level info", []string{"--log-level", "info"}, true, false},
		{"--log-level debug", []string{"--log-level", "debug"}, true, true},
		{"--log-level error", []string{"--log-level", "error"}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"acl", "list", "--config", s.config, "--manifest", s.manifest, "--document", "proposal-aurora"}, tc.flags...)
			cmd := pdmcpCmd(t, args...)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("pdmcp %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
			}
			if !strings.Contains(string(out), "proposal-aurora") {
				t.Errorf("no report on stdout: %s", out)
			}
			logged := stderr.String()
			if got := strings.Contains(logged, "level=INFO") && strings.Contains(logged, "gateway service signed in"); got != tc.wantInfo {
				t.Errorf("INFO sign-in line on stderr: %v, want %v:\n%s", got, tc.wantInfo, logged)
			}
			if got := strings.Contains(logged, `level=DEBUG msg="gateway request"`); got != tc.wantDebug {
				t.Errorf("DEBUG Gateway request lines on stderr: %v, want %v:\n%s", got, tc.wantDebug, logged)
			}
			if !tc.wantInfo && logged != "" {
				t.Errorf("a quiet run logged:\n%s", logged)
			}
		})
	}
}

// TestServeLogLevelDebugShowsSDKSessions: the go-sdk's per-session lines
// are DEBUG: absent by default, shown with --log-level debug.
func TestServeLogLevelDebugShowsSDKSessions(t *testing.T) {
	s := newStack(t)
	for _, tc := range []struct {
		flags []string
		want  bool
	}{{nil, false}, {[]string{"--log-level", "debug"}, true}} {
		cmd := pdmcpCmd(t, append([]string{"serve", "--config", s.config, "--manifest", s.manifest, "--grant", s.grant,
			"--audit", s.audit}, tc.flags...)...)
		var stderr lockedBuffer
		cmd.Stderr = &stderr
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		c := mcp.NewClient(&mcp.Implementation{Name: "e2e-host", Version: "1"}, nil)
		cs, err := c.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
		cancel()
		if err != nil {
			t.Fatalf("connect: %v\n%s", err, stderr.String())
		}
		if _, err := cs.ListTools(context.Background(), nil); err != nil {
			t.Fatal(err)
		}
		_ = cs.Close() // waits for the server to end
		out := stderr.String()
		if got := strings.Contains(out, `msg="server session connected"`); got != tc.want {
			t.Errorf("flags %v: the SDK's session line shown: %v, want %v:\n%s", tc.flags, got, tc.want, out)
		}
		if !strings.Contains(out, "level=INFO") {
			t.Errorf("flags %v: the server's own INFO lines are gone:\n%s", tc.flags, out)
		}
	}
}
