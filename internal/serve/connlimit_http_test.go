package serve_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/internal/abuse"
)

// The stack's connection limits in these tests: 16 unauthenticated
// connections, 8 signed in, 4 per user; a header timeout long enough that
// the stalled connections are still held when alice calls, and a short
// body timeout.
const smallConnections = `,"connections":{"max":24,"signedIn":8,"signedInPerUser":4,"headerTimeoutSeconds":10},"bodyTimeoutSeconds":2`

const anonCap = 16

func (hs *httpStack) roots(t *testing.T) *x509.CertPool {
	t.Helper()
	pem, err := os.ReadFile(hs.caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatal("the stack's CA file holds no certificate")
	}
	return pool
}

// attack starts a hostile local client against the stack, closed when
// the test ends.
func (hs *httpStack) attack(t *testing.T, kind abuse.Kind, count int, token string) *abuse.Attack {
	t.Helper()
	a, err := abuse.Start(context.Background(), abuse.Config{URL: hs.url, RootCAs: hs.roots(t), Kind: kind, Count: count, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return a
}

// countingClient is an HTTP/1.1 client of the stack with at most one
// connection, counting the connections it opens.
func (hs *httpStack) countingClient() (*http.Client, *atomic.Int64) {
	var dials atomic.Int64
	tr := hs.hc.Transport.(*http.Transport).Clone()
	tr.TLSClientConfig = tr.TLSClientConfig.Clone()
	tr.TLSClientConfig.NextProtos = []string{"http/1.1"}
	tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	tr.MaxConnsPerHost = 1
	d := &net.Dialer{Timeout: 10 * time.Second}
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return d.DialContext(ctx, network, addr)
	}
	return &http.Client{Transport: tr, Timeout: time.Minute}, &dials
}

// readAurora has hc read a document as a 2026-07-28 host does and fails the
// test unless the document's text comes back.
func (hs *httpStack) readAurora(t *testing.T, hc *http.Client, token, what string) {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"read_protected_document","arguments":{"documentId":"proposal-aurora"},` + newMeta + `}}`
	req, _ := http.NewRequest("POST", hs.url, strings.NewReader(body))
	for k, v := range map[string]string{"Authorization": "Bearer " + token, "Content-Type": "application/json",
		"Accept": "application/json, text/event-stream", "Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call",
		"Mcp-Name": "read_protected_document"} {
		req.Header.Set(k, v)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var m struct {
		Result *struct {
			IsError bool `json:"isError"`
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		} `json:"result"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(b, &m) != nil || m.Result == nil || m.Result.IsError || len(m.Result.Content) == 0 {
		t.Fatalf("%s: %d %.300s", what, resp.StatusCode, b)
	}
}

// metricSeries reads one labelled value from /metrics (-1, and the test
// marked failed, when absent).
func (hs *httpStack) metricSeries(t *testing.T, series string) float64 {
	t.Helper()
	v, ok := hs.scrape(t, series)
	if !ok {
		t.Errorf("/metrics has no %s", series)
		return -1
	}
	return v
}

const (
	anonSeries    = `pdmcp_http_connections{state="unauthenticated"}`
	signedSeries  = `pdmcp_http_connections{state="signed-in"}`
	evictedSeries = `pdmcp_http_connections_evicted_total`
)

// TestHTTPStalledConnectionsDoNotKeepUsersOut is issue 31's scenario 1 as
// a hostile local program plays it: connections that shake hands and send
// `POST /mcp` headers announcing 200,000 bytes and then nothing, with more
// that stall in the headers and in the handshake, beyond the connection
// cap. While they are held, alice's calls go through, on the connection
// she already had and on a fresh one; the server never holds more
// unauthenticated connections than its cap, and closes every stalled
// connection itself: to make room for newer ones, or at their deadlines
// (a stalled body after a 401 and a second's grace; see
// TestHTTPRefusedBodyIsNotWaitedFor).
func TestHTTPStalledConnectionsDoNotKeepUsersOut(t *testing.T) {
	hs := newHTTPStack(t, 8, withHTTPConfig(smallConnections))
	tok := hs.token(t, "alice", "pw-a")
	kept, dials := hs.countingClient()
	hs.readAurora(t, kept, tok, "alice before the attack")

	bodies := hs.attack(t, abuse.StalledBody, 3*anonCap, "")
	headers := hs.attack(t, abuse.StalledHeaders, 2*anonCap, "")
	handshakes := hs.attack(t, abuse.StalledHandshake, anonCap, "")
	if n := hs.metricSeries(t, anonSeries); n > anonCap {
		t.Errorf("%v unauthenticated connections open, over the cap of %d", n, anonCap)
	}
	if hs.metricSeries(t, evictedSeries) < 1 {
		t.Error("no stalled connection was closed to admit a newer one")
	}

	// Top the stalled connections up to the cap, then call: the fresh
	// connection takes the oldest stalled one's place.
	top := hs.attack(t, abuse.StalledHeaders, anonCap, "")
	evicted := hs.metricSeries(t, evictedSeries)
	hs.readAurora(t, kept, tok, "alice on her kept connection while stalled connections fill the cap")
	if n := dials.Load(); n != 1 {
		t.Errorf("alice's client opened %d connections; her first was closed", n)
	}
	fresh, _ := hs.countingClient()
	hs.readAurora(t, fresh, tok, "alice on a fresh connection while stalled connections fill the cap")
	if after := hs.metricSeries(t, evictedSeries); after <= evicted {
		t.Errorf("evictions %v then %v: alice's fresh connection did not take a stalled one's place", evicted, after)
	}
	if n := hs.metricSeries(t, signedSeries); n != 2 {
		t.Errorf("%v signed-in connections, want alice's 2", n)
	}

	// Every stalled connection ends, closed by the server: none is given
	// up by the attacker (each is held for up to two minutes).
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for _, a := range []struct {
		name string
		a    *abuse.Attack
	}{{"stalled bodies", bodies}, {"stalled headers", headers}, {"stalled handshakes", handshakes}, {"the top-up", top}} {
		if !a.a.Wait(ctx) {
			t.Errorf("%s: %d opened, %d could not be, %d closed by the server", a.name, a.a.Opened(), a.a.Failed(), a.a.ServerClosed())
		}
	}
	hs.readAurora(t, kept, tok, "alice after the attack")
	// The stalled and evicted handshakes are counted, not logged one by
	// one: a flood of them must not bury the log.
	log := hs.stderr.String()
	if n := strings.Count(log, "TLS handshake error"); n > 0 {
		t.Errorf("%d failed handshakes logged one by one", n)
	}
	if n := strings.Count(log, "TLS handshakes failed"); n > 2 {
		t.Errorf("%d lines for failed handshakes in one test, want at most one a minute", n)
	}
}

// TestHTTPSignedInReservePerUser: one user's connections take at most
// signedInPerUser places of the signed-in reserve; the rest of them are
// served as unauthenticated ones, and the reserve's other places stay
// for other users.
func TestHTTPSignedInReservePerUser(t *testing.T) {
	hs := newHTTPStack(t, 8, withHTTPConfig(smallConnections))
	carol := hs.token(t, "carol", "pw-c")
	for i := range 6 {
		hc, _ := hs.countingClient()
		defer hc.CloseIdleConnections()
		resp, body := hs.postNewWith(t, hc, carol, `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{`+newMeta+`}}`)
		if resp.StatusCode != 200 {
			t.Fatalf("carol's connection %d: %d %.200s", i+1, resp.StatusCode, body)
		}
	}
	if n := hs.metricSeries(t, signedSeries); n != 4 {
		t.Errorf("%v signed-in connections, want carol's 4 (signedInPerUser)", n)
	}
	if n := hs.metricSeries(t, anonSeries); n != 2 {
		t.Errorf("%v unauthenticated connections, want carol's other 2", n)
	}
	alice, _ := hs.countingClient()
	hs.readAurora(t, alice, hs.token(t, "alice", "pw-a"), "alice beside carol's connections")
	if n := hs.metricSeries(t, signedSeries); n != 5 {
		t.Errorf("%v signed-in connections after alice's call, want 5", n)
	}
}

// postNewWith posts one 2026-07-28 message with token over hc.
func (hs *httpStack) postNewWith(t *testing.T, hc *http.Client, token, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", hs.url, strings.NewReader(body))
	var m struct {
		Method string `json:"method"`
	}
	_ = json.Unmarshal([]byte(body), &m)
	for k, v := range map[string]string{"Authorization": "Bearer " + token, "Content-Type": "application/json",
		"Accept": "application/json, text/event-stream", "Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": m.Method} {
		req.Header.Set(k, v)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp, string(b)
}

// TestHTTPRefusedBodyIsNotWaitedFor: a request refused before its body is
// read (no token) is answered, and its connection closed, without the
// server waiting for the 200,000 bytes announced; a host that did send its
// body keeps its connection after the 401 (its first request has no token
// and must read the challenge).
func TestHTTPRefusedBodyIsNotWaitedFor(t *testing.T) {
	hs := newHTTPStack(t, 4)
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", strings.TrimSuffix(strings.TrimPrefix(hs.url, "https://"), "/mcp"),
		&tls.Config{RootCAs: hs.roots(t), NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	fmt.Fprintf(c, "POST /mcp HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 200000\r\n\r\n", c.RemoteAddr())
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer: %v (the server is waiting for the body)", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !resp.Close || !strings.Contains(resp.Header.Get("WWW-Authenticate"), "resource_metadata") {
		t.Errorf("answer %d, close %v, challenge %q; want 401 with its challenge and the connection closed",
			resp.StatusCode, resp.Close, resp.Header.Get("WWW-Authenticate"))
	}
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("after the answer: %v, want the server to have closed", err)
	}

	hc, dials := hs.countingClient()
	for i := range 2 {
		resp, err := hc.Post(hs.url, "application/json", strings.NewReader(initBody))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("request %d without a token: %d", i+1, resp.StatusCode)
		}
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("a host that sent its bodies needed %d connections for two refusals, want 1", n)
	}
}

// TestHTTPStalledSignedInBodyIsCutOff: a body announced with a valid token
// and never sent is cut off at the body deadline (408), not waited for,
// and its connection closed.
func TestHTTPStalledSignedInBodyIsCutOff(t *testing.T) {
	hs := newHTTPStack(t, 4, withHTTPConfig(smallConnections))
	a := hs.attack(t, abuse.StalledBody, 4, hs.token(t, "carol", "pw-c"))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if !a.Wait(ctx) || a.Answered() != a.Opened() || a.Opened() != 4 {
		t.Fatalf("%d opened, %d answered, %d closed by the server; want 4 of each", a.Opened(), a.Answered(), a.ServerClosed())
	}
}

// TestHTTPHeadersAreBounded: a header block over 32 KiB is refused 431
// before the token is looked at.
func TestHTTPHeadersAreBounded(t *testing.T) {
	hs := newHTTPStack(t, 4)
	req, _ := http.NewRequest("POST", hs.url, strings.NewReader(initBody))
	req.Header.Set("X-Padding", strings.Repeat("p", 40<<10))
	resp, err := hs.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("40 KiB of headers: %d, want 431", resp.StatusCode)
	}
}

// TestHTTPTLS12OffersAEADOnly: a TLS 1.2 client offering only the CBC
// suites with SHA-1 cannot shake hands with the MCP endpoint; one offering
// AES-GCM can.
func TestHTTPTLS12OffersAEADOnly(t *testing.T) {
	hs := newHTTPStack(t, 4)
	addr := strings.TrimSuffix(strings.TrimPrefix(hs.url, "https://"), "/mcp")
	for _, tc := range []struct {
		name   string
		suites []uint16
		ok     bool
	}{
		{"CBC with SHA-1", []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA,
			tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA, tls.TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA}, false},
		{"AES-GCM", []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256}, true},
	} {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, &tls.Config{RootCAs: hs.roots(t),
			MinVersion: tls.VersionTLS12, MaxVersion: tls.VersionTLS12, CipherSuites: tc.suites})
		if err == nil {
			c.Close()
		}
		var op *net.OpError
		switch {
		case tc.ok && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case !tc.ok && (err == nil || !errors.As(err, &op) || op.Op != "remote error"):
			t.Errorf("%s: %v, want the server's handshake alert", tc.name, err)
		}
	}
}

// TestHTTPOperationsEndpointsCheckHost: /healthz and /metrics answer only
// requests whose Host names the operations listener (a page of another
// site whose name resolves to 127.0.0.1 learns nothing) and that come from
// no other site's page.
func TestHTTPOperationsEndpointsCheckHost(t *testing.T) {
	hs := newHTTPStack(t, 4)
	_, port, err := net.SplitHostPort(strings.TrimPrefix(hs.opsURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path, host, origin string
		want               int
	}{
		{"/healthz", "127.0.0.1:" + port, "", 200},
		{"/metrics", "localhost:" + port, "", 200},
		{"/healthz", "[::1]:" + port, "", 200},
		{"/healthz", "rebound.example:" + port, "", 403},
		{"/metrics", "rebound.example:" + port, "", 403},
		{"/metrics", "rebound.example", "", 403},
		{"/healthz", "127.0.0.1:1", "", 403},
		{"/healthz", "127.0.0.1:" + port, "http://rebound.example:" + port, 403},
		{"/healthz", "127.0.0.1:" + port, "http://127.0.0.1:" + port, 200},
	} {
		req, _ := http.NewRequest("GET", hs.opsURL+tc.path, nil)
		req.Host = tc.host
		if tc.origin != "" {
			req.Header.Set("Origin", tc.origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s with Host %q, Origin %q: %d, want %d", tc.path, tc.host, tc.origin, resp.StatusCode, tc.want)
		}
		if tc.want == 403 && strings.Contains(string(b), "pdmcp") {
			t.Errorf("%s with Host %q: the refusal carries the endpoint's content", tc.path, tc.host)
		}
	}
}
