package serve_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/auth/devidp"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/mcptest"
	"github.com/pdmcp/pdmcp/internal/testutil"
)

// host is an MCP host's side of one user: its tokens, refreshed before
// they end and signed in again when the provider ends the sign-in, as a
// host does; every request carries the current access token.
type host struct {
	hs       *httpStack
	user, pw string
	clock    *testutil.Clock

	mu      sync.Mutex
	access  string
	refresh string
	expiry  time.Time // on the hand-moved clock

	refreshes, signIns int
	cs                 *mcp.ClientSession
}

func (h *host) RoundTrip(r *http.Request) (*http.Response, error) {
	h.mu.Lock()
	tok := h.access
	h.mu.Unlock()
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+tok)
	return h.hs.hc.Transport.RoundTrip(r)
}

func (h *host) signIn(t *testing.T) {
	t.Helper()
	tok, err := devidp.Login(context.Background(), h.hs.hc, devidp.LoginParams{Issuer: h.hs.issuer,
		ClientID: devidp.DefaultHostClientID, RedirectURL: "http://127.0.0.1:18124/callback",
		Username: h.user, Password: h.pw, Resource: h.hs.url})
	if err != nil {
		t.Fatalf("sign in %s at %s: %v", h.user, h.clock.Now().Format(time.TimeOnly), err)
	}
	h.set(tok.AccessToken, tok.RefreshToken, int64(time.Until(tok.Expiry).Seconds()+0.5))
	h.signIns++
}

func (h *host) set(access, refresh string, expiresIn int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.access, h.refresh = access, refresh
	h.expiry = h.clock.Now().Add(time.Duration(expiresIn) * time.Second)
}

// fresh refreshes the access token when less than margin of it is left
// (on the hand-moved clock), and signs in again when the refresh is
// refused (the sign-in's lifetime ended).
func (h *host) fresh(t *testing.T, margin time.Duration) {
	t.Helper()
	if h.clock.Now().Add(margin).Before(h.expiry) {
		return
	}
	f := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {h.refresh}, "client_id": {devidp.DefaultHostClientID}}
	resp, err := h.hs.hc.PostForm(h.hs.idp.TokenEndpoint(), f)
	if err != nil {
		t.Fatalf("refresh %s: %v", h.user, err)
	}
	defer resp.Body.Close()
	var body struct {
		AccessToken  string `json:"access_token"`
		RefreshToken string `json:"refresh_token"`
		ExpiresIn    int64  `json:"expires_in"`
	}
	if resp.StatusCode != http.StatusOK {
		h.signIn(t)
		return
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || body.AccessToken == "" {
		t.Fatalf("refresh %s: %v", h.user, err)
	}
	h.set(body.AccessToken, body.RefreshToken, body.ExpiresIn)
	h.refreshes++
}

// openFDs counts this process's open descriptors; -1 where there is no
// /proc/self/fd (not Linux), and then only the other measures are compared.
func openFDs() int {
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(fds)
}

// usage is what the run holds after settling: goroutines, live heap and
// open descriptors.
type usage struct {
	goroutines, fds int
	heap            uint64
}

func settle(t *testing.T) usage {
	t.Helper()
	// Idle connections and finished goroutines are let go of first, so
	// that what is counted is what the run keeps.
	http.DefaultClient.CloseIdleConnections()
	var u usage
	for range 20 {
		runtime.GC()
		time.Sleep(50 * time.Millisecond)
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	u.goroutines, u.heap, u.fds = runtime.NumGoroutine(), ms.HeapAlloc, openFDs()
	return u
}

// Issue 33, item 8: one HTTP server through 24 hours of a hand-moved clock
// that the Gateway, the provider, the token verifier, the token exchange,
// the session pool and the grant all read. Every 10 minutes each of alice
// and bob reads a document; on the way the hosts refresh their tokens (10
// minutes each) and sign in again when the provider's 10-hour sign-in
// ends; the exchanged Gateway tokens (5 minutes) are exchanged again and
// the Gateway sessions re-minted; the grant (8 hours) is renewed every 6
// hours by writing grant.json; the provider's signing key is rotated every
// 5 hours; the audit file is rotated (renamed, then SIGHUP) every 4 hours.
// Every call must be answered, and after the day the run holds no more
// goroutines, heap or descriptors than after its first hour, within
// generous bounds.
func TestHTTPDayOfHandMovedClock(t *testing.T) {
	clock := testutil.NewClock(time.Now().Truncate(time.Second))
	hs := newHTTPStackAt(t, clock, 8, func(_ *testing.T, hs *httpStack, _ string, lo *grant.LaunchOptions) {
		lo.TTL = 8 * time.Hour
		hs.grantCheck = 20 * time.Millisecond
		hs.hangup = make(chan os.Signal, 1)
	})
	const step, day = 10 * time.Minute, 24 * time.Hour
	hosts := []*host{{hs: hs, user: "alice", pw: "pw-a", clock: clock}, {hs: hs, user: "bob", pw: "pw-b", clock: clock}}
	for _, h := range hosts {
		h.signIn(t)
		h.cs = hs.dial(t, "months-"+h.user, &http.Client{Transport: h}, nil, nil)
	}

	renewals, rotations, reopens := 0, 0, 0
	var first usage
	for i := 1; i <= int(day/step); i++ {
		clock.Advance(step)
		at := time.Duration(i) * step
		if at%(6*time.Hour) == 0 {
			g, err := grant.Launch(grant.LaunchOptions{ManifestPath: hs.manifst, AllApproved: true, CallerIdentity: true,
				TTL: 8 * time.Hour, Out: hs.st.GrantPath, Now: clock.Now()})
			if err != nil {
				t.Fatal(err)
			}
			renewals++
			testutil.WaitFor(t, "the renewed grant in force", func() bool {
				_, h := hs.healthz(t)
				m, _ := h["grant"].(map[string]any)
				return m["id"] == g.ID
			})
		}
		if at%(5*time.Hour) == 0 {
			if _, err := hs.idp.RotateKey(true); err != nil {
				t.Fatal(err)
			}
			rotations++
		}
		if at%(4*time.Hour) == 0 {
			if err := os.Rename(hs.audit, fmt.Sprintf("%s.%d", hs.audit, reopens+1)); err != nil {
				t.Fatal(err)
			}
			hs.hangup <- syscall.SIGHUP
			reopens++
			testutil.WaitFor(t, "the audit file reopened", func() bool {
				_, err := os.Stat(hs.audit)
				return err == nil
			})
		}
		for _, h := range hosts {
			h.fresh(t, step)
			m, isErr := mcptest.Call(t, h.cs, "read_protected_document", map[string]any{"documentId": "proposal-aurora"})
			if isErr {
				t.Fatalf("%s's read at +%v: %v", h.user, at, m)
			}
		}
		if at == time.Hour {
			first = settle(t)
		}
	}
	last := settle(t)
	t.Logf("after the first hour %+v, after the day %+v; renewals %d, key rotations %d, audit reopens %d",
		first, last, renewals, rotations, reopens)
	for _, h := range hosts {
		t.Logf("%s: %d refreshes, %d sign-ins", h.user, h.refreshes, h.signIns)
		if h.refreshes < 100 || h.signIns < 3 {
			t.Errorf("%s: %d refreshes and %d sign-ins; the day should have needed about 140 and 3", h.user, h.refreshes, h.signIns)
		}
	}
	// The Gateway's sessions ended and were made again along the day: the
	// service's (30 minutes) and the users' (one per exchanged token).
	counts := hs.env.Gateway.Counts()
	t.Logf("gateway requests %v", counts)
	if n := counts["/api/v1/auth/service"]; n < 40 {
		t.Errorf("%d service sign-ins over the day; its 30-minute sessions need about 48", n)
	}
	if n := counts["/api/v1/auth/scoped"]; n < 2*24 {
		t.Errorf("%d user session mints over the day; want at least one per user and hour", n)
	}
	if n := counts["/api/v1/crypto/decrypt"]; n != 2*int(day/step) {
		t.Errorf("%d decrypts at the Gateway, want one per read (%d)", n, 2*int(day/step))
	}
	if last.goroutines > first.goroutines+20 {
		t.Errorf("goroutines grew from %d to %d over the day", first.goroutines, last.goroutines)
	}
	if first.fds >= 0 && last.fds > first.fds+10 {
		t.Errorf("open descriptors grew from %d to %d over the day", first.fds, last.fds)
	}
	if last.heap > 2*first.heap+16<<20 {
		t.Errorf("live heap grew from %d to %d bytes over the day", first.heap, last.heap)
	}

	// Every rotated audit file and the current one hold lines: nothing was
	// written to a file that had been moved away and then lost.
	for n := 1; n <= reopens; n++ {
		b, err := os.ReadFile(fmt.Sprintf("%s.%d", hs.audit, n))
		if err != nil || !strings.Contains(string(b), "\n") {
			t.Errorf("rotated audit file %d: %v, %d bytes", n, err, len(b))
		}
	}
	if lines := hs.auditLines(t); len(lines) == 0 {
		t.Error("no audit lines after the last reopen")
	}
}
