package bench

import (
	"context"
	"testing"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
)

// BenchmarkStatelessRead: P1's parts in one run, so that allocs/op, B/op
// and a CPU profile show what pdmcp itself costs per read in each session
// mode: pdmcp's 4 KiB read, the bare go-sdk server's call answering a copy
// of that read's result (the floor (b')), and the direct Gateway decrypt
// (a). pdmcp's own cost is pdmcp - bare-result - direct; the stateless
// mode's excess is the stateless pdmcp line minus the sessions one, less
// the same difference between the two bare lines. Run:
//
//	go test -run X -bench 'BenchmarkStatelessRead$' -benchmem -count 6 ./internal/bench/
func BenchmarkStatelessRead(b *testing.B) {
	ctx := context.Background()
	st, err := StartStack(ctx, StackOptions{Dir: b.TempDir(), Users: 1, MaxCallers: 2})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	tok, err := st.Token(ctx, 0)
	if err != nil {
		b.Fatal(err)
	}
	// The bare server answers a copy of a real read's result, as P1's.
	cs, err := st.Connect(ctx, st.MCPURL, tok, SessionProtocol)
	if err != nil {
		b.Fatal(err)
	}
	err = setBareResult(ctx, st, cs)
	cs.Close()
	if err != nil {
		b.Fatal(err)
	}

	b.Run("direct", func(b *testing.B) {
		c, err := gateway.New(st.Service.ClientConfig())
		if err != nil {
			b.Fatal(err)
		}
		if err := c.SignIn(ctx); err != nil {
			b.Fatal(err)
		}
		doc := st.Manifest.Documents[DocumentID]
		iv, ct, err := docBytes(st, doc.IV, doc.Path)
		if err != nil {
			b.Fatal(err)
		}
		s, err := c.Mint(ctx, gateway.MintRequest{ActingAs: st.Reader, Objects: []string{doc.TTag}, TTL: api.MaxScopedTTL})
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = s.Revoke(context.WithoutCancel(ctx)) }()
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.Decrypt(ctx, doc.TTag, iv, ct); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, mode := range []string{SessionProtocol, StatelessProtocol} {
		for _, tc := range []struct{ name, url, token, tool string }{
			{"pdmcp", st.MCPURL, tok, "read_protected_document"},
			{"bare-result", st.BareURL, st.BareToken, BareResultTool},
		} {
			b.Run(mode+"/"+tc.name, func(b *testing.B) {
				cs, err := st.Connect(ctx, tc.url, tc.token, mode)
				if err != nil {
					b.Fatal(err)
				}
				defer cs.Close()
				// The bare result tool takes the read's arguments (setBareResult).
				args := readArgs()
				call := func() {
					if err := callOK(ctx, cs, tc.tool, args); err != nil {
						b.Fatal(err)
					}
				}
				call() // pdmcp's pool mint
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					call()
				}
			})
		}
	}
}
