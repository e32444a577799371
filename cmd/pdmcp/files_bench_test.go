//go:build linux

package main

import (
	"bufio"
	"context"
	be "encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/gateway/api"
)

// procKB reads one "Name:   N kB" field of /proc/pid/status.
func procKB(b *testing.B, pid int, field string) int64 {
	b.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			var n int64
			fmt.Sscanf(strings.TrimSpace(v), "%d", &n)
			return n
		}
	}
	b.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// BenchmarkServeEncryptFileMemory measures the memory of `pdmcp serve`
// itself (a child process; the reference Gateway runs in this one) while
// it runs encrypt_file on a 16,777,215-byte file over stdio: the growth of
// its peak resident set over its resident set before the call, as a ratio
// to the file size (peak-rss/size). The resident set includes what the Go
// collector has not yet returned, so it is an upper bound on the live heap.
func BenchmarkServeEncryptFileMemory(b *testing.B) { benchServeFileMemory(b, false) }

// BenchmarkServeDecryptFileMemory is the same measurement for decrypt_file
// of that file's envelope. The envelope is written each round by a second
// `pdmcp serve` on the same state, so the measured one only decrypts (an
// encrypt there would leave it a heap the decrypt reuses unseen).
func BenchmarkServeDecryptFileMemory(b *testing.B) { benchServeFileMemory(b, true) }

func benchServeFileMemory(b *testing.B, decrypt bool) {
	s, root := newFileStack(b)
	data := make([]byte, api.MaxDataBytes)
	for i := range data {
		data[i] = byte(i * 13)
	}
	name := filepath.Join(root, "big.bin")
	ctx := context.Background()
	serve := func() (*mcp.ClientSession, int) {
		cmd := s.serveCmd(b)
		c := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
		cs, err := c.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { cs.Close() })
		return cs, cmd.Process.Pid
	}
	call := func(cs *mcp.ClientSession, tool, path string) {
		b.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"path": path}})
		if err != nil || res.IsError {
			b.Fatalf("%s %s: %v %+v", tool, path, err, res)
		}
	}
	cs, pid := serve()
	encrypter := cs
	if decrypt {
		encrypter, _ = serve()
	}
	// Warm up on a small file, so the measured calls start from a server
	// that has served one.
	if err := os.WriteFile(filepath.Join(root, "warm.txt"), []byte("warm"), 0o644); err != nil {
		b.Fatal(err)
	}
	call(encrypter, "encrypt_file", "warm.txt")
	if decrypt {
		call(cs, "decrypt_file", "warm.txt.pisoft")
	}
	var worst float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		be.BigEndian.PutUint64(data, uint64(i)+1)
		if err := os.WriteFile(name, data, 0o644); err != nil {
			b.Fatal(err)
		}
		_ = os.Remove(name + ".pisoft")
		_ = os.Remove(filepath.Join(root, "big.decrypted.bin"))
		tool, arg := "encrypt_file", "big.bin"
		if decrypt {
			call(encrypter, "encrypt_file", "big.bin")
			tool, arg = "decrypt_file", "big.bin.pisoft"
		}
		before := procKB(b, pid, "VmRSS")
		// Reset the peak resident set to the current one.
		if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
			b.Fatalf("reset the peak resident set: %v", err)
		}
		b.StartTimer()
		call(cs, tool, arg)
		b.StopTimer()
		grew := float64(procKB(b, pid, "VmHWM")-before) * 1024 / float64(len(data))
		worst = max(worst, grew)
		b.StartTimer()
	}
	b.ReportMetric(worst, "peak-rss/size")
}
