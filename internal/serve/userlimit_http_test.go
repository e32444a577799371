package serve_test

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/audit"
	"github.com/pdmcp/pdmcp/internal/mcptest"
	"github.com/pdmcp/pdmcp/internal/serve"
)

// The attacks of issue 31's per-user scenarios, kept as helpers so the
// abuse suite can run them again: each opens its own TLS connections to
// the stack (HTTP/1.1, so one request holds one connection), bounded by
// the count asked for, and every connection is closed when the test ends.

// rawConn is one TLS connection carrying one request of ours.
type rawConn struct {
	c  *tls.Conn
	br *bufio.Reader
}

// dialRaw opens a TLS connection to the stack, speaking HTTP/1.1.
func dialRaw(t *testing.T, hs *httpStack) *rawConn {
	t.Helper()
	u, err := url.Parse(hs.url)
	if err != nil {
		t.Fatal(err)
	}
	cfg := hs.hc.Transport.(*http.Transport).TLSClientConfig.Clone()
	cfg.NextProtos = []string{"http/1.1"}
	c, err := tls.Dial("tcp", u.Host, cfg)
	if err != nil {
		t.Fatalf("dial %s: %v", u.Host, err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{c: c, br: bufio.NewReader(c)}
}

// send writes a POST /mcp with token, declaring a body of declared bytes
// and sending the first len(body) of them.
func (rc *rawConn) send(t *testing.T, hs *httpStack, token string, headers map[string]string, declared int, body string) {
	t.Helper()
	u, _ := url.Parse(hs.url)
	var b strings.Builder
	fmt.Fprintf(&b, "POST %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n"+
		"Accept: application/json, text/event-stream\r\nContent-Length: %d\r\n", u.Path, u.Host, token, declared)
	for k, v := range headers {
		fmt.Fprintf(&b, "%s: %s\r\n", k, v)
	}
	b.WriteString("\r\n")
	b.WriteString(body)
	if _, err := io.WriteString(rc.c, b.String()); err != nil {
		t.Fatalf("send: %v", err)
	}
}

// response reads the response's status line and headers, waiting at most
// wait (a bound against a hang, not a measure); it returns 0 when none
// came.
func (rc *rawConn) response(t *testing.T, wait time.Duration) *http.Response {
	t.Helper()
	_ = rc.c.SetReadDeadline(time.Now().Add(wait))
	resp, err := http.ReadResponse(rc.br, nil)
	if err != nil {
		return nil
	}
	return resp
}

// closedByServer reports whether the server closed the connection after
// the response (the rest of the body read to its end, then EOF).
func (rc *rawConn) closedByServer(t *testing.T, resp *http.Response, wait time.Duration) bool {
	t.Helper()
	_ = rc.c.SetReadDeadline(time.Now().Add(wait))
	_, _ = io.Copy(io.Discard, resp.Body)
	_, err := rc.br.ReadByte()
	return err == io.EOF
}

// stallBodies opens n connections for token, each sending a POST that
// declares declared bytes of body and sends only its first few, then
// nothing: a signed-in user pinning the server's memory.
func stallBodies(t *testing.T, hs *httpStack, token string, n, declared int) []*rawConn {
	t.Helper()
	conns := make([]*rawConn, n)
	for i := range conns {
		conns[i] = dialRaw(t, hs)
		conns[i].send(t, hs, token, nil, declared, `{"jsonrpc":"2.0",`)
	}
	return conns
}

// listenBody is a 2026-07-28 subscriptions/listen request with id.
func listenBody(id int) string {
	return `{"jsonrpc":"2.0","id":` + strconv.Itoa(id) + `,"method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true},` + newMeta + `}}`
}

// openListen sends one subscriptions/listen request on a new connection
// and returns the connection and the response's head (its stream, when
// accepted, stays open until the connection is closed).
func openListen(t *testing.T, hs *httpStack, token string, id int) (*rawConn, *http.Response) {
	t.Helper()
	rc := dialRaw(t, hs)
	body := listenBody(id)
	rc.send(t, hs, token, map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "subscriptions/listen"}, len(body), body)
	resp := rc.response(t, 30*time.Second)
	if resp == nil {
		t.Fatalf("listen %d: no response", id)
	}
	return rc, resp
}

// metricOr reads one series from /metrics (name with its labels, as the
// text format prints them), or 0 when it is not there yet.
func metricOr(t *testing.T, hs *httpStack, series string) float64 {
	t.Helper()
	v, _ := hs.scrape(t, series)
	return v
}

// waitMetric waits, bounded, until /metrics says series is want.
func waitMetric(t *testing.T, hs *httpStack, series string, want float64) {
	t.Helper()
	var got float64
	for range 300 {
		if got = metricOr(t, hs, series); got == want {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s is %v, want %v", series, got, want)
}

// refusedCount reads the refusals counted for class and status.
func refusedCount(t *testing.T, hs *httpStack, class string, status int) float64 {
	t.Helper()
	return metricOr(t, hs, fmt.Sprintf(`pdmcp_http_refusals_total{class=%q,status="%d"}`, class, status))
}

// refusalLines reads the audit file's refusals of class: the lines of
// their own and the summaries, and the refusals they stand for in all
// (each line one, each summary its count), by caller.
func refusalLines(t *testing.T, hs *httpStack, class string) (own, summaries []map[string]any, byCaller map[string]int) {
	t.Helper()
	byCaller = map[string]int{}
	for _, l := range hs.auditLines(t) {
		if l["class"] != class {
			continue
		}
		caller, _ := l["caller"].(string)
		switch l["event"] {
		case audit.EventAuthRefused:
			own = append(own, l)
			byCaller[caller]++
		case audit.EventRefusalSummary:
			summaries = append(summaries, l)
			n, _ := l["count"].(float64)
			byCaller[caller] += int(n)
		}
	}
	return own, summaries, byCaller
}

// TestStalledBodiesOfOneUser is issue 31's scenario 2: carol, signed in,
// opens connections whose POSTs declare a body and send almost none of it.
// Past her body budget (1 MiB here: five bodies of 200,000 bytes) and her
// requests in flight (8 here), she is refused 429 with Retry-After and the
// connection closed, not drained; the bodies held are cut off when the
// body timeout passes (408, connection closed) and everything they held is
// given back; alice is answered meanwhile. Every refusal is audited as
// carol's, a burst counted into a summary, not written line by line.
func TestStalledBodiesOfOneUser(t *testing.T) {
	hs := newHTTPStack(t, 4, withHTTPConfig(`,"maxRequestsPerUser":8,"maxBodyBytesPerUser":1048576,"bodyTimeoutSeconds":10`))
	carol := hs.token(t, "carol", "pw-c")
	alice := hs.connect(t, hs.token(t, "alice", "pw-a"))

	// settle waits for every response of conns: wantCut 408s (the bodies
	// held, cut at the timeout) and the rest refused at once with 429.
	settle := func(what string, conns []*rawConn, wantCut int) {
		t.Helper()
		cut, refused := 0, 0
		for i, rc := range conns {
			resp := rc.response(t, 60*time.Second)
			if resp == nil {
				t.Fatalf("%s, connection %d: no answer; the stalled body is waited for", what, i)
			}
			switch resp.StatusCode {
			case http.StatusRequestTimeout:
				cut++
			case http.StatusTooManyRequests:
				refused++
				if resp.Header.Get("Retry-After") == "" {
					t.Errorf("%s, connection %d: 429 without Retry-After", what, i)
				}
			default:
				t.Errorf("%s, connection %d: %d, want 408 or 429", what, i, resp.StatusCode)
			}
			if !rc.closedByServer(t, resp, 30*time.Second) {
				t.Errorf("%s, connection %d: %d and the connection kept open for the rest of the body", what, i, resp.StatusCode)
			}
		}
		if cut != wantCut || refused != len(conns)-wantCut {
			t.Errorf("%s: %d cut off at the timeout and %d refused, want %d and %d", what, cut, refused, wantCut, len(conns)-wantCut)
		}
	}

	// Large bodies: the body budget binds first.
	big := stallBodies(t, hs, carol, 40, 200000)
	waitMetric(t, hs, "pdmcp_http_request_body_bytes", 5*200000)
	waitMetric(t, hs, `pdmcp_http_refusals_total{class="too-many-bodies",status="429"}`, 35)
	if m, isErr := mcptest.Call(t, alice, "read_protected_document", map[string]any{"documentId": "proposal-aurora"}); isErr {
		t.Fatalf("alice while carol's bodies are held: %v", m)
	}
	settle("200,000-byte bodies", big, 5)
	waitMetric(t, hs, "pdmcp_http_request_body_bytes", 0)
	waitMetric(t, hs, "pdmcp_http_requests_in_flight", 0)

	// Small bodies: the requests in flight bind.
	small := stallBodies(t, hs, carol, 30, 100)
	waitMetric(t, hs, "pdmcp_http_requests_in_flight", 8)
	waitMetric(t, hs, `pdmcp_http_refusals_total{class="too-many-requests",status="429"}`, 22)
	if m, isErr := mcptest.Call(t, alice, "read_protected_document", map[string]any{"documentId": "proposal-cirrus"}); isErr {
		t.Fatalf("alice while carol's requests are in flight: %v", m)
	}
	settle("100-byte bodies", small, 8)
	waitMetric(t, hs, "pdmcp_http_requests_in_flight", 0)
	waitMetric(t, hs, "pdmcp_http_request_body_bytes", 0)
	if got := refusedCount(t, hs, serve.ClassBodyTimeout, http.StatusRequestTimeout); got != 13 {
		t.Errorf("%v bodies cut off, want 13", got)
	}

	// Carol, once her bodies are gone, is served again.
	if m, isErr := mcptest.Call(t, hs.connect(t, carol), "list_approved_documents", map[string]any{}); isErr {
		t.Errorf("carol after her stalled bodies: %v", m)
	}

	// Every refusal is in the audit file, as carol's, each burst counted
	// into a line and a summary rather than written line by line.
	hs.stop()
	carolDigest := audit.Digest12(hs.issuer + "|carol")
	for _, want := range []struct {
		class, reason string
		status, n     int
		// maxLines: a flood comes within a second or two; the 13 bodies
		// cut off come in two bursts, each spread as its sends were.
		maxLines int
	}{
		{serve.ClassTooManyBodies, serve.ReasonUserBodies, http.StatusTooManyRequests, 35, 35 / 2},
		{serve.ClassTooManyRequests, serve.ReasonUserRequests, http.StatusTooManyRequests, 22, 22 / 2},
		{serve.ClassBodyTimeout, serve.ReasonBodyTimeout, http.StatusRequestTimeout, 13, 12},
	} {
		own, summaries, byCaller := refusalLines(t, hs, want.class)
		if byCaller[carolDigest] != want.n || len(byCaller) != 1 {
			t.Errorf("%s: the audit file accounts for %v refusals by caller, want %d, all carol's (%s)", want.class, byCaller, want.n, carolDigest)
		}
		if lines := len(own) + len(summaries); len(own) == want.n || lines > want.maxLines {
			t.Errorf("%s: %d audit lines for %d refusals, want them counted, not written one by one", want.class, lines, want.n)
		}
		for _, l := range own {
			if l["reason"] != want.reason || l["status"] != float64(want.status) {
				t.Errorf("%s: audit line %v, want reason %s and status %d", want.class, l, want.reason, want.status)
			}
		}
	}
}

// TestListenStreamsAreBounded is issue 31's scenario 3: 2026-07-28
// requests, served statelessly, are held to the per-user caps too. carol
// may hold 3 subscriptions/listen streams and no more (429 with
// Retry-After and the JSON-RPC error for her request's id); bob may still
// open his; the server's 5 in all hold across users (503); and a stream
// closed gives its place back.
func TestListenStreamsAreBounded(t *testing.T) {
	hs := newHTTPStack(t, 4, withHTTPConfig(`,"maxListenStreamsPerUser":3,"maxListenStreams":5`))
	carol, bob, alice := hs.token(t, "carol", "pw-c"), hs.token(t, "bob", "pw-b"), hs.token(t, "alice", "pw-a")
	wantOpen := func(who string, resp *http.Response) {
		t.Helper()
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			t.Fatalf("%s's listen stream: %d %s, want 200 and an event stream", who, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
	}
	wantRefused := func(who string, resp *http.Response, status, id int, reason string) {
		t.Helper()
		defer resp.Body.Close()
		var m struct {
			ID    int `json:"id"`
			Error struct {
				Code int `json:"code"`
				Data struct {
					Reason string `json:"reason"`
				} `json:"data"`
			} `json:"error"`
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		if resp.StatusCode != status || resp.Header.Get("Retry-After") == "" || json.Unmarshal(b, &m) != nil ||
			m.ID != id || m.Error.Code != -32000 || m.Error.Data.Reason != reason {
			t.Fatalf("%s's listen stream past the cap: %d, Retry-After %q, %s; want %d with Retry-After and error -32000 (%s) for id %d",
				who, resp.StatusCode, resp.Header.Get("Retry-After"), b, status, reason, id)
		}
	}

	var carols []*rawConn
	for i := range 3 {
		rc, resp := openListen(t, hs, carol, 10+i)
		wantOpen("carol", resp)
		carols = append(carols, rc)
	}
	for i := range 4 { // a burst past her cap
		_, resp := openListen(t, hs, carol, 20+i)
		wantRefused("carol", resp, http.StatusTooManyRequests, 20+i, serve.ReasonUserStreams)
	}
	for i := range 2 {
		_, resp := openListen(t, hs, bob, 30+i)
		wantOpen("bob", resp)
	}
	waitMetric(t, hs, "pdmcp_http_listen_streams", 5)
	// The server is at its cap: alice, with none of her own, waits.
	_, resp := openListen(t, hs, alice, 40)
	wantRefused("alice", resp, http.StatusServiceUnavailable, 40, serve.ReasonServerStreams)
	// A stream ends when its host goes; its place is free again.
	carols[0].c.Close()
	waitMetric(t, hs, "pdmcp_http_listen_streams", 4)
	_, resp = openListen(t, hs, alice, 41)
	wantOpen("alice", resp)
	// Streams are not requests in flight: other calls go on.
	if m := resultOf(t, hs, carol, "tools/list", "", ""); m["tools"] == nil {
		t.Errorf("carol's tools/list with three streams open: %v", m)
	}

	hs.stop()
	_, _, byCaller := refusalLines(t, hs, serve.ClassTooManyStreams)
	if want := map[string]int{audit.Digest12(hs.issuer + "|carol"): 4, audit.Digest12(hs.issuer + "|alice"): 1}; fmt.Sprint(byCaller) != fmt.Sprint(want) {
		t.Errorf("the audit file accounts for %v streams refused by caller, want %v", byCaller, want)
	}
}
