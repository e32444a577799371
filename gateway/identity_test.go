package gateway_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/reference"
	"github.com/pdmcp/pdmcp/gateway/reference/reftest"
)

// TestMintRefusesAnotherPrincipal: a Gateway that answers a scoped mint
// with a session acting as someone else (another user inside the prefix,
// or a principal of another service) gets that session revoked at once;
// the mint is refused SESSION_IDENTITY_MISMATCH by the adapter, with an
// error log, and the session is never used.
func TestMintRefusesAnotherPrincipal(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	other := w.env.Service(t, "other", true)
	stranger := reftest.Principal(t, w.env.ServiceClient(t, other), other.Prefix+"stranger")
	var logs bytes.Buffer
	cc := w.svc.ClientConfig()
	cc.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	c, err := gateway.New(cc)
	if err != nil {
		t.Fatal(err)
	}
	if cc.Prefix == "" || cc.Prefix != w.svc.Prefix {
		t.Fatalf("ClientConfig carries prefix %q, config.json has %q", cc.Prefix, w.svc.Prefix)
	}
	tests := []struct {
		name, answer string
	}{
		{"another user inside the prefix", w.owner.Name},
		{"a principal outside the prefix", stranger.Name},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			logs.Reset()
			w.env.Gateway.SetFaults(reference.Faults{MintAsPrincipal: tc.answer})
			defer w.env.Gateway.SetFaults(reference.Faults{})
			w.env.Gateway.ResetCounts()
			s, err := c.Mint(ctx, gateway.MintRequest{ActingAs: w.reader.Name, Objects: []string{w.ttag}, TTL: time.Minute})
			if s != nil {
				t.Fatalf("a session acting as %s was handed out", s.ActingAs())
			}
			ae := wantRefusalCode(t, err, api.LayerAdapter, api.CodeSessionIdentityMismatch)
			if ae.Status != 502 {
				t.Errorf("status %d, want 502", ae.Status)
			}
			counts := w.env.Gateway.Counts()
			if counts[api.RouteScoped] != 1 || counts[api.RouteRevoke] != 1 || counts[api.RouteDecrypt] != 0 {
				t.Fatalf("Gateway counts %v: want one mint, its revoke, nothing else", counts)
			}
			if live, _ := w.env.Gateway.LiveScopedSessions(); live != 1 { // the world's owner session only
				t.Fatalf("%d scoped sessions live after the refusal, want 1 (the owner's)", live)
			}
			if l := logs.String(); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, api.CodeSessionIdentityMismatch) ||
				!strings.Contains(l, "answered="+tc.answer) {
				t.Fatalf("no error log naming the mismatch:\n%s", l)
			}
		})
	}

	// Without the fault the same client mints and uses the session.
	w.env.Gateway.ResetCounts()
	s, err := c.Mint(ctx, gateway.MintRequest{ActingAs: w.reader.Name, Objects: []string{w.ttag}, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if pt, err := s.Decrypt(ctx, w.ttag, w.iv, w.ct); err != nil || !bytes.Equal(pt, w.plaintext) {
		t.Fatalf("decrypt: %q, %v", pt, err)
	}
}

// TestMintChecksTheConfiguredPrefix: config.json's prefix is what sessions
// are checked against, not only what the Gateway's sign-in says.
func TestMintChecksTheConfiguredPrefix(t *testing.T) {
	w := newWorld(t)
	cc := w.svc.ClientConfig()
	cc.Prefix = "xa.elsewhere."
	c, err := gateway.New(cc)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Mint(context.Background(), gateway.MintRequest{ActingAs: w.reader.Name, Objects: []string{w.ttag}})
	wantRefusalCode(t, err, api.LayerAdapter, api.CodeSessionIdentityMismatch)
}
