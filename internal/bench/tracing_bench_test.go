package bench

import (
	"context"
	"testing"
)

// BenchmarkRead: one 4 KiB read_protected_document through pdmcp over
// HTTPS, with tracing off and on (the traced twin of the same stack, every
// span exported to the loopback sink, flushed at the end), in both session
// modes. Everything (client, pdmcp, Gateway, provider) runs in this
// process, so allocs/op and B/op are the whole read's; compare the pairs
// of one run with benchstat. Run:
//
//	go test -run X -bench 'BenchmarkRead$' -benchmem -count 6 ./internal/bench/
func BenchmarkRead(b *testing.B) {
	ctx := context.Background()
	st, err := StartStack(ctx, StackOptions{Dir: b.TempDir(), Users: 1, MaxCallers: 2, TracedTwin: true})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	tok, err := st.Token(ctx, 0)
	if err != nil {
		b.Fatal(err)
	}
	for _, mode := range []string{SessionProtocol, StatelessProtocol} {
		for _, tc := range []struct{ name, url string }{{"off", st.MCPURL}, {"on", st.TracedURL}} {
			b.Run(mode+"/tracing="+tc.name, func(b *testing.B) {
				cs, err := st.Connect(ctx, tc.url, tok, mode)
				if err != nil {
					b.Fatal(err)
				}
				defer cs.Close()
				read := func() {
					if err := callOK(ctx, cs, "read_protected_document", readArgs()); err != nil {
						b.Fatal(err)
					}
				}
				read() // the pool's mint
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					read()
				}
				if err := st.twinTracing.Flush(ctx); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}
