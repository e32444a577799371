//go:build unix

package server_test

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/reference/reftest"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/testutil"
)

// BenchmarkFileEncrypt runs encrypt_file on a 16,777,215-byte file through
// the MCP client and, in the same loop, posts the same bytes to the Gateway
// through the gateway client. It reports encrypt_file's time as a ratio to
// that post (x-baseline) and the live heap's peak growth during each as a
// ratio to the file size (peak/size for encrypt_file, base-peak/size for
// the post). The reference Gateway runs in this process, so both peaks
// include its share of the work; their difference is this server's own.
func BenchmarkFileEncrypt(b *testing.B) {
	root, err := filepath.EvalSymlinks(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	f := newFixture(b, basicDocs, withFileRoot(root, false))
	ctx := context.Background()
	data := make([]byte, api.MaxDataBytes)
	for i := range data {
		data[i] = byte(i * 7)
	}
	name := filepath.Join(root, "big.bin")
	svc := f.env.Service(b, "bench", true)
	c := f.env.ServiceClient(b, svc)
	bencher := reftest.Principal(b, c, svc.Prefix+"bencher")
	owner, err := c.Mint(ctx, gateway.MintRequest{ActingAs: bencher.Name, TTL: 5 * time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	defer owner.Revoke(ctx)

	var fileTime, baseTime time.Duration
	var filePeak, basePeak uint64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		// New content each round, so each call encrypts (no replay).
		binary.BigEndian.PutUint64(data, uint64(i)+uint64(time.Now().UnixNano()))
		if err := os.WriteFile(name, data, 0o644); err != nil {
			b.Fatal(err)
		}
		_ = os.Remove(name + ".pisoft")
		b.StartTimer()

		var res *mcp.CallToolResult
		start := time.Now()
		p := testutil.HeapPeak(func() {
			res, err = f.cs.CallTool(ctx, &mcp.CallToolParams{Name: grant.ToolEncryptFile, Arguments: map[string]any{"path": "big.bin"}})
		})
		fileTime += time.Since(start)
		filePeak = max(filePeak, p)
		if err != nil || res.IsError {
			b.Fatalf("encrypt_file: %v %+v", err, res)
		}

		start = time.Now()
		p = testutil.HeapPeak(func() {
			_, err = owner.Encrypt(ctx, gateway.EncryptInput{Plaintext: data})
		})
		baseTime += time.Since(start)
		basePeak = max(basePeak, p)
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(fileTime)/float64(baseTime), "x-baseline")
	b.ReportMetric(float64(filePeak)/float64(len(data)), "peak/size")
	b.ReportMetric(float64(basePeak)/float64(len(data)), "base-peak/size")
}
