package main

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/pdmcp/pdmcp/grant"
)

// runCLI runs pdmcp in this process with args and returns its exit status,
// standard output and standard error.
func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := runMain(context.Background(), args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// completions are the values `pdmcp __complete args...` offers, and its
// directive line.
func completions(t *testing.T, args ...string) ([]string, string) {
	t.Helper()
	code, out, stderr := runCLI(t, append([]string{cobra.ShellCompRequestCmd}, args...)...)
	if code != 0 {
		t.Fatalf("__complete %q: exit %d\n%s", args, code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[:len(lines)-1], lines[len(lines)-1]
}

// TestCompletion: the shell completion offers each closed set of values:
// transports, log levels and formats, host-config's formats, dev's
// providers and users, bench's figures and the grant's tools (a list:
// the ones given are kept in front and not offered again).
func TestCompletion(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"serve", "--transport", ""}, []string{"stdio", "http"}},
		{[]string{"serve", "--log-level", ""}, []string{"debug", "info", "warn", "error"}},
		{[]string{"check", "--log-format", ""}, []string{"text", "json"}},
		{[]string{"host-config", "--format", ""}, []string{"json", "codex-toml"}},
		{[]string{"dev", "--provider", ""}, []string{"dev", "keycloak"}},
		{[]string{"dev", "token", ""}, []string{"alice", "bob", "carol", "patient", "doctor"}},
		{[]string{"dev", "token", "alice", ""}, nil},
		{[]string{"bench", "--only", ""}, []string{"P1", "P2", "P3", "P4", "P5", "P6", "P7"}},
		{[]string{"bench", "--only", "P1,P3,P"}, []string{"P1,P3,P2", "P1,P3,P4", "P1,P3,P5", "P1,P3,P6", "P1,P3,P7"}},
	} {
		got, _ := completions(t, tc.args...)
		if !slices.Equal(got, tc.want) {
			t.Errorf("__complete %q = %q, want %q", tc.args, got, tc.want)
		}
	}
}

// TestCompleteTools: completeTools offers the server's tool names not yet
// in the list, after the list so far, and no space after one.
func TestCompleteTools(t *testing.T) {
	got, dir := completeTools(nil, nil, "")
	if !slices.Equal(got, grant.AllTools()) || len(got) != 9 {
		t.Fatalf("completeTools(\"\") = %q", got)
	}
	if dir&cobra.ShellCompDirectiveNoSpace == 0 || dir&cobra.ShellCompDirectiveNoFileComp == 0 {
		t.Fatalf("directive %d: want no space and no files", dir)
	}
	got, _ = completeTools(nil, nil, grant.ToolReadProtectedDocument+",save_")
	want := []string{grant.ToolReadProtectedDocument + "," + grant.ToolSaveProtectedResult,
		grant.ToolReadProtectedDocument + "," + grant.ToolSaveProtectedFragment}
	if !slices.Equal(got, want) {
		t.Fatalf("completeTools(read,save_) = %q, want %q", got, want)
	}
	got, _ = completeTools(nil, nil, grant.ToolHandOff+",hand")
	if len(got) != 0 {
		t.Fatalf("completeTools offers a tool already listed: %q", got)
	}
}
