package main

import (
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/grant"
)

// Why 1 over stdio: a grant that ended is renewed by writing a new one
// over it with `pdmcp grant`, and the running server serves it from the
// next call; a narrowed one refuses what it dropped at the next call, its
// session minted anew over the narrower keys.
func TestStdioGrantRenewedAndNarrowedWithoutRestart(t *testing.T) {
	s := newStack(t, "--all-approved", "--ttl", "3s")
	cs := s.connect(t)
	read := func(id string) (map[string]any, bool) {
		return call(t, cs, "read_protected_document", map[string]any{"documentId": id})
	}
	if m, e := read("evaluation-criteria"); e {
		t.Fatalf("read before expiry: %v", m)
	}
	g, err := grant.Load(s.grant)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(g.NotAfter) + 100*time.Millisecond)
	m, e := read("evaluation-criteria")
	wantRefused(t, m, e, "adapter", "GRANT_EXPIRED")

	run(t, "grant", "--manifest", s.manifest, "--out", s.grant, "--all-approved", "--ttl", "15m")
	if m, e := read("evaluation-criteria"); e {
		t.Fatalf("read after the renewal: %v", m)
	}

	mints := s.env.Gateway.Count(api.RouteScoped)
	run(t, "grant", "--manifest", s.manifest, "--out", s.grant, "--local-user", g.LocalUser,
		"--documents", "proposal-aurora", "--ttl", "15m")
	m, e = read("evaluation-criteria")
	wantRefused(t, m, e, "adapter", "DOCUMENT_NOT_IN_GRANT")
	if m, e := read("proposal-aurora"); e {
		t.Fatalf("read of the document the narrowed grant keeps: %v", m)
	}
	if s.env.Gateway.Count(api.RouteScoped) != mints+1 {
		t.Fatal("the narrowed grant's read was not served by a session minted over its keys")
	}
}
