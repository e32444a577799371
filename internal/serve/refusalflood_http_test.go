package serve_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/pdmcp/pdmcp/audit"
)

// TestHTTPRefusalFloodCostsKilobytes is issue 31's scenario 5: thousands
// of requests refused before their token is even read, sent as fast as
// keep-alive connections carry them, used to add a line each to the audit
// file (5.7 MB in 10 s) and a warning each to standard error. Now each
// kind of refusal is one line and one counted summary a second, so the
// flood adds kilobytes to both, every refusal is still accounted for, and
// nothing the sender chose (method, token) is written.
func TestHTTPRefusalFloodCostsKilobytes(t *testing.T) {
	hs := newHTTPStack(t, 8)
	before, err := os.ReadFile(hs.audit)
	if err != nil {
		t.Fatal(err)
	}
	logBefore := len(hs.stderr.String())

	const (
		conns   = 4
		perConn = 1250 // 5,000 in all
		marker  = "Zx9-sender-chosen-token-Zx9"
	)
	// Three kinds of refusal, and a method no server knows.
	kinds := []struct {
		method, auth string
	}{
		{"POST", ""},                  // no-token
		{"POST", "Bearer " + marker},  // malformed
		{"EXFILTRATE", ""},            // no-token, method written as OTHER
		{"GET", "Basic dXNlcjpwYXNz"}, // no-token (not a bearer token)
	}
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for c := range conns {
		// One client per goroutine, one connection each, kept alive.
		tr := hs.hc.Transport.(*http.Transport).Clone()
		tr.MaxConnsPerHost = 1
		hc := &http.Client{Transport: tr}
		t.Cleanup(tr.CloseIdleConnections)
		wg.Go(func() {
			for i := range perConn {
				k := kinds[(c+i)%len(kinds)]
				req, _ := http.NewRequest(k.method, hs.url, strings.NewReader(`{}`))
				if k.auth != "" {
					req.Header.Set("Authorization", k.auth)
				}
				resp, err := hc.Do(req)
				if err != nil {
					errs <- err
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode/100 != 4 {
					errs <- fmt.Errorf("a flood request was answered %d", resp.StatusCode)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Stopping the server closes the audit file, which writes the
	// summaries of the windows still open.
	hs.stop()

	after, err := os.ReadFile(hs.audit)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(after, before) {
		t.Fatal("the audit file was rewritten, not appended to")
	}
	added := after[len(before):]
	logAdded := hs.stderr.String()[logBefore:]
	const bound = 64 << 10
	if len(added) > bound {
		t.Errorf("%d refused requests added %d bytes to the audit file, want at most %d", conns*perConn, len(added), bound)
	}
	if len(logAdded) > bound {
		t.Errorf("%d refused requests added %d bytes to standard error, want at most %d", conns*perConn, len(logAdded), bound)
	}

	// Every refusal is accounted for: a line of its own, or a count.
	total, own, summaries := 0, 0, 0
	for _, l := range bytes.Split(bytes.TrimSpace(added), []byte("\n")) {
		var m map[string]any
		if err := json.Unmarshal(l, &m); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		switch m["event"] {
		case audit.EventAuthRefused:
			total++
			own++
			if m["method"] != "POST" && m["method"] != "GET" && m["method"] != "OTHER" {
				t.Errorf("a refusal line names method %v", m["method"])
			}
			if m["path"] != "/mcp" {
				t.Errorf("a refusal line names path %v", m["path"])
			}
		case audit.EventRefusalSummary:
			c, _ := m["count"].(float64)
			total += int(c)
			summaries++
		}
	}
	if total != conns*perConn {
		t.Errorf("the audit file accounts for %d refusals (%d lines, %d summaries), want %d", total, own, summaries, conns*perConn)
	}
	if summaries == 0 {
		t.Error("no summary line: the flood was not counted")
	}
	t.Logf("%d refusals: %d bytes of audit (%d own lines, %d summaries), %d bytes of log", total, len(added), own, summaries, len(logAdded))
	// Standard error: a warning per line of the file, no more.
	if got := strings.Count(logAdded, `msg="request refused"`); got != own {
		t.Errorf("%d refusal warnings on standard error, want %d (one per own line)", got, own)
	}
	if got := strings.Count(logAdded, `msg="requests refused (summary)"`); got != summaries {
		t.Errorf("%d summary warnings on standard error, want %d", got, summaries)
	}
	for _, s := range []string{marker, "EXFILTRATE", "dXNlcjpwYXNz"} {
		if bytes.Contains(added, []byte(s)) || strings.Contains(logAdded, s) {
			t.Errorf("%q, sent by the refused caller, was written", s)
		}
	}
}
