package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/operator"
)

// acl runs `pdmcp acl` with args on the stack's config and manifest and
// returns stdout, stderr and whether it succeeded.
func (s *stack) acl(t *testing.T, args ...string) (string, string, bool) {
	t.Helper()
	cmd := pdmcpCmd(t, append(append([]string{"acl"}, args...), "--config", s.config, "--manifest", s.manifest)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	return string(out), stderr.String(), err == nil
}

// aclList is `pdmcp acl list --json` on the key the args name.
func (s *stack) aclList(t *testing.T, args ...string) *operator.ACLReport {
	t.Helper()
	out, stderr, ok := s.acl(t, append([]string{"list", "--json"}, args...)...)
	if !ok {
		t.Fatalf("acl list: %s", stderr)
	}
	var rep operator.ACLReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("acl list --json: %v\n%s", err, out)
	}
	return &rep
}

func rightsOf(rep *operator.ACLReport, principal string) string {
	for _, e := range rep.Entries {
		if e.Principal == principal {
			return strings.Join(e.Rights, ",")
		}
	}
	return ""
}

// TestACLGrantOpensASectionAndRevokeClosesIt is scenario 2 of issue 33:
// after pdmcp protect, the agent is refused every section; pdmcp acl grant
// on the results data type opens the results section to it (through the
// same running server), list shows the entry, and revoke takes it back.
func TestACLGrantOpensASectionAndRevokeClosesIt(t *testing.T) {
	s := newCompoundStack(t)
	rec, err := grant.LoadSeedRecord(s.record())
	if err != nil {
		t.Fatal(err)
	}
	agent := rec.AgentUser
	cs := s.connect(t)
	results := map[string]any{"documentId": "ccd-0001", "fragmentId": "results"}
	got, isErr := call(t, cs, "read_protected_fragment", results)
	wantRefused(t, got, isErr, "keyserver", "ACL_DENIED")

	out, stderr, ok := s.acl(t, "grant", "--data-type", "results", "--principal", agent, "--rights", "read")
	if !ok {
		t.Fatalf("acl grant: %s %s", out, stderr)
	}
	if !strings.Contains(out, "data type results: "+agent+" none -> READ (changed; read back)") || !strings.HasSuffix(out, "ACL GRANT: OK\n") {
		t.Fatalf("acl grant printed:\n%s", out)
	}
	m, err := grant.LoadManifest(s.manifest)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range m.CompoundKeys {
		if strings.Contains(out+stderr, k) {
			t.Fatal("acl grant printed a t-Tag")
		}
	}
	got, isErr = call(t, cs, "read_protected_fragment", results)
	if isErr || !strings.Contains(got["text"].(string), "Hemoglobin A1c") {
		t.Fatalf("results after the grant: %v", got)
	}
	// Another data type stays closed.
	got, isErr = call(t, cs, "read_protected_fragment", map[string]any{"documentId": "ccd-0001", "fragmentId": "allergies"})
	wantRefused(t, got, isErr, "keyserver", "ACL_DENIED")

	if r := rightsOf(s.aclList(t, "--data-type", "results"), agent); r != "READ" {
		t.Fatalf("list after the grant: agent holds %q", r)
	}
	// Granting what is held sends no change.
	changes := s.env.Gateway.Count(api.RouteACLGrant) + s.env.Gateway.Count(api.RouteACLUpdate)
	out, stderr, ok = s.acl(t, "grant", "--data-type", "results", "--principal", agent, "--rights", "READ")
	if !ok || !strings.Contains(out, "READ -> READ (unchanged") {
		t.Fatalf("second grant: %s %s", out, stderr)
	}
	// WRITE is added to the entry, READ kept.
	out, stderr, ok = s.acl(t, "grant", "--data-type", "results", "--principal", agent, "--rights", "WRITE")
	if !ok || !strings.Contains(out, "READ -> READ,WRITE (changed") {
		t.Fatalf("grant WRITE: %s %s", out, stderr)
	}
	if n := s.env.Gateway.Count(api.RouteACLGrant) + s.env.Gateway.Count(api.RouteACLUpdate) - changes; n != 1 {
		t.Errorf("two grants sent %d changes, want 1 (the first held already)", n)
	}
	// Taking WRITE away keeps READ.
	out, stderr, ok = s.acl(t, "revoke", "--data-type", "results", "--principal", agent, "--rights", "WRITE")
	if !ok || !strings.Contains(out, "READ,WRITE -> READ (changed") {
		t.Fatalf("revoke WRITE: %s %s", out, stderr)
	}
	got, isErr = call(t, cs, "read_protected_fragment", results)
	if isErr {
		t.Fatalf("results after WRITE was revoked: %v", got)
	}

	out, stderr, ok = s.acl(t, "revoke", "--data-type", "results", "--principal", agent)
	if !ok || !strings.Contains(out, "READ -> none (changed; read back)") || !strings.HasSuffix(out, "ACL REVOKE: OK\n") {
		t.Fatalf("acl revoke: %s %s", out, stderr)
	}
	got, isErr = call(t, cs, "read_protected_fragment", results)
	wantRefused(t, got, isErr, "keyserver", "ACL_DENIED")
	if r := rightsOf(s.aclList(t, "--data-type", "results"), agent); r != "" {
		t.Fatalf("list after the revoke: agent holds %q", r)
	}
	// Revoking again is safe and sends nothing.
	revokes := s.env.Gateway.Count(api.RouteACLRevoke)
	if out, stderr, ok = s.acl(t, "revoke", "--data-type", "results", "--principal", agent); !ok || !strings.Contains(out, "none -> none (unchanged") {
		t.Fatalf("second revoke: %s %s", out, stderr)
	}
	if s.env.Gateway.Count(api.RouteACLRevoke) != revokes {
		t.Error("a revoke with no entry reached the key server")
	}
}

// TestACLOnDocumentAndList: a single document's key, by its manifest id.
// The list names each principal; the owner holds OWNER.
func TestACLOnDocumentAndList(t *testing.T) {
	s := newStack(t)
	rec, err := grant.LoadSeedRecord(s.record())
	if err != nil {
		t.Fatal(err)
	}
	cs := s.connect(t)
	// A document the seed gave the agent: revoke, see it refused, grant,
	// see it read.
	doc := map[string]any{"documentId": "proposal-aurora"}
	if _, isErr := call(t, cs, "read_protected_document", doc); isErr {
		t.Fatal("the agent cannot read proposal-aurora before any change")
	}
	rep := s.aclList(t, "--document", "proposal-aurora")
	if rightsOf(rep, rec.AgentUser) != "READ" || rightsOf(rep, rec.OwnerUser) == "" {
		t.Fatalf("list: %+v", rep.Entries)
	}
	if _, stderr, ok := s.acl(t, "revoke", "--document", "proposal-aurora", "--principal", rec.AgentUser); !ok {
		t.Fatal(stderr)
	}
	got, isErr := call(t, cs, "read_protected_document", doc)
	wantRefused(t, got, isErr, "keyserver", "ACL_DENIED")
	out, stderr, ok := s.acl(t, "grant", "--document", "proposal-aurora", "--principal", rec.AgentUser, "--rights", "READ")
	if !ok {
		t.Fatal(stderr)
	}
	if !strings.Contains(out, "PRINCIPAL") || !strings.Contains(out, rec.AgentUser) {
		t.Fatalf("grant's read-back table:\n%s", out)
	}
	if got, isErr = call(t, cs, "read_protected_document", doc); isErr {
		t.Fatalf("read after the grant: %v", got)
	}

	// list --principal names the principal's ids, as a hand-off step's
	// "to" needs them, with an entry or without one.
	rep = s.aclList(t, "--document", "proposal-aurora", "--principal", rec.AgentUser)
	var agentEntry operator.ACLEntry
	for _, e := range rep.Entries {
		if e.Principal == rec.AgentUser {
			agentEntry = e
		}
	}
	if rep.Principal != rec.AgentUser || rep.SystemID == 0 || rep.SystemID != agentEntry.SystemID ||
		rep.PrincipalID != agentEntry.PrincipalID || strings.Join(rep.After, ",") != "READ" {
		t.Fatalf("list --principal: %+v", rep)
	}
	rep = s.aclList(t, "--document", "proposal-equinox", "--principal", rec.AgentUser)
	if rep.SystemID != agentEntry.SystemID || rep.PrincipalID != agentEntry.PrincipalID || len(rep.After) != 0 {
		t.Fatalf("list --principal on a key the agent has no entry on: %+v", rep)
	}
	out = run(t, "acl", "list", "--document", "proposal-equinox", "--principal", rec.AgentUser, "--config", s.config, "--manifest", s.manifest)
	if !strings.Contains(out, "document proposal-equinox: "+rec.AgentUser+" holds none") ||
		!strings.Contains(out, fmt.Sprintf("principal %s: systemId %d, principalId %s", rec.AgentUser, rep.SystemID, rep.PrincipalID)) ||
		!strings.HasSuffix(out, "ACL LIST: OK\n") {
		t.Fatalf("acl list --principal printed:\n%s", out)
	}
}

// TestACLRefusalsSendNothing: a key the manifest does not name, a
// principal the Gateway does not know, the owner itself, or rights that are
// not READ or WRITE are refused with a message naming the mistake; none
// changes or reads a key's entries at the Gateway, and the first ones send
// nothing at all.
func TestACLRefusalsSendNothing(t *testing.T) {
	s := newCompoundStack(t)
	rec, err := grant.LoadSeedRecord(s.record())
	if err != nil {
		t.Fatal(err)
	}
	agent := rec.AgentUser
	for _, c := range []struct {
		name   string
		args   []string
		code   int
		want   string
		silent bool // nothing at all reaches the Gateway
	}{
		{"unknown document", []string{"grant", "--document", "nope", "--principal", agent, "--rights", "READ"}, exitRefused, `no document "nope"`, true},
		{"compound document", []string{"grant", "--document", "ccd-0001", "--principal", agent, "--rights", "READ"}, exitRefused, "name one with --data-type", true},
		{"unknown data type", []string{"grant", "--data-type", "genome", "--principal", agent, "--rights", "READ"}, exitRefused, `no data type "genome"; it has allergies`, true},
		{"unknown destination", []string{"list", "--destination", "nope"}, exitRefused, `no destination "nope"`, true},
		{"two keys", []string{"list", "--data-type", "results", "--document", "proposal-aurora"}, exitUsage, "name exactly one key: --document, --data-type or --destination (got 2)", true},
		{"no key", []string{"list"}, exitUsage, "name exactly one key", true},
		{"owner right", []string{"grant", "--data-type", "results", "--principal", agent, "--rights", "OWNER"}, exitUsage, "--rights OWNER: OWNER is not given", true},
		{"bad right", []string{"grant", "--data-type", "results", "--principal", agent, "--rights", "READ,DELETE"}, exitUsage, `"DELETE" is not a right`, true},
		{"no principal", []string{"grant", "--data-type", "results", "--rights", "READ"}, exitUsage, "pdmcp acl grant: --principal is required (the grantee, as the Gateway names it)", true},
		{"the owner", []string{"revoke", "--data-type", "results", "--principal", rec.OwnerUser}, exitRefused, "is the key's owner", true},
		{"unknown principal", []string{"grant", "--data-type", "results", "--principal", agent + "-nobody", "--rights", "READ"}, exitRefused, "no principal named " + agent + "-nobody", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := s.env.Gateway.Counts()
			code, out, stderr := runCLI(t, append(append([]string{"acl"}, c.args...), "--config", s.config, "--manifest", s.manifest)...)
			if code != c.code || !strings.Contains(stderr, c.want) {
				t.Fatalf("want exit %d saying %q; exit %d stdout %s stderr %s", c.code, c.want, code, out, stderr)
			}
			after := s.env.Gateway.Counts()
			if c.silent && !maps.Equal(before, after) {
				t.Errorf("reached the Gateway: before %v, after %v", before, after)
			}
			for _, r := range []string{api.RouteScoped, api.RouteACLGet, api.RouteACLGrant, api.RouteACLUpdate, api.RouteACLRevoke} {
				if after[r] != before[r] {
					t.Errorf("%s was sent", r)
				}
			}
		})
	}
	if r := rightsOf(s.aclList(t, "--data-type", "results"), agent); r != "" {
		t.Fatalf("after the refusals the agent holds %q on results", r)
	}

	// A bounded entry (as a hand-off step makes) is not widened into a
	// permanent one.
	ctx := context.Background()
	m, err := grant.LoadManifest(s.manifest)
	if err != nil {
		t.Fatal(err)
	}
	c, _, owner := s.asOwner(ctx, t, m.CompoundKeys["problems"])
	p, err := c.GetPrincipal(ctx, agent)
	if err != nil {
		t.Fatal(err)
	}
	end := time.Now().Add(time.Hour)
	if err := owner.ACLGrant(ctx, api.ACLGrantRequest{TTag: m.CompoundKeys["problems"], SystemID: p.SystemID, PrincipalID: p.PrincipalID,
		Rights: []string{api.RightRead}, EndTime: &end}); err != nil {
		t.Fatal(err)
	}
	_ = owner.Revoke(ctx)
	updates := s.env.Gateway.Count(api.RouteACLUpdate)
	if _, stderr, ok := s.acl(t, "grant", "--data-type", "problems", "--principal", agent, "--rights", "WRITE"); ok || !strings.Contains(stderr, "bounded entry") {
		t.Fatalf("grant over a bounded entry: ok=%v %s", ok, stderr)
	}
	if s.env.Gateway.Count(api.RouteACLUpdate) != updates {
		t.Error("the bounded entry was changed")
	}
	rep := s.aclList(t, "--data-type", "problems")
	for _, e := range rep.Entries {
		if e.Principal == agent && (e.EndTime == nil || strings.Join(e.Rights, ",") != "READ") {
			t.Fatalf("the bounded entry reads back %+v", e)
		}
	}
}
