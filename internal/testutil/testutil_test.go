package testutil

import (
	"crypto/ecdsa"
	"crypto/x509"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestLogBufferConcurrent writes from many goroutines while reading (run
// with -race): every line arrives whole.
func TestLogBufferConcurrent(t *testing.T) {
	var l LogBuffer
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 100 {
				fmt.Fprintf(&l, "w%d-%d\n", i, j)
				_ = l.String()
			}
		}()
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(l.String(), "\n"), "\n")
	if len(lines) != 800 {
		t.Fatalf("%d lines, want 800", len(lines))
	}
	seen := map[string]bool{}
	for _, line := range lines {
		seen[line] = true
	}
	if len(seen) != 800 || !seen["w7-99"] {
		t.Fatalf("lines lost or torn: %d distinct", len(seen))
	}
}

// TestHeapPeakSeesALiveAllocation: a 32 MiB buffer kept alive while fn
// runs is seen; the probe reports growth, not the heap's size.
func TestHeapPeakSeesALiveAllocation(t *testing.T) {
	const size = 32 << 20
	var keep []byte
	p := HeapPeak(func() {
		keep = make([]byte, size)
		keep[size-1] = 1
	})
	if p < size {
		t.Fatalf("peak %d bytes, want at least %d", p, size)
	}
	if keep[size-1] != 1 {
		t.Fatal("unreachable")
	}
}

// TestClockMovesOnlyByHand: Now reads the start until Advance or Set.
func TestClockMovesOnlyByHand(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c := NewClock(start)
	if got := c.Now(); !got.Equal(start) {
		t.Fatalf("Now %v, want %v", got, start)
	}
	c.Advance(90 * time.Second)
	if got := c.Now(); !got.Equal(start.Add(90 * time.Second)) {
		t.Fatalf("after Advance: %v", got)
	}
	c.Set(start)
	if got := c.Now(); !got.Equal(start) {
		t.Fatalf("after Set: %v", got)
	}
}

// TestCASignsWhatItsPoolVerifies: a certificate Sign issued verifies
// against a pool of the CA alone, for server auth on 127.0.0.1.
func TestCASignsWhatItsPoolVerifies(t *testing.T) {
	ca := NewCA(t, "testutil CA")
	if !ca.Cert.IsCA || ca.Cert.Subject.CommonName != "testutil CA" {
		t.Fatalf("CA certificate: IsCA %v, CN %q", ca.Cert.IsCA, ca.Cert.Subject.CommonName)
	}
	der, key := ca.Sign(t, &x509.Certificate{
		SerialNumber: big.NewInt(2),
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(time.Minute),
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	})
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	if !leaf.PublicKey.(*ecdsa.PublicKey).Equal(&key.PublicKey) {
		t.Fatal("the certificate is not for the returned key")
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "127.0.0.1"}); err != nil {
		t.Fatalf("verify against the CA: %v", err)
	}
}

// failRecorder is a testing.TB that records a failure instead of ending
// the test, so Golden's own failure can be asserted.
type failRecorder struct {
	testing.TB
	failed bool
}

func (f *failRecorder) Helper()               {}
func (f *failRecorder) Errorf(string, ...any) { f.failed = true }
func (f *failRecorder) Fatalf(string, ...any) { f.failed = true }

// TestGolden: with PDMCP_UPDATE_GOLDEN set the file is written and then
// matches; without it, other bytes fail and the file stays as it was.
func TestGolden(t *testing.T) {
	path := filepath.Join(t.TempDir(), "testdata", "x.golden")
	t.Setenv(UpdateGoldenEnv, "1")
	Golden(t, path, []byte("one\n"))
	t.Setenv(UpdateGoldenEnv, "")
	Golden(t, path, []byte("one\n"))
	rec := &failRecorder{TB: t}
	Golden(rec, path, []byte("two\n"))
	if !rec.failed {
		t.Error("other bytes than the golden file's passed")
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "one\n" {
		t.Errorf("golden file after a failed compare: %q, %v", b, err)
	}
	missing := &failRecorder{TB: t}
	Golden(missing, filepath.Join(t.TempDir(), "none.golden"), nil)
	if !missing.failed {
		t.Error("a missing golden file passed")
	}
}

// TestSelfSignedIsSignedByItsKey: the certificate is for key and its
// signature checks against itself.
func TestSelfSignedIsSignedByItsKey(t *testing.T) {
	key := NewKey(t)
	c := SelfSigned(t, &x509.Certificate{SerialNumber: big.NewInt(3), NotBefore: time.Now(), NotAfter: time.Now().Add(time.Minute)}, key)
	if !c.PublicKey.(*ecdsa.PublicKey).Equal(&key.PublicKey) {
		t.Fatal("the certificate is not for the given key")
	}
	if err := c.CheckSignature(c.SignatureAlgorithm, c.RawTBSCertificate, c.Signature); err != nil {
		t.Fatalf("signature: %v", err)
	}
}

// TestWaitForReturnsOnceTheConditionHolds: cond is polled until it holds.
func TestWaitForReturnsOnceTheConditionHolds(t *testing.T) {
	n := 0
	WaitFor(t, "the third poll", func() bool { n++; return n == 3 })
	if n != 3 {
		t.Fatalf("polled %d times, want 3", n)
	}
}
